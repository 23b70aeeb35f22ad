"""The conformance battery: every check against every stack, one cell each.

    matrix = run_battery(stacks=["embedded", "vllm-router"], checks=["same-model", "client-mistakes"])
    table(matrix), plot(matrix)

Each check is a registered scenario, run with the stack's defaults (its router's own
default policy included). A cell holds the verdict (passed, failed, reported,
unsupported) and the figures that say what happened: the scenario's own key figures
(`ScenarioResult.key_figures()`), read from the result's JSON, so that the in-process
battery here and `embedlab conformance` (which runs each cell as a notebook) describe a
cell the same way.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from ..cluster.stack_registry import STACKS, battery_stacks, stack_class
from ..errors import ConfigError
from ..freshness import guarded
from ..jsonio import write_json
from ..plugins import child_env
from ..verdicts import Verdict
from ..wording import counted
from .plan import ScenarioPlan, run_scenario
from .registry import SCENARIOS

__all__ = [
    "BATTERY",
    "Cell",
    "check_battery",
    "ConformanceTable",
    "KV_CHECKS",
    "cell_text",
    "run_battery",
    "stack_versions",
]

BATTERY = (
    "same-model",
    "multi-model",
    "mixed",
    "failover",
    "failover-no-retries",
    "client-mistakes",
    "drain",
    "overhead",
)
# The KV checks (`embedlab conformance --kv`): each stack at its own prefix-aware policy, where it has one.
KV_CHECKS = ("prefix-affinity", "kv-participation")


@dataclass(frozen=True)
class Cell:
    stack: str
    check: str
    verdict: Verdict
    text: str  # the figure that says what happened
    report: str | None = None  # the cell's notebook report, where it was run as one


@dataclass
class ConformanceTable:
    stacks: list[str]
    checks: list[str]
    cells: list[Cell]
    versions: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Every cell ran to a verdict: a failed check is a finding about a router, not a broken run."""
        return all(c.verdict != Verdict.ERROR for c in self.cells)

    def summary(self) -> str:
        counts = ", ".join(
            f"{sum(c.verdict == v for c in self.cells)} {v}"
            for v in Verdict
            if any(c.verdict == v for c in self.cells)
        )
        broke = [f"{c.stack}/{c.check}: {c.text}" for c in self.cells if c.verdict == Verdict.ERROR]
        head = f"conformance of {counted(len(self.stacks), 'stack')}: {counted(len(self.cells), 'cell')} ({counts})"
        return head + (f"; broke: {'; '.join(broke)}" if broke else "")

    def cell(self, stack: str, check: str) -> Cell | None:
        return next((c for c in self.cells if c.stack == stack and c.check == check), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "stacks": self.stacks,
            "checks": self.checks,
            "versions": self.versions,
            "cells": [asdict(c) for c in self.cells],
        }

    def save_json(self, path: str | Path) -> Path:
        return write_json(path, self.to_json())


def cell_text(result: dict[str, Any] | None, *, error: str | None = None) -> str:
    """What a cell says: the scenario's own key figures, else the verdict's reasons, else the error.

    Read from the result's JSON (`key_figures`), so that the in-process battery here and
    `embedlab conformance` (each cell a notebook) describe a cell the same way.
    """
    if result is None:
        return error or "no result"
    verdict = result.get("verdict")
    figures = result.get("key_figures") or {}
    own = figures.get("own") or {}
    if verdict in (Verdict.UNSUPPORTED, Verdict.INCONCLUSIVE) or not own:
        text = "; ".join(result.get("reasons") or []) or str(verdict)
    else:
        text = "; ".join(f"{label} {value}" for label, value in own.items() if value is not None)
    # The second source of truth, where the router keeps per-worker counts: agreeing or not.
    return f"{text}; {figures['router_counts']}" if figures.get("router_counts") else text


def stack_versions(stacks: Sequence[str]) -> dict[str, str]:
    """The version of each stack's frontend (its `package`): a router's from its own venv."""
    found = {}
    for stack in stacks:
        cls = stack_class(stack)
        package = cls.package
        if package is None:
            own = cls().frontend_version()
            if own is not None:
                found[stack] = own
            continue
        venv = cls().venv_dir()
        python = venv / "bin" / "python" if venv is not None else None
        try:
            if python is not None and python.exists():
                code = f"import importlib.metadata as m; print(m.version({package!r}))"
                argv = [str(python), "-c", code]
                done = subprocess.run(
                    argv, capture_output=True, text=True, timeout=60, env=child_env(os.environ)
                )
                found[stack] = f"{package} {done.stdout.strip()}"
            else:
                found[stack] = f"{package} {metadata.version(package)}"
        except (OSError, subprocess.SubprocessError, metadata.PackageNotFoundError):
            found[stack] = f"{package} (not installed)"
    return found


def check_battery(*, stacks: Sequence[str], checks: Sequence[str]) -> None:
    """A `ConfigError` for an unknown stack or check, before any cell runs."""
    for names, known, kind in ((stacks, STACKS, "stack"), (checks, SCENARIOS, "check")):
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ConfigError(f"unknown {kind}s {unknown}; choose from {', '.join(known.names())}")


@guarded("matrix")
def run_battery(
    *,
    stacks: Sequence[str] | None = None,
    checks: Sequence[str] = BATTERY,
    run_dir: str = "",
    progress: bool = False,
) -> ConformanceTable:
    """Every check on every stack (default: every registered stack that is `in_battery`), in this
    process (each a fresh deployment).

    An unknown stack or check is a `ConfigError` before anything runs; a cell that breaks
    while it runs is recorded (verdict `error`) and the battery goes on. `progress`: a line as
    each cell ends (a battery takes minutes, and a notebook would otherwise show nothing).
    """
    stacks = battery_stacks() if stacks is None else stacks
    check_battery(stacks=stacks, checks=checks)
    cells = []
    total = len(stacks) * len(checks)
    for stack in stacks:
        for check in checks:
            started = time.monotonic()
            try:
                result = run_scenario(
                    ScenarioPlan(
                        scenario=check, stack=stack, run_dir=f"{run_dir}/{stack}-{check}" if run_dir else ""
                    )
                )
                cells.append(Cell(stack, check, result.verdict, cell_text(result.to_json())))
            except Exception as exc:  # a cell that breaks is recorded, and the battery goes on
                cells.append(
                    Cell(stack, check, Verdict.ERROR, f"{exc.__class__.__name__}: {str(exc).splitlines()[0]}")
                )
            if progress:
                print(
                    f"[{len(cells)}/{total}] {stack} {check}: {cells[-1].verdict} in "
                    f"{time.monotonic() - started:.1f} s",
                    flush=True,
                )
    return ConformanceTable(
        stacks=list(stacks), checks=list(checks), cells=cells, versions=stack_versions(stacks)
    )
