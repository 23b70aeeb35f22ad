"""embedlab.serving.frontend."""
