"""`embedlab scenario NAME`: launch (or attach to) a deployment, run one scenario, print the verdict.

Every registered scenario is a subcommand of its own: the options every scenario shares
(the deployment, attach and run settings of `ScenarioPlan`), then the scenario's own knobs,
read from its params class (`kill_after` becomes `--kill-after`, type-checked by argparse:
a badly typed value is one line naming the option, and exit 2). `--help` lists both.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .. import defaults
from ..cluster.spec import DISCOVERY_BACKENDS
from ..defaults import EXIT_FAILED
from .serve import positive_float

__all__ = ["add_scenario"]

# What the options every scenario takes are called on the plan, where the two names differ.
_PLAN_NAMES = {"model_path": "model_paths", "system_url": "system_urls", "worker_arg": "worker_args"}


def add_scenario(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from ..scenarios.registry import SCENARIOS

    p = sub.add_parser(
        "scenario",
        help="launch (or attach to) a deployment, run one scenario, print the verdict",
        description="Run one registered scenario; `embedlab scenario NAME --help` lists its options and knobs.",
    )
    names = p.add_subparsers(dest="scenario", required=True, metavar="NAME", parser_class=type(p))
    from ..scenarios.plan import check_knob_names

    for name in SCENARIOS.names():
        scenario = SCENARIOS.get(name)
        check_knob_names(scenario)
        q = names.add_parser(name, help=scenario.help, description=f"{name}: {scenario.help}.")
        _add_plan_options(q, scenario)
        own = q.add_argument_group(f"{name}'s own knobs")
        q.set_defaults(run=_run_scenario, knobs=[_add_knob(own, k) for k in _knobs(scenario)])


def _knobs(scenario: Any) -> list[Any]:
    from ..scenarios.params import knobs

    return knobs(scenario.params_class)


def _add_knob(group: argparse._ArgumentGroup, knob: Any) -> str:
    """`--name` for a knob, converting as its type says; returns the name it is stored under."""
    shown = ",".join(map(str, knob.default)) if isinstance(knob.default, tuple) else knob.default
    # argparse formats help with %: a knob's "99 %" would be read as a format.
    help = f"{knob.help} (default: {shown})".replace("%", "%%")
    if knob.base is bool:
        group.add_argument(knob.option, dest=knob.name, action=argparse.BooleanOptionalAction, help=help)
    else:
        # Tuples come as comma-separated text; the knob itself splits and checks each item.
        kind = knob.base if knob.base in (int, float) else str
        metavar = knob.name.upper()
        group.add_argument(knob.option, dest=knob.name, type=kind, metavar=metavar, help=help)
    return knob.name


def _add_plan_options(p: argparse.ArgumentParser, scenario: Any) -> None:
    from ..cluster.stack_registry import STACKS
    from ..cluster.worker_server import WORKER_SERVERS
    from ..engines import ENGINES

    p.add_argument("--stack", choices=STACKS.names(), default="embedded")
    p.add_argument("--engine", choices=sorted(ENGINES), default="hash", help="embedlab's worker's engine")
    p.add_argument(
        "--worker-server",
        choices=WORKER_SERVERS.names(),
        default="embedlab",
        help="what each worker runs: embedlab's worker, vllm serve, Infinity, ... (default: embedlab)",
    )
    p.add_argument(
        "--models", default="", help="comma-separated model names; worker i serves models[i] in multi-model"
    )
    p.add_argument(
        "--model-path",
        action="append",
        default=[],
        help="one per model, or one for all: a directory or a known model's name, e.g. all-MiniLM-L6-v2 "
        "(default: tiny local models)",
    )
    p.add_argument(
        "--workers", type=int, default=None, help=f"replicas of each model (default: {_workers(scenario)})"
    )
    p.add_argument(
        "--replicas",
        default="",
        help="comma-separated replicas per model, in place of --workers (give one of the two): 4,2",
    )
    p.add_argument("--weights", default="", help="comma-separated worker weights, model by model")
    p.add_argument(
        "--discovery",
        choices=DISCOVERY_BACKENDS,
        default=defaults.DISCOVERY,
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
        "--restart-limit",
        type=int,
        default=None,
        help=f"on-exit: restarts within {defaults.RESTART_WINDOW_S:g} s before a worker is given up on "
        f"(default: {defaults.RESTART_LIMIT})",
    )
    p.add_argument(
        "--restart-backoff",
        type=float,
        default=None,
        help=f"on-exit: seconds before a restart, doubled for each recent one (default: {defaults.RESTART_BACKOFF_S:g})",
    )
    p.add_argument(
        "--canaries",
        action=argparse.BooleanOptionalAction,
        default=False,
        help=f"dynamo: Dynamo's health-check canaries on every worker idle for {defaults.CANARY_WAIT_S} s",
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
        "--worker-models",
        default="",
        help="attach: the model each --system-url's worker serves, e.g. A,A,B,B",
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
    p.add_argument(
        "--frontend-arg", action="append", default=[], help="extra argument for the frontend (repeat)"
    )
    p.add_argument("--json", type=Path, default=None, help="write the full result as JSON here")
    p.add_argument("--plot", type=Path, default=None, help="write the scenario's main figure (PNG) here")
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show the launch and a bar per burst, on stderr (default: the launch alone, on a terminal)",
    )


def _workers(scenario: Any) -> str:
    """What a plan without --workers launches for `scenario`, in words (as `ScenarioPlan.resolved`)."""
    if "workers" in scenario.deployment:
        return f"{scenario.deployment['workers']} of each model"
    return "1 of each model" if scenario.layout == "per-model" else "2, or one per --weights entry"


def plan_from_args(args: argparse.Namespace) -> Any:
    """The `ScenarioPlan` the options describe: plan fields by name, knobs into `params`."""
    from dataclasses import fields

    from ..scenarios.plan import ScenarioPlan

    plan_fields = {f.name for f in fields(ScenarioPlan)}
    values = {_PLAN_NAMES.get(k, k): v for k, v in vars(args).items()}
    given = {k: v for k, v in values.items() if k in plan_fields and k not in ("params", "progress")}
    knobs = {name: getattr(args, name) for name in args.knobs if getattr(args, name) is not None}
    return ScenarioPlan(**given, progress=bool(args.progress), params=knobs)


def _run_scenario(args: argparse.Namespace) -> int:
    from ..notebook.views import figures_table, plot, table
    from ..scenarios.plan import run_scenario

    plan = plan_from_args(args)
    result = run_scenario(
        plan, launch_progress=sys.stderr.isatty() if args.progress is None else args.progress
    )
    frame = table(result)
    if len(frame):  # a busy check judged by its schedule alone has no burst to tabulate
        print(frame.drop(columns=[c for c in ("ok",) if c in frame.columns]).to_string(index=False))
    for burst in result.bursts:
        if burst.rule:
            print(f"asserted ({burst.name}): {burst.rule}")
        if burst.check is not None and burst.check.p_value is not None:
            print(f"fairness p-value ({burst.name}): {burst.check.p_value:.4g}")
    figures = figures_table(result)
    width = max(map(len, figures["figure"]), default=0)
    for figure, value in figures.itertuples(index=False):
        print(f"{figure:<{width}}  {value}")
    router = result.router_counts_note()
    if router:
        print(f"router's own counts: {router}")
    lat = result.latency_ms()
    print(f"latency p50 {lat['p50']:.2f} ms, p99 {lat['p99']:.2f} ms; wall {result.wall_seconds:.2f} s")
    if args.json:
        result.save_json(args.json)
    if args.plot:
        from io import BytesIO

        from ..jsonio import write_bytes_atomic

        image = BytesIO()  # rendered whole first: the file then appears at once (write_bytes_atomic)
        plot(result).savefig(image, dpi=100, format=args.plot.suffix[1:] or "png")
        write_bytes_atomic(args.plot, image.getvalue())
    if result.evidence():
        print(result.evidence())
    print(result.summary())
    return 0 if result.ok else EXIT_FAILED
