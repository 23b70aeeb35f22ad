"""`embedlab conformance`: the battery of checks against every stack, each cell a notebook run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .. import defaults
from ..defaults import EXIT_FAILED, WORKER_SERVER
from .serve import positive_float

__all__ = ["add_conformance"]


def add_conformance(sub: argparse._SubParsersAction) -> None:
    from ..cluster.stack_registry import battery_stacks
    from ..scenarios.battery import BATTERY, KV_CHECKS

    p = sub.add_parser(
        "conformance",
        help="run the battery of checks against every stack; write a stack x check matrix",
        description="Each check is a registered scenario, run against each stack with its own defaults. Writes "
        "OUT/<run-id>/conformance.html, conformance.json and junit.xml. Exits 0 when every cell ran to a "
        "verdict (a failed check is a finding about a router, not a broken run), 1 when a cell broke.",
    )
    p.add_argument("--stacks", default=",".join(battery_stacks()), help="comma-separated stacks")
    p.add_argument(
        "--checks",
        default=None,
        help=f"comma-separated checks (registered scenarios); default: {','.join(BATTERY)}",
    )
    p.add_argument(
        "--kv",
        action="store_true",
        help=f"the KV checks ({', '.join(KV_CHECKS)}) in place of the battery: each stack at its own "
        "prefix-aware policy, over the workers that policy routes over (Dynamo: its mocker, one endpoint "
        "per model); a stack with none: unsupported. Their own section of the Markdown",
    )
    p.add_argument(
        "--router-modes",
        default=None,
        help="comma-separated router modes, each stack at each (rows `STACK (MODE)`; prefix-aware: the "
        "stack's own prefix-aware policy); default: each check's own (the stack's default; --kv: prefix-aware)",
    )
    p.add_argument("--out", type=Path, default=Path("outputs"), help="runs go to OUT/<run-id>/")
    p.add_argument(
        "--worker-servers",
        default=None,
        help="comma-separated worker servers, each stack in front of each: embedlab, vllm-serve, infinity, "
        f"tei, mocker (rows STACK+SERVER; their own section of the Markdown); default: {WORKER_SERVER} "
        "(--kv: the workers each stack's prefix-aware policy routes over)",
    )
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
    from ..errors import ConfigError
    from ..reports.conformance import (
        conformance,
        kv_rows,
        matrix_rows,
        write_kv_markdown,
        write_servers_markdown,
    )
    from ..scenarios.battery import BATTERY, KV_CHECKS

    split = lambda text: [part.strip() for part in text.split(",") if part.strip()]  # noqa: E731
    if args.kv and args.checks is not None:
        raise ConfigError("--kv runs the KV checks: leave out --checks (or name them without --kv)")
    checks = KV_CHECKS if args.kv else split(args.checks or ",".join(BATTERY))
    stacks = split(args.stacks)
    modes = split(args.router_modes) if args.router_modes else [None]
    if args.kv and args.worker_servers is None:
        rows = kv_rows(stacks, router_modes=modes)
    else:
        servers = split(args.worker_servers or WORKER_SERVER)
        rows = matrix_rows(stacks, worker_servers=servers, router_modes=modes)
    run = conformance(
        checks=checks,
        out=args.out,
        timeout=args.timeout,
        progress=lambda line: print(line, flush=True),
        rows=rows,
    )
    counts = ", ".join(
        f"{sum(c.verdict == v for c in run.matrix.cells)} {v}"
        for v in sorted({c.verdict for c in run.matrix.cells})
    )
    print(f"{len(run.matrix.cells)} cells: {counts}")
    if args.markdown:
        from ..jsonio import load_json
        from ..reports.index import write_conformance_markdown

        command = (
            "embedlab conformance " + " ".join(sys.argv[2:])
            if sys.argv[1:2] == ["conformance"]
            else "embedlab conformance"
        )
        # The sections other generators appended to the page (the 16-replica split) are kept;
        # rows in front of other worker servers go to their own section, merged with earlier runs'.
        data = load_json(run.json)
        own = [s for s in data["stacks"] if "+" not in s]
        if set(checks) <= set(KV_CHECKS):  # the KV rows: their own section
            write_kv_markdown(args.markdown, data, command=command)
        else:
            if own:
                write_conformance_markdown(args.markdown, {**data, "stacks": own}, command=command)
            if len(own) < len(data["stacks"]):
                write_servers_markdown(args.markdown, data, command=command)
    print(run.html)
    return 0 if run.complete else EXIT_FAILED
