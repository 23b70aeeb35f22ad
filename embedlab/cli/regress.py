"""`embedlab regress`: every notebook of a matrix through papermill, and the reports they leave."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .. import defaults
from ..defaults import EXIT_FAILED
from ..wording import counted
from .serve import positive_float

__all__ = ["add_regress"]


def add_regress(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "regress",
        help="run every notebook for every parameter set of a matrix; write reports",
        description=REGRESS_DESCRIPTION,
        epilog=REGRESS_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--matrix", type=Path, default=None, help="a TOML matrix (default: the packaged default matrix)"
    )
    p.add_argument(
        "--out", type=Path, default=Path("outputs"), help="runs go to OUT/<run-id>/ (default: outputs)"
    )
    p.add_argument(
        "--timeout",
        type=positive_float,
        default=defaults.CELL_TIMEOUT_S,
        help="seconds any one notebook cell may take",
    )
    p.add_argument("--show-code", action="store_true", help="show code cells in the HTML reports")
    p.add_argument(
        "-k",
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help="run only the jobs whose name (<notebook or scenario>--<set>) contains NAME; repeat for several",
    )
    p.set_defaults(run=_run_regress)


REGRESS_DESCRIPTION = """\
Runs every notebook of a TOML matrix once per parameter set, through papermill, and writes
OUT/<run-id>/: each executed notebook and its HTML report, results.json, junit.xml and
index.html (with what changed since the last run in OUT). The whole matrix is checked
before anything runs.

The matrix (the default one is embedlab/reports/matrices/default.toml):

  notebooks = ["same_model_load_balance", "multi_model_dispatch"]  # notebooks/<name>.ipynb
  scenarios = ["drain"]          # registered scenarios, run through notebooks/scenario.ipynb
  [defaults]                     # values under every parameter set
  requests = 20
  [[params]]                     # one parameter set; each notebook runs once per set
  name = "embedded-hash"         # the set's name in file names and history (keep it stable)
  stack = "embedded"
  notebooks = ["failover"]       # a set may list its own notebooks and scenarios
  [params.multi_model_dispatch]  # values for one notebook (or scenario) in this set only
  models = ["a", "b"]

Keys are the notebooks' parameters (their cell tagged `parameters`): stack, engine,
models, workers, weights, requests, concurrency, seed, ... An unknown notebook, scenario
or parameter, or a value the scenario cannot take, is one error line and exit 2."""
REGRESS_EPILOG = (
    "examples: embedlab regress -k same_model -k drain; embedlab regress --matrix my.toml --out runs/. "
    "Exit codes: 0 every run passed (or reported), 1 a run failed, 2 could not run, "
    "130 interrupted by Ctrl-C (143 by SIGTERM): the notebooks that finished keep their reports."
)


def _run_regress(args: argparse.Namespace) -> int:
    import shlex

    from ..reports.regress import regress

    run = regress(
        matrix=args.matrix,
        out=args.out,
        timeout=args.timeout,
        show_code=args.show_code,
        only=args.only,
        progress=lambda line: print(line, flush=True),
        command=shlex.join(["embedlab", *args.argv]),
    )
    counts = ", ".join(
        f"{sum(o.verdict == v for o in run.outcomes)} {v}" for v in sorted({o.verdict for o in run.outcomes})
    )
    print(f"{counted(len(run.outcomes), 'notebook run')} in {run.wall_seconds:.0f} s: {counts}")
    for outcome in run.failed:
        report = outcome.html or outcome.notebook_out
        print(f"FAILED {outcome.job.name}: {outcome.summary}\n    report: {report}", file=sys.stderr)
    print(run.index_html)
    return 0 if run.passed else EXIT_FAILED
