"""The command line: `embedlab ...` (the console script `embedlab.cli:main`, and `python -m embedlab`).

    entry        main(): the parser, plugins loaded first, errors mapped to exit codes
    scenario     `embedlab scenario NAME`: a subcommand per scenario, its knobs as options
    serve        `embedlab frontend`, `worker`, `dynamo-worker`, `make-tiny-model`
    stacks       `embedlab stacks`        regress, conformance: `embedlab regress`, `conformance`
    watch        `embedlab watch`: the pool's checks continuously, on /metrics

The top layer: it may import everything. `main` is the one name imported here (the
console script's), and `entry` imports only the commands' parsers: the harness loads
when a harness command runs.
"""

from .entry import main

__all__ = ["main"]
