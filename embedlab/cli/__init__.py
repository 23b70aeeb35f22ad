"""The command line: `embedlab ...` (the console script `embedlab.cli:main`, and `python -m embedlab`)."""

from .entry import main

__all__ = ["main"]
