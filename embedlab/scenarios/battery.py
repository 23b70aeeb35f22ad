"""The conformance battery: every check against every stack, one cell each.

    matrix = run_battery(stacks=["embedded", "vllm-router"], checks=["same-model", "client-mistakes"])
    table(matrix), plot(matrix)

Each check is a registered scenario, run with the stack's defaults (its router's own
default policy included). A cell holds the verdict (passed, failed, reported,
unsupported) and the figure that says what happened, derived from the result's JSON,
so that the in-process battery here and `embedlab conformance` (which runs each cell
as a notebook) describe a cell the same way.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from ..cellguard import check_previous_cell
from ..errors import ConfigError
from ..jsonio import write_json
from ..stacks import STACKS, battery_stacks, stack_class
from ..verdicts import Verdict
from ..wording import counted
from .plans import ScenarioPlan, run_scenario
from .registry import SCENARIOS

__all__ = [
    "BATTERY",
    "Cell",
    "check_battery",
    "ConformanceMatrix",
    "cell_text",
    "run_battery",
    "stack_versions",
]

BATTERY = (
    "same-model",
    "multi-model",
    "failover",
    "failover-no-retries",
    "client-mistakes",
    "drain",
    "overhead",
)


@dataclass(frozen=True)
class Cell:
    stack: str
    check: str
    verdict: Verdict
    text: str  # the figure that says what happened
    report: str | None = None  # the cell's notebook report, where it was run as one


@dataclass
class ConformanceMatrix:
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


def _codes(result: dict[str, Any]) -> str:
    errors = [e for b in result.get("bursts") or [] for e in (b.get("traffic") or {}).get("errors", [])]
    codes = sorted({m.group(1) for e in errors if (m := re.search(r"HTTP (\d+)", e))})
    return f" (HTTP {', '.join(codes)})" if codes else ""


def _split(result: dict[str, Any]) -> str:
    burst = (result.get("bursts") or [{}])[0]
    deltas = "/".join(f"{d:.0f}" for d in burst.get("deltas") or [])
    return f"split {deltas} ({(result.get('params') or {}).get('split', 'weights')})"


def _dispatch(result: dict[str, Any]) -> str:
    wrong = total = 0
    for burst in result.get("bursts") or []:
        expected = set(burst.get("expected") or [])
        for row in (burst.get("check") or {}).get("rows", []):
            total += row["delta"]
            wrong += row["delta"] if row["worker"] not in expected else 0
    return f"{wrong:.0f} of {total:.0f} counted on another model's worker" + _codes(result)


def _failover(result: dict[str, Any]) -> str:
    f = result.get("failover") or {}
    n = (result.get("params") or {}).get("requests", "?")
    return f"{f.get('failed_requests', '?')} of {n} lost" + _codes(result)


def _mistakes(result: dict[str, Any]) -> str:
    shown = [
        f"{m['mistake']} {m['status']}{'' if m['openai_error'] else ' plain'}"
        for m in result.get("mistakes") or []
    ]
    burst = (result.get("bursts") or [{}])[0].get("traffic") or {}
    after = f"after mistakes {burst.get('n', 0) - burst.get('failed', 0)}/{burst.get('n', 0)} ok" + _codes(
        result
    )
    return "; ".join([*shown, after])


def _drain(result: dict[str, Any]) -> str:
    d = result.get("drain") or {}
    return (
        f"drained worker counted {d.get('victim_delta', '?'):.0f}"
        if isinstance(d.get("victim_delta"), (int, float))
        else ""
    )


def _overhead(result: dict[str, Any]) -> str:
    o = result.get("overhead") or {}
    if not o:
        return ""
    added = (
        ""
        if o.get("p50_ms_c1_direct") is None
        else f" ({o['p50_ms_c1'] - o['p50_ms_c1_direct']:+.2f} vs direct)"
    )
    share = "" if not o.get("rps_c32_direct") else f" ({o['rps_c32'] / o['rps_c32_direct']:.0%} of direct)"
    return f"p50 {o['p50_ms_c1']:.2f} ms{added}; c=32 {o['rps_c32']:.0f}/s{share}"


CELL_TEXT: dict[str, Callable[[dict[str, Any]], str]] = {
    "same-model": _split,
    "multi-model": _dispatch,
    "failover": _failover,
    "failover-no-retries": _failover,
    "client-mistakes": _mistakes,
    "drain": _drain,
    "overhead": _overhead,
}


def cell_text(check: str, result: dict[str, Any] | None, *, error: str | None = None) -> str:
    """What a cell says: the check's own figure, else the verdict's reasons, else the error."""
    if result is None:
        return error or "no result"
    verdict = result.get("verdict")
    if verdict in (Verdict.UNSUPPORTED, Verdict.INCONCLUSIVE) or check not in CELL_TEXT:
        return "; ".join(result.get("reasons") or []) or str(verdict)
    return CELL_TEXT[check](result) or "; ".join(result.get("reasons") or [])


def stack_versions(stacks: Sequence[str]) -> dict[str, str]:
    """The version of each stack's frontend (its `package`): a router's from its own venv."""
    found = {}
    for stack in stacks:
        cls = stack_class(stack)
        package = cls.package
        if package is None:
            continue
        venv = cls().venv_dir()
        python = venv / "bin" / "python" if venv is not None else None
        try:
            if python is not None and python.exists():
                code = f"import importlib.metadata as m; print(m.version({package!r}))"
                found[stack] = (
                    f"{package} {subprocess.run([str(python), '-c', code], capture_output=True, text=True, timeout=60).stdout.strip()}"
                )
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


def run_battery(
    *, stacks: Sequence[str] | None = None, checks: Sequence[str] = BATTERY, run_dir: str = ""
) -> ConformanceMatrix:
    """Every check on every stack (default: every registered stack that is `in_battery`), in this
    process (each a fresh deployment).

    An unknown stack or check is a `ConfigError` before anything runs; a cell that breaks
    while it runs is recorded (verdict `error`) and the battery goes on.
    """
    check_previous_cell()
    stacks = battery_stacks() if stacks is None else stacks
    check_battery(stacks=stacks, checks=checks)
    cells = []
    for stack in stacks:
        for check in checks:
            try:
                result = run_scenario(
                    ScenarioPlan(
                        scenario=check, stack=stack, run_dir=f"{run_dir}/{stack}-{check}" if run_dir else ""
                    )
                )
                data = result.to_json()
                cells.append(Cell(stack, check, result.verdict, cell_text(check, data)))
            except Exception as exc:  # a cell that breaks is recorded, and the battery goes on
                cells.append(
                    Cell(stack, check, Verdict.ERROR, f"{exc.__class__.__name__}: {str(exc).splitlines()[0]}")
                )
    return ConformanceMatrix(
        stacks=list(stacks), checks=list(checks), cells=cells, versions=stack_versions(stacks)
    )
