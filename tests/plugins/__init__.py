"""Plugin modules that tests load the way users do: by `EMBEDLAB_PLUGINS=tests.plugins.<name>`."""
