"""embedlab.stacks."""
