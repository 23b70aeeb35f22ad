"""embedlab.scenarios.builtin."""
