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
    p.add_argument(
        "--shard",
        metavar="I/N",
        default=None,
        help="run only the I-th of N parts of the matrix (one CI job each; `embedlab regress merge` joins them)",
    )
    p.add_argument(
        "--durations",
        type=Path,
        default=None,
        metavar="FILE",
        help="balance --shard by the job durations in FILE (a results.json or a durations file; "
        "default: <matrix>.durations.json beside the matrix, where there is one, else by job count)",
    )
    p.set_defaults(run=_run_regress)
    parts = p.add_subparsers(dest="regress_command", metavar="{merge,save-durations}", parser_class=type(p))
    merge = parts.add_parser(
        "merge",
        help="make one run of the shards' run folders",
        description=MERGE_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    merge.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="a shard's run folder")
    merge.add_argument("--out", type=Path, required=True, help="the merged run goes to OUT/<run-id>-merged/")
    merge.add_argument(
        "--link", action="store_true", help="link the shards' reports and logs instead of copying them"
    )
    merge.set_defaults(run=_run_merge)
    save = parts.add_parser(
        "save-durations",
        help="write the job durations that --shard balances by, from runs' results.json",
        description="Writes each job's mean duration over the runs given (run folders or results.json "
        "files; a merged run holds every job) to FILE, which --shard reads: by default the file "
        "beside the matrix, which CI's shards find without being told.",
    )
    save.add_argument("runs", nargs="+", type=Path, metavar="RUN", help="a run folder or its results.json")
    save.add_argument(
        "--to",
        type=Path,
        default=None,
        metavar="FILE",
        help="where to write (default: <matrix>.durations.json beside --matrix's matrix)",
    )
    save.add_argument("--matrix", type=Path, default=None, help="the matrix (default: the packaged one)")
    save.set_defaults(run=_run_save_durations)


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
    "examples: embedlab regress -k same_model -k drain; embedlab regress --matrix my.toml --out runs/; "
    "embedlab regress --shard 2/3 --out shard2 (one CI job per shard), then embedlab regress merge "
    "shard1/*/ shard2/*/ shard3/*/ --out outputs (docs/sharding.md). "
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
        shard=args.shard,
        durations=args.durations,
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


MERGE_DESCRIPTION = """\
Makes one run of the run folders of `embedlab regress --shard I/N`: OUT/<run-id>-merged/ with
one index.html, results.json and junit.xml, and every job's report, notebook and logs copied
(or linked, --link). The next run in OUT compares with it, as with any run.

Refused (one line, exit 2, nothing written): a folder that is not a shard; shards of
different matrices, commits or splits; a shard given twice. Marked (the run is written as
incomplete, exit 1, one line each): a shard missing, interrupted or still running."""


def _run_merge(args: argparse.Namespace) -> int:
    import shlex

    from ..reports.merge import merge_runs, summary

    run = merge_runs(args.runs, out=args.out, link=args.link, command=shlex.join(["embedlab", *args.argv]))
    for line in run.problems:
        print(f"INCOMPLETE: {line}", file=sys.stderr)
    for scenario in run.failed:
        report = scenario.get("report_html") or scenario.get("notebook_out") or "(no report)"
        print(
            f"FAILED {scenario['name']}: {scenario['summary']}\n    report: {run.run_dir / report}",
            file=sys.stderr,
        )
    print(summary(run))
    print(run.index_html)
    return 0 if run.passed else EXIT_FAILED


def _run_save_durations(args: argparse.Namespace) -> int:
    from ..reports.matrix import default_matrix_path
    from ..reports.shards import default_durations_path, save_durations

    to = args.to or default_durations_path(args.matrix or default_matrix_path())
    data = save_durations(args.runs, to)
    print(f"{counted(len(data['durations']), 'job duration')} from {', '.join(data['from_runs'])} -> {to}")
    return 0
