"""embedlab.reports."""
