"""`embedlab scenario NAME`: launch (or attach to) a deployment, run one scenario, print the verdict.

Every registered scenario is a subcommand of its own: the options every scenario shares
(the deployment, attach and run settings: `ScenarioPlan`'s fields), then the scenario's own
knobs, read from its params class. Both are knobs, and both become options the same way,
under their own names (`kill_after` becomes `--kill-after`, `model_paths` `--model-paths`),
type-checked by argparse: a badly typed value is one line naming the option, and exit 2.
`--help` lists both. Only `--json`, `--plot` and `--progress` are the command's own.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..defaults import EXIT_FAILED

__all__ = ["add_knob", "add_scenario"]


def add_scenario(sub: argparse._SubParsersAction) -> None:
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
        shared = _add_plan_options(q, scenario)
        own = q.add_argument_group(f"{name}'s own knobs")
        q.set_defaults(
            run=_run_scenario, plan_options=shared, knobs=[_add_knob(own, k) for k in _knobs(scenario)]
        )


def _knobs(scenario: Any) -> list[Any]:
    from ..scenarios.params import knobs

    return knobs(scenario.params)


def _add_knob(group: Any, knob: Any, *, default: Any = None) -> str:
    """`--name` for a knob, converting and checking as its type says; returns the name it is stored under.

    Left out, an option stores None, and the field keeps its default: the plan's or the params class's."""
    shown = knob.default if default is None else default
    shown = ",".join(map(str, shown)) if isinstance(shown, tuple) else shown
    help = knob.help if shown in (None, "") else f"{knob.help} (default: {shown})"
    help = help.replace("%", "%%")  # argparse formats help with %: a knob's "99 %" would be read as one
    if knob.base is bool:
        group.add_argument(knob.option, dest=knob.name, action=argparse.BooleanOptionalAction, help=help)
        return knob.name
    names = [knob.option]
    if knob.each:  # one item per option, repeated: also in the singular, as `--worker-arg X`
        names.append(knob.option.removesuffix("s"))
    group.add_argument(
        *names,
        dest=knob.name,
        type=_converter(knob),
        choices=knob.values(),
        action="append" if knob.each else "store",
        metavar=None if knob.choices else knob.name.upper(),
        help=help,
    )
    return knob.name


# The watch's attach options are these knobs too (cli/watch.py).
add_knob = _add_knob


def _converter(knob: Any) -> Any:
    """argparse's `type=` for a knob: its own check, so a bad value is one line naming the option.
    Tuples come as comma-separated text (or one item per option); the knob splits and checks them."""
    from ..errors import ConfigError

    item = knob.item if knob.each else knob.base
    kind = item if item in (int, float) and (knob.item is None or knob.each) else str

    def convert(text: str) -> Any:
        value = kind(text)  # a ValueError: argparse's own "invalid int value: 'many'"
        if knob.item is not None:
            return value
        try:
            return knob.check(value, scenario=knob.option)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc).split(": ", 1)[-1]) from None

    convert.__name__ = kind.__name__
    return convert


def _add_plan_options(p: argparse.ArgumentParser, scenario: Any) -> list[Any]:
    """The plan's fields, each as `--name` (the command's own options follow): returns their knobs."""
    from ..scenarios.params import knobs
    from ..scenarios.plan import ScenarioPlan

    shared = [k for k in knobs(ScenarioPlan) if k.help]
    for k in shared:
        _add_knob(p, k, default=_plan_default(k, scenario))
    p.add_argument("--json", type=Path, default=None, help="write the full result as JSON here")
    p.add_argument("--plot", type=Path, default=None, help="write the scenario's main figure (PNG) here")
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show the launch and a bar per burst, on stderr (default: the launch alone, on a terminal)",
    )
    return shared


def _plan_default(knob: Any, scenario: Any) -> Any:
    """What `--help` says a plan field left out becomes for `scenario` (as `ScenarioPlan.resolved`)."""
    from ..scenarios.plan import FALLBACKS

    if knob.name == "workers":
        return _workers(scenario)
    if knob.default is None and knob.name in scenario.deployment:
        return scenario.deployment[knob.name]
    return FALLBACKS.get(knob.name, knob.default) if knob.default is None else knob.default


def _workers(scenario: Any) -> str:
    """What a plan without --workers launches for `scenario`, in words (as `ScenarioPlan.resolved`)."""
    if "workers" in scenario.deployment:
        return f"{scenario.deployment['workers']} of each model"
    return "1 of each model" if scenario.layout == "per-model" else "2, or one per --weights entry"


def plan_from_args(args: argparse.Namespace) -> Any:
    """The `ScenarioPlan` the options describe: each plan field and knob by its own name, where given."""
    from ..scenarios.plan import ScenarioPlan

    given = {k.name: getattr(args, k.name) for k in args.plan_options if getattr(args, k.name) is not None}
    knobs = {name: getattr(args, name) for name in args.knobs if getattr(args, name) is not None}
    return ScenarioPlan(scenario=args.scenario, **given, progress=bool(args.progress), params=knobs)


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
