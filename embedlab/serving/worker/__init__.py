"""embedlab.serving.worker."""
