"""embedlab.notebook."""
