"""Tables from results, as pandas DataFrames.

Counts are integers (an expected count is one too, unless the weights make it fractional);
workers are named by index, with their endpoint as the last column; no column repeats another.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ...errors import ConfigError, DeploymentStoppedError
from ...evidence.target import Target, target_of
from ...evidence.traffic import embed
from ...scenarios.battery import ConformanceTable
from ...scenarios.explore import Step, SweepResult, cumulative_shares, weights_label
from ...scenarios.result import ScenarioResult
from .frame import Table, table_of

if TYPE_CHECKING:
    import pandas as pd

    from ...cluster.deployment import Deployment

__all__ = [
    "deployment_table",
    "figures_table",
    "matrix_table",
    "result_table",
    "step_table",
    "steps_table",
    "sweep_table",
]


NOT_ASSERTED = "not asserted"


def _count(value: float | None) -> int | None:
    return None if value is None else int(round(value))


def _expected_counts(frame: pd.DataFrame, column: str) -> None:
    """Integers where every expected count is whole (the usual case), else three decimals, as
    the notebook shows them: 40 requests over 3 replicas expect 13.333 each."""
    values = frame[column].round(3)  # 0.1 * 30 is 3.0000000000000004, which is whole
    if len(values) and all(float(v).is_integer() for v in values):
        frame[column] = values.astype("Int64")
    else:
        frame[column] = values


def _endpoints(result: ScenarioResult) -> dict[int, str | None]:
    return {w.index: w.endpoint for w in result.workers}


def result_table(result: ScenarioResult) -> Table:
    """One row per burst and worker: counter before and after, delta, and what was expected.

    `expected` is what the burst's rule expects of the worker: `moves`, `stays`, or `may move`
    where a correct router leaves a worker still too often at the burst's size for moving to be
    asserted. `ok` is whether the worker did what the rule asserts of it, or `not asserted`
    where the rule allows it to stay still (and it did). `burst` names the burst (the model it
    sent, for the dispatch scenarios); `serves` is the model the worker serves; `p_value` the burst's split against the weights, where it
    was tested; `endpoint` the worker's endpoint (empty when attached). The caption says
    what each burst asserted.
    """
    rows = []
    for burst in result.bursts:
        p_value = burst.check.p_value if burst.check else None
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
                    # moves, may move (a still worker is not asserted) or stays
                    "expected": row.expectation
                    if row
                    else ("moves" if w.index in burst.expected else "stays"),
                    "expected_delta": burst.expected_count(w.index),
                    # None: the rule asserts nothing of this worker (it may stay still).
                    "ok": (NOT_ASSERTED if row.ok is None else row.ok) if row else None,
                    "p_value": p_value,
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
        "expected",
        "expected_delta",
        "ok",
        "p_value",
        "endpoint",
    ]
    rules = [f"{b.name}: {b.rule}" for b in result.bursts if b.rule]
    frame = table_of(rows, columns, caption="asserted: " + " | ".join(rules) if rules else "")
    for column in ("before", "after", "delta"):
        frame[column] = frame[column].astype("Int64")  # integers, with <NA> for a worker that was not read
    if rows:
        _expected_counts(frame, "expected_delta")
    if frame["p_value"].isna().all():
        frame = frame.drop(columns=["p_value"])
    return frame


def figures_table(result: ScenarioResult) -> Table:
    """The run's own figures as a two-column table: what the scenario measured beyond the
    counters (its `figures.rows()`), what etcd listed when attached, and every event."""
    rows = list(result.figures.rows()) if result.figures is not None else []
    rows += [
        (f"in etcd: {d['path']}", f"instance {d['instance_id']} at {d['address']}") for d in result.discovered
    ]
    rows += [(f"{e.kind} at {e.at:.3f} s", e.detail) for e in result.events]
    return table_of([{"figure": f, "value": v} for f, v in rows], ["figure", "value"])


def steps_table(steps: Sequence[Step]) -> Table:
    """One row per burst: per-worker deltas and shares (worker 0 / worker 1 / ...), the
    cumulative share in its phase, the p-value, the verdict and, for a burst that did not
    pass, why. `table(explorer)` is every burst so far; a failed burst's row is shaded.
    """
    phases: dict[int, list[Step]] = {}
    for step in steps:
        phases.setdefault(step.phase, []).append(step)
    # Steps an Explorer made carry their cumulative shares; others get them from the steps given.
    computed = {
        step.index: shares
        for phase_steps in phases.values()
        for step, shares in zip(phase_steps, cumulative_shares([s.deltas for s in phase_steps]))
    }
    workers = len(steps[0].deltas) if steps else 0
    order = " / ".join(f"worker {w}" for w in range(workers))
    rows = [
        {
            "burst": step.number,
            "phase": step.phase,
            "weights": weights_label(step.weights),
            "requests": step.requests,
            "deltas": _joined(step.deltas, "{:.0f}"),
            "observed_share": _joined(step.observed_shares),
            "expected_share": _joined(step.expected_shares),
            "cumulative_share": _joined(step.cumulative_shares or computed[step.index]),
            "p_value": step.p_value,
            "verdict": str(step.result.verdict),
            "reason": "; ".join(step.result.reasons),  # a pass's notes too (a still worker allowed)
        }
        for step in sorted(steps, key=lambda s: s.index)
    ]
    columns = list(rows[0]) if rows else ["burst", "phase", "weights", "deltas", "verdict", "reason"]
    caption = (
        f"per worker, in order: {order}; cumulative share: since the phase's weights were set" if rows else ""
    )
    return table_of(rows, columns, caption=caption)


def step_table(step: Step) -> Table:
    """The one burst `explorer.burst()` returned: one row per worker."""
    endpoints = _endpoints(step.result)
    cumulative = step.cumulative_shares or tuple(step.observed_shares)
    rows = [
        {
            "worker": worker,
            "delta": int(delta),
            "observed_share": round(step.observed_shares[worker], 3),
            "expected_share": round(step.expected_shares[worker], 3),
            "cumulative_share": round(cumulative[worker], 3),
            "endpoint": endpoints.get(worker) or "",
        }
        for worker, delta in enumerate(step.deltas)
    ]
    verdict = str(step.result.verdict).upper()
    p_text = "" if step.p_value is None else f", p = {step.p_value:.3g}"
    why = f": {'; '.join(step.result.reasons)}" if step.result.reasons else ""
    caption = f"burst {step.number} under {weights_label(step.weights)}: {verdict}{p_text}{why}"
    return table_of(rows, list(rows[0]) if rows else ["worker"], caption=caption)


def sweep_table(sweep: SweepResult) -> Table:
    """One row per weight setting: per-worker deltas, expected and observed shares, the p-value."""
    workers = len(sweep.points[0].deltas) if sweep.points else 0
    rows = [
        {
            "weights": weights_label(p.weights),
            "requests": p.requests,
            "deltas": _joined(p.deltas, "{:.0f}"),
            "expected_delta": _joined([e * p.requests for e in p.expected_shares], "{:g}"),
            "expected_share": _joined(p.expected_shares),
            "observed_share": _joined(p.observed_shares),
            "p_value": p.p_value,
            "verdict": str(p.result.verdict),
            "reason": "; ".join(p.result.reasons),
        }
        for p in sweep.points
    ]
    order = " / ".join(f"worker {w}" for w in range(workers))
    columns = list(rows[0]) if rows else ["weights", "verdict"]
    return table_of(rows, columns, caption=f"per worker, in order: {order}" if rows else "")


def _joined(values: Sequence[float], fmt: str = "{:.3f}") -> str:
    return " / ".join("-" if v != v else fmt.format(v) for v in values)  # v != v: NaN, nothing counted yet


def matrix_table(matrix: ConformanceTable) -> Table:
    """One row per stack, one column per check: the verdict and what happened."""
    import pandas as pd

    rows = {
        stack: {
            check: (f"{c.verdict.upper()}: {c.text}" if (c := matrix.cell(stack, check)) else "")
            for check in matrix.checks
        }
        for stack in matrix.stacks
    }
    frame = Table(pd.DataFrame.from_dict(rows, orient="index", columns=matrix.checks))
    return frame.rename_axis("stack").reset_index()


def deployment_table(deployment: Deployment) -> Table:
    """One row per process: its services (etcd), the frontend, then each worker by index,
    with its URL, endpoint, pid and log (the full path).

    A stopped deployment still has its table: its processes' pids and logs, none running.
    """

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
                "endpoint": unless_stopped(functools.partial(deployment.endpoint, index)) or "",
                "pid": proc.pid,
                "running": proc.alive(),
                "log": str(proc.log_path),
            }
        )
    return table_of(
        rows,
        ["process", "url", "endpoint", "pid", "running", "log"],
        caption=f"run dir: {deployment.run_dir}"
        + ("" if deployment.spec.seed is None else f"; the frontend's routing seed: {deployment.spec.seed}"),
    )


def similarity_table(
    deployment: Deployment | Target, sentences: Sequence[str], *, model: str | None = None
) -> Table:
    """Cosine similarity of `sentences`, embedded through the deployment's frontend: whether
    the vectors mean something (a real model's do; the hash engine's are noise)."""
    import numpy as np

    target = target_of(deployment)
    model = model or next((m for m in target.models if m), None)
    if model is None:
        raise ConfigError("name the model: this deployment did not say what its workers serve")
    vectors = np.asarray(embed(target.frontend_url, model, sentences))
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    scores = unit @ unit.T
    rows = [
        {"sentence": s, **{f"{j}": float(scores[i, j]) for j in range(len(sentences))}}
        for i, s in enumerate(sentences)
    ]
    caption = f"cosine similarity of {model}'s vectors, through {target.frontend_url} (column j: sentence j, from 0)"
    return table_of(rows, ["sentence", *map(str, range(len(sentences)))], caption=caption)
