"""embedlab.cli."""
