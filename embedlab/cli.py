"""`embedlab ...`: parse, call one library function, map errors to exit codes.

Exit codes: 0 success or passed, 1 a check failed, 2 could not run (bad arguments,
a start failure, an unreachable URL), 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import defaults
from .serve_commands import SERVING, engine_options_from_args, positive_float
from .stack_commands import STACK_COMMANDS
from .wording import counted

__all__ = ["build_parser", "engine_options_from_args", "main"]

EXIT_FAILED = 1
EXIT_CANNOT_RUN = 2

Command = Callable[[argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # One line and exit 2, as for every other reason a command cannot run.
        self.exit(EXIT_CANNOT_RUN, f"{self.prog}: error: {message}\n")

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        # --help shows every real default, also of options without help text (and not
        # "None" or "False", which say nothing).
        # `is`, not `in`: 0 == False, and a default of 0 is worth showing.
        meaningful = not any(
            action.default is v for v in (None, False, argparse.SUPPRESS)
        ) and action.default not in ("", [])
        if action.option_strings and meaningful and "default" not in (action.help or "").lower():
            action.help = f"{action.help} (default: %(default)s)" if action.help else "default: %(default)s"
        return action


# -- harness -------------------------------------------------------------------------------


def _add_scenario(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from .engines import ENGINES
    from .scenarios.registry import SCENARIOS
    from .stacks import STACKS

    listing = "; ".join(f"{s.name}: {s.help.rstrip('.')}" for s in map(SCENARIOS.get, SCENARIOS.names()))
    p = sub.add_parser(
        "scenario",
        help="launch (or attach to) a deployment, run one scenario, print the verdict",
        description=f"Scenarios: {listing}.",
    )
    p.add_argument("scenario", choices=SCENARIOS.names())
    p.add_argument("--stack", choices=STACKS.names(), default="embedded")
    p.add_argument("--engine", choices=sorted(ENGINES), default="hash")
    p.add_argument(
        "--models", default="", help="comma-separated model names; worker i serves models[i] in multi-model"
    )
    p.add_argument(
        "--model-path",
        action="append",
        default=[],
        help="one per model, or one for all (default: tiny local models)",
    )
    p.add_argument("--workers", type=int, default=None, help="workers of the one model (default: 2)")
    p.add_argument("--weights", default="", help="comma-separated worker weights, for same-model")
    p.add_argument(
        "--requests", type=int, default=None, help="requests per burst (default: the scenario's own)"
    )
    p.add_argument(
        "--concurrency", type=int, default=None, help="requests in flight (default: the scenario's own)"
    )
    p.add_argument("--victim", type=int, default=1, help="failover and drain: the worker that leaves")
    p.add_argument(
        "--kill-after", type=int, default=50, help="failover: the victim dies after this many responses"
    )
    p.add_argument(
        "--discovery",
        choices=["file", "etcd"],
        default="file",
        help="dynamo: file, or etcd (the run starts one)",
    )
    p.add_argument(
        "--hosts",
        type=int,
        default=1,
        help="simulated hosts: more than 1 runs network namespaces (root; dynamo on etcd)",
    )
    p.add_argument(
        "--lease-ttl",
        type=positive_float,
        default=None,
        help="seconds a lease lives (default: the scenario's, else 3)",
    )
    p.add_argument(
        "--restart",
        choices=["never", "on-exit"],
        default=None,
        help="bring a worker back on its host when it exits",
    )
    p.add_argument(
        "--etcd-endpoints",
        default="",
        help="attach: the cluster's etcd, to list the instances it believes live",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--router-mode",
        default=None,
        help="the frontend's policy, in its own names (default: its own default)",
    )
    p.add_argument("--pooling", default=None)
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument(
        "--frontend-url", default="", help="attach: the frontend of a running deployment (launches nothing)"
    )
    p.add_argument(
        "--system-url", action="append", default=[], help="attach: one per worker, in worker order"
    )
    p.add_argument(
        "--metric",
        default=defaults.METRIC,
        help='counter selector, e.g. http_requests_total{handler="/v1/embeddings"}',
    )
    p.add_argument(
        "--run-dir", default="", help="where logs go (default: a fresh directory under the temp dir)"
    )
    p.add_argument("--startup-timeout", type=positive_float, default=defaults.STARTUP_TIMEOUT_S)
    p.add_argument(
        "--worker-arg", action="append", default=[], help="extra argument for every worker (repeat)"
    )
    p.add_argument("--json", type=Path, default=None, help="write the full result as JSON here")
    p.add_argument("--plot", type=Path, default=None, help="write the scenario's main figure (PNG) here")
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show the launch and a bar per burst, on stderr (default: the launch alone, on a terminal)",
    )
    p.set_defaults(run=_run_scenario)


def _run_scenario(args: argparse.Namespace) -> int:
    from .scenarios.plans import ScenarioPlan, run_scenario
    from .views import figures_table, plot, table

    plan = ScenarioPlan(
        scenario=args.scenario,
        stack=args.stack,
        engine=args.engine,
        models=args.models,
        model_paths=tuple(args.model_path),
        workers=args.workers,
        weights=args.weights,
        requests=args.requests,
        concurrency=args.concurrency,
        seed=args.seed,
        router_mode=args.router_mode,
        pooling=args.pooling,
        max_model_len=args.max_model_len,
        frontend_url=args.frontend_url,
        system_urls=tuple(args.system_url),
        metric=args.metric,
        run_dir=args.run_dir,
        startup_timeout=args.startup_timeout,
        worker_args=tuple(args.worker_arg),
        victim=args.victim,
        kill_after=args.kill_after,
        progress=bool(args.progress),
        discovery=args.discovery,
        hosts=args.hosts,
        lease_ttl=args.lease_ttl,
        restart=args.restart,
        etcd_endpoints=args.etcd_endpoints,
    )
    result = run_scenario(
        plan, launch_progress=sys.stderr.isatty() if args.progress is None else args.progress
    )
    with _pandas_display():
        print(table(result).drop(columns=["ok"]).to_string(index=False))
    for burst in result.bursts:
        if burst.rule:
            print(f"asserted ({burst.name}): {burst.rule}")
        if burst.check is not None and burst.check.p_value is not None:
            print(f"fairness p-value ({burst.name}): {burst.check.p_value:.4g}")
    figures = figures_table(result)
    width = max(map(len, figures["figure"]), default=0)
    for figure, value in figures.itertuples(index=False):
        print(f"{figure:<{width}}  {value}")
    lat = result.latency_ms()
    print(f"latency p50 {lat['p50']:.2f} ms, p99 {lat['p99']:.2f} ms; wall {result.wall_seconds:.2f} s")
    if args.json:
        result.save_json(args.json)
    if args.plot:
        plot(result).savefig(args.plot, dpi=100)
    print(result.summary())
    return 0 if result.ok else EXIT_FAILED


def _add_regress(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
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

The matrix (the default one is embedlab/matrices/default.toml):

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
    "Exit codes: 0 every run passed (or reported), 1 a run failed, 2 could not run."
)


def _run_regress(args: argparse.Namespace) -> int:
    from .regression import regress

    run = regress(
        matrix=args.matrix,
        out=args.out,
        timeout=args.timeout,
        show_code=args.show_code,
        only=args.only,
        progress=lambda line: print(line, flush=True),
    )
    counts = ", ".join(
        f"{sum(o.status == s for o in run.outcomes)} {s}" for s in sorted({o.status for o in run.outcomes})
    )
    print(f"{counted(len(run.outcomes), 'notebook run')} in {run.wall_seconds:.0f} s: {counts}")
    for outcome in run.failed:
        report = outcome.html or outcome.notebook_out
        print(f"FAILED {outcome.job.name}: {outcome.summary}\n    report: {report}", file=sys.stderr)
    print(run.index_html)
    return 0 if run.passed else EXIT_FAILED


def _add_conformance(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from .scenarios.battery import BATTERY
    from .stacks import battery_stacks

    p = sub.add_parser(
        "conformance",
        help="run the battery of checks against every stack; write a stack x check matrix",
        description="Each check is a registered scenario, run against each stack with its own defaults. Writes "
        "OUT/<run-id>/conformance.html, conformance.json and junit.xml. Exits 0 when every cell ran to a "
        "verdict (a failed check is a finding about a router, not a broken run), 1 when a cell broke.",
    )
    p.add_argument("--stacks", default=",".join(battery_stacks()), help="comma-separated stacks")
    p.add_argument(
        "--checks", default=",".join(BATTERY), help="comma-separated checks (registered scenarios)"
    )
    p.add_argument("--out", type=Path, default=Path("outputs"), help="runs go to OUT/<run-id>/")
    p.add_argument(
        "--timeout",
        type=positive_float,
        default=defaults.CELL_TIMEOUT_S,
        help="seconds any one notebook cell may take",
    )
    p.add_argument(
        "--markdown",
        type=Path,
        default=None,
        help="also write the matrix as Markdown here (docs/conformance.md)",
    )
    p.set_defaults(run=_run_conformance)


def _run_conformance(args: argparse.Namespace) -> int:
    from .conformance import conformance

    split = lambda text: [part.strip() for part in text.split(",") if part.strip()]  # noqa: E731
    run = conformance(
        stacks=split(args.stacks),
        checks=split(args.checks),
        out=args.out,
        timeout=args.timeout,
        progress=lambda line: print(line, flush=True),
    )
    counts = ", ".join(
        f"{sum(c.verdict == v for c in run.matrix.cells)} {v}"
        for v in sorted({c.verdict for c in run.matrix.cells})
    )
    print(f"{len(run.matrix.cells)} cells: {counts}")
    if args.markdown:
        from .jsonio import load_json
        from .report import conformance_markdown

        command = (
            "embedlab conformance " + " ".join(sys.argv[2:])
            if sys.argv[1:2] == ["conformance"]
            else "embedlab conformance"
        )
        args.markdown.write_text(conformance_markdown(load_json(run.json), command=command))
    print(run.html)
    return 0 if run.complete else EXIT_FAILED


def _pandas_display():  # type: ignore[no-untyped-def]
    import pandas as pd

    return pd.option_context("display.width", 200, "display.max_columns", 20)


# -- entry point ---------------------------------------------------------------------------

SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [  # type: ignore[type-arg]
    *SERVING,
    *STACK_COMMANDS,
    _add_scenario,
    _add_regress,
    _add_conformance,
]


DESCRIPTION = (
    "Prove how a frontend routes /v1/embeddings traffic across embedding workers: launch a frontend and "
    "its workers (or attach to a running deployment), send bounded bursts, and judge each worker's own "
    "request counter. Run one scenario with `embedlab scenario`, every scenario notebook with `embedlab regress`."
)
EPILOG = "exit codes: 0 passed (or figures reported, not asserted), 1 a check failed, 2 could not run, 130 interrupted"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="embedlab", description=DESCRIPTION, epilog=EPILOG)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add in SUBCOMMANDS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from .errors import CheckFailedError, ConfigError, EmbedlabError
    from .plugins import load_plugins, plugin_modules

    try:  # before any name resolves: a plugin's stacks and engines are --stack and --engine choices
        load_plugins(plugin_modules())
    except ConfigError as exc:
        print(f"embedlab: error: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    parser = build_parser()
    args = parser.parse_args(argv)
    run: Command = args.run
    try:
        return run(args)
    except KeyboardInterrupt:
        print("embedlab: interrupted", file=sys.stderr)
        return 130
    except CheckFailedError as exc:
        print(f"embedlab: FAILED: {str(exc).splitlines()[0]}", file=sys.stderr)
        return EXIT_FAILED
    except (EmbedlabError, OSError) as exc:
        message = " ".join(str(exc).split()) or exc.__class__.__name__
        print(f"embedlab {args.command}: error: {message}", file=sys.stderr)
        return EXIT_CANNOT_RUN


if __name__ == "__main__":
    sys.exit(main())
