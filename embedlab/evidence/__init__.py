"""embedlab.evidence."""
