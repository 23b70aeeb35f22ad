"""embedlab.cluster."""
