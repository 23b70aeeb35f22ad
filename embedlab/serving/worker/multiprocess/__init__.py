"""embedlab.serving.worker.multiprocess."""
