"""`embedlab stacks`: what each registered stack can do, and the routers' venvs to build.

    embedlab stacks            one line per stack: its capabilities, as its class declares them
    embedlab stacks --json     the same, as JSON
    embedlab stacks --venvs    one line per router venv: NAME<TAB>PIN<TAB>PIN...

`make routers` reads `--venvs` and builds `.routers/<NAME>` from those pins, so a router
stack that a plugin registers (with its `venv` and `pins`) is built, and listed by
`embedlab conformance`, with no edit anywhere else.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["STACK_COMMANDS", "describe"]


def _yes(flag: bool, yes: str, no: str) -> str:
    return yes if flag else no


def describe(caps: dict[str, Any]) -> str:
    """One line for people: a stack's declared capabilities."""
    default = caps["default_policy"]
    policies = ", ".join(
        f"{p} ({split}{', default' if p == default else ''})" for p, split in caps["policies"].items()
    )
    parts = [
        f"discovery {', '.join(caps['discoveries'])}",
        _yes(caps["multi_host"], "across hosts", "one host"),
        f"router modes {policies}" if policies else "no router modes",
        _yes(caps["worker_weights"], "per-worker weights", "no per-worker weights"),
        _yes(caps["live_weights"], "live weights", "no live weights"),
        _yes(caps["drains"], "drain", "no drain"),
        _yes(caps["retries_switch"], "retries switch", "no retries switch"),
        _yes(caps["model_aware"], "routes by model", "ignores the model"),
        _yes(caps["names_worker"], "names its worker", "does not name its worker"),
        f"worker servers {', '.join(caps.get('worker_servers', ['embedlab']))}",
        _yes(caps["counts_backends"], "counts per worker", "keeps no per-worker counts"),
        _yes(caps["asserts_failover"], "failover asserted", "failover reported"),
        _yes(caps["canaries"], "canaries", "no canaries"),
    ]
    if caps["venv"]:
        parts.append(f"venv .routers/{caps['venv']} ({' '.join(caps['pins'])})")
    if caps["package"]:
        parts.append(f"package {caps['package']}")
    parts.append(_yes(caps["in_battery"], "in the battery", "not in the battery"))
    return f"{caps['name']}: " + "; ".join(parts)


def _run_stacks(args: argparse.Namespace) -> int:
    from ..cluster.stack_registry import STACKS, describe_stack, router_venvs

    if args.venvs:
        for venv, pins in router_venvs().items():
            print("\t".join((venv, *pins)))
        return 0
    listed = {name: describe_stack(name) for name in STACKS.names()}
    if args.json:
        print(json.dumps(listed, indent=2))
    else:
        for caps in listed.values():
            print(describe(caps))
    return 0


def _add_stacks(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "stacks",
        help="list the registered stacks and what each can do (or the routers' venvs and pins)",
        description="Every registered stack (built-in, entry point, or a module named in EMBEDLAB_PLUGINS), "
        "with the capabilities its class declares. `--venvs` prints one line per router venv, "
        "NAME<TAB>PIN..., which `make routers` builds.",
    )
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--venvs", action="store_true", help="one line per router venv: NAME<TAB>PIN...")
    shown.add_argument("--json", action="store_true", help="the capabilities as JSON")
    p.set_defaults(run=_run_stacks)


STACK_COMMANDS = [_add_stacks]
