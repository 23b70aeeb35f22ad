import sys

from .cli.entry import main

# The guard matters: vLLM's CPU engine spawns processes that re-import the main module.
if __name__ == "__main__":
    sys.exit(main())
