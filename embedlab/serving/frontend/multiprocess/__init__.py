"""embedlab.serving.frontend.multiprocess."""
