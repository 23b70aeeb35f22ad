"""Tables from results, as pandas DataFrames.

Counts are integers (an expected count is one too, unless the weights make it fractional);
workers are named by index, with their endpoint as the last column; no column repeats another.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import DeploymentStoppedError
from ..scenarios.battery import ConformanceMatrix
from ..scenarios.explore import Step, SweepResult, cumulative_shares, weights_label
from ..scenarios.results import ScenarioResult

if TYPE_CHECKING:
    import pandas as pd

    from ..deployment import Deployment

__all__ = ["deployment_table", "figures_table", "matrix_table", "result_table", "steps_table", "sweep_table"]


def _count(value: float | None) -> int | None:
    return None if value is None else int(round(value))


def _expected_counts(frame: pd.DataFrame, column: str) -> None:
    """Integers where every expected count is whole (the usual case), else one decimal."""
    values = frame[column]
    if len(values) and all(float(v).is_integer() for v in values):
        frame[column] = values.astype("Int64")
    else:
        frame[column] = values.round(1)


def _endpoints(result: ScenarioResult) -> dict[int, str | None]:
    return {w.index: w.endpoint for w in result.workers}


def result_table(result: ScenarioResult) -> pd.DataFrame:
    """One row per burst and worker: counter before and after, delta, and what was expected.

    `burst` names the burst (the model it sent, for the dispatch scenarios); `serves` is
    the model the worker serves; `endpoint` the worker's endpoint (empty when attached).
    """
    import pandas as pd

    rows = []
    for burst in result.bursts:
        for w in result.workers:
            row = burst.check.row(w.index) if burst.check else None
            rows.append(
                {
                    "burst": burst.name,
                    "worker": w.index,
                    "serves": w.model,
                    "before": _count(row.before if row else None),
                    "after": _count(row.after if row else None),
                    "delta": _count(row.delta if row else None),
                    "expected_to_move": w.index in burst.expected,
                    "expected_delta": burst.expected_count(w.index),
                    "ok": row.ok if row else None,
                    "endpoint": w.endpoint or "",
                }
            )
    columns = [
        "burst",
        "worker",
        "serves",
        "before",
        "after",
        "delta",
        "expected_to_move",
        "expected_delta",
        "ok",
        "endpoint",
    ]
    frame = pd.DataFrame(rows, columns=columns)
    for column in ("before", "after", "delta"):
        frame[column] = frame[column].astype("Int64")  # integers, with <NA> for a worker that was not read
    if rows:
        _expected_counts(frame, "expected_delta")
    return frame


def figures_table(result: ScenarioResult) -> pd.DataFrame:
    """The run's own figures as a two-column table: failover's or drain's, and every event."""
    import pandas as pd

    rows: list[tuple[str, str]] = []
    f = result.failover
    if f is not None:
        killed = (
            "never"
            if f.killed_at_s is None
            else f"{f.killed_at_s:.3f} s into the burst, after {f.kill_after_responses} responses"
        )
        rows += [
            ("victim", f"worker {f.victim}"),
            ("killed at", killed),
            (
                "out of dispatch",
                "never seen"
                if f.excluded_after_s is None
                else f"{f.excluded_after_s * 1000:.0f} ms after the kill",
            ),
            (
                "lease TTL",
                f"{f.lease_ttl_s:g} s (limit: 2 TTLs)"
                if f.lease_ttl_s
                else "the stack's own discovery decides",
            ),
            ("failed requests", str(f.failed_requests)),
            ("errors seen for", f"{f.errors_window_s:.2f} s after the kill"),
            ("responses after the kill", str(f.responses_after_kill)),
        ]
        served = sorted(result.bursts[0].traffic.served_by().items())
        rows += [(f"served by {result.worker_label(w)}", str(n)) for w, n in served] or [
            ("served by", "not named: this frontend marks no response with its worker")
        ]
        rows.append(("verdict", "asserted" if f.asserted else "reported, not asserted"))
    d = result.drain
    if d is not None:
        rows += [
            ("drained", f"worker {d.victim}"),
            ("its delta while drained", "not read" if d.victim_delta is None else f"{d.victim_delta:.0f}"),
            ("registered again after", "yes" if d.resumed else "no (left drained)"),
        ]
    x = result.fault
    if x is not None:
        codes = ", ".join(
            f"{n} x {'no answer' if c == '0' else 'HTTP ' + c}" for c, n in sorted(x.status_codes.items())
        )
        rows += [
            (
                "fault",
                f"{x.fault}, from {x.started_s:.1f} s to {'-' if x.ended_s is None else f'{x.ended_s:.1f}'} s",
            ),
            ("failed requests", f"{x.failed_requests}" + (f" ({codes})" if codes else "")),
            ("longest hang", f"{x.longest_hang_s:.2f} s"),
            ("answered during the fault", str(x.served_during_fault)),
            (
                "out of dispatch",
                "not seen"
                if x.left_dispatch_after_s is None
                else f"{x.left_dispatch_after_s:.1f} s after the fault",
            ),
            (
                "serving again",
                "not seen" if x.back_after_s is None else f"{x.back_after_s:.1f} s after it ended",
            ),
            ("recovery burst (asserted)", "passed" if x.recovered else "FAILED"),
        ]
    for p in result.ttl_points:
        left = "never" if p.left_dispatch_after_s is None else f"{p.left_dispatch_after_s:.1f} s"
        rows.append(
            (f"TTL {p.lease_ttl_s:g} s", f"out of dispatch after {left}, {p.failed_requests} failed requests")
        )
    rows += [
        (f"in etcd: {d['path']}", f"instance {d['instance_id']} at {d['address']}") for d in result.discovered
    ]
    for m in result.mistakes:
        kind = (
            "OpenAI error JSON"
            if m.openai_error
            else f"not OpenAI error JSON ({m.content_type or 'no content type'})"
        )
        rows.append((m.mistake, f"HTTP {m.status}, {kind}: {m.body[:80]}"))
    o = result.overhead
    if o is not None:
        direct = "no HTTP worker URL" if o.p50_ms_c1_direct is None else f"{o.p50_ms_c1_direct:.2f} ms direct"
        rows.append(("p50 at c=1", f"{o.p50_ms_c1:.2f} ms through the frontend, {direct}"))
        direct = "no HTTP worker URL" if o.rps_c32_direct is None else f"{o.rps_c32_direct:.0f}/s direct"
        rows.append(("throughput at c=32", f"{o.rps_c32:.0f}/s through the frontend, {direct}"))
    rows += [(f"{e.kind} at {e.at_s:.3f} s", e.detail) for e in result.events]
    return pd.DataFrame(rows, columns=["figure", "value"])


def steps_table(steps: Sequence[Step]) -> pd.DataFrame:
    """One row per burst and worker: delta, observed and expected share, cumulative share in its phase.

    `table(explorer)` is every burst so far; `table(step)` the one burst a call returned.
    """
    import pandas as pd

    # Steps an Explorer made carry their cumulative shares; others get them from the steps given.
    phases: dict[int, list[Step]] = {}
    for step in steps:
        phases.setdefault(step.phase, []).append(step)
    computed = {
        step.index: shares
        for phase_steps in phases.values()
        for step, shares in zip(phase_steps, cumulative_shares([s.deltas for s in phase_steps]))
    }
    rows = []
    for step in sorted(steps, key=lambda s: s.index):
        cumulative = step.cumulative_shares or computed[step.index]
        endpoints = _endpoints(step.result)
        for worker, delta in enumerate(step.deltas):
            rows.append(
                {
                    "step": step.index,
                    "phase": step.phase,
                    "weights": weights_label(step.weights),
                    "worker": worker,
                    "delta": int(delta),
                    "observed_share": round(step.observed_shares[worker], 3),
                    "expected_share": round(step.expected_shares[worker], 3),
                    "cumulative_share": round(cumulative[worker], 3),
                    "p_value": step.p_value,
                    "verdict": str(step.result.verdict),
                    "endpoint": endpoints.get(worker) or "",
                }
            )
    return pd.DataFrame(rows)


def sweep_table(sweep: SweepResult) -> pd.DataFrame:
    """One row per weight setting and worker: expected share against observed, and the p-value."""
    import pandas as pd

    rows = []
    for p in sweep.points:
        endpoints = _endpoints(p.result)
        for worker, (delta, exp, obs) in enumerate(zip(p.deltas, p.expected_shares, p.observed_shares)):
            rows.append(
                {
                    "weights": weights_label(p.weights),
                    "worker": worker,
                    "delta": int(delta),
                    "expected_delta": exp * p.requests,
                    "expected_share": round(exp, 3),
                    "observed_share": round(obs, 3),
                    "p_value": p.p_value,
                    "verdict": str(p.result.verdict),
                    "endpoint": endpoints.get(worker) or "",
                }
            )
    frame = pd.DataFrame(rows)
    if rows:
        _expected_counts(frame, "expected_delta")
    return frame


def matrix_table(matrix: ConformanceMatrix) -> pd.DataFrame:
    """One row per stack, one column per check: the verdict and what happened."""
    import pandas as pd

    rows = {
        stack: {
            check: (f"{c.verdict.upper()}: {c.text}" if (c := matrix.cell(stack, check)) else "")
            for check in matrix.checks
        }
        for stack in matrix.stacks
    }
    return pd.DataFrame.from_dict(rows, orient="index", columns=matrix.checks)


def deployment_table(deployment: Deployment) -> pd.DataFrame:
    """One row per process: its services (etcd), the frontend, then each worker by index,
    with its URL, endpoint, pid and log.

    A stopped deployment still has its table: its processes' pids and logs, none running.
    """
    import pandas as pd

    def unless_stopped(get: Callable[[], Any]) -> Any:
        try:
            return get()
        except DeploymentStoppedError:
            return None

    rows = [
        {
            "process": role,
            "url": "",
            "endpoint": "",
            "pid": proc.pid,
            "running": proc.alive(),
            "log": str(proc.log_path),
        }
        for role, proc in deployment.services.items()
    ]
    if deployment.frontend is not None:
        rows.append(
            {
                "process": "frontend",
                "url": unless_stopped(lambda: deployment.frontend_url) or "",
                "endpoint": "",
                "pid": deployment.frontend.pid,
                "running": deployment.frontend.alive(),
                "log": str(deployment.frontend.log_path),
            }
        )
    urls = unless_stopped(lambda: deployment.system_urls) or [""] * len(deployment.workers)
    for index, (proc, url) in enumerate(zip(deployment.workers, urls)):
        rows.append(
            {
                "process": f"worker {index}",
                "url": url,
                "endpoint": unless_stopped(lambda i=index: deployment.endpoint(i)) or "",
                "pid": proc.pid,
                "running": proc.alive(),
                "log": str(proc.log_path),
            }
        )
    return pd.DataFrame(rows, columns=["process", "url", "endpoint", "pid", "running", "log"])
