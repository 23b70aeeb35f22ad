"""Dynamo 1.6.1's own per-request attribution: the `Selected worker` lines of its frontend's log.

Dynamo's frontend names no worker on an embeddings response (no header; `nvext.extra_fields`
is answered for completions only) and its /metrics carry no per-worker series. One signal
exists: with its push router logging at info, in JSON lines (`defaults.DYNAMO_ATTRIBUTION_ENV`),

    {"level": "INFO", "message": "Selected worker", "worker_id": 704403488172215793,
     "x_request_id": "<the client's x-request-id>", "router_mode": "round-robin", ...}

one line per routing attempt. A burst that sends a unique `x-request-id` with every request
reads the lines written since it began (`FrontendLog.mark`, `FrontendLog.selected`) and maps
each instance id to a worker index by the `worker_id` label of that worker's counter series
(`instances`; Dynamo's `dynamo_component_requests_total` carries it). Measured on Dynamo 1.6.1:
400 requests at concurrency 8, 400 of 400 found, the per-worker counts from the log (185, 215)
equal to the counters' deltas; random and least-loaded modes 200 of 200.

A request with no line, or with more than one (Dynamo reselects where an instance disappears
during routing), is not attributed; the burst then falls back on its counters. Newer Dynamo
sources log round-robin and random choices at trace level only: the signal is 1.6.1's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .metrics import Snapshot

__all__ = ["SELECTED", "FrontendLog", "attributed", "instances", "instances_from_health", "selected_workers"]

SELECTED = "Selected worker"


def _field(line: Mapping[str, Any], name: str) -> Any:
    """A field of a JSON log line: at its top, or in its `fields` or one of its spans."""
    if name in line:
        return line[name]
    nested = [line.get("fields"), line.get("span"), *(line.get("spans") or [])]
    for part in nested:
        if isinstance(part, dict) and name in part:
            return part[name]
    return None


def selected_workers(lines: Iterable[str]) -> dict[str, list[int]]:
    """x-request-id -> the instance ids the frontend selected for it, from its log's lines (lines
    that are not JSON, or not a selection, are skipped)."""
    found: dict[str, list[int]] = {}
    for text in lines:
        if SELECTED not in text:
            continue
        try:
            line = json.loads(text)
        except ValueError:
            continue
        if not isinstance(line, dict) or _field(line, "message") != SELECTED:
            continue
        request, worker = _field(line, "x_request_id"), _field(line, "worker_id")
        try:
            found.setdefault(str(request), []).append(int(worker))
        except (TypeError, ValueError):
            continue
    return found


def instances(snapshots: Sequence[Snapshot], indices: Sequence[int]) -> dict[int, int]:
    """Instance id -> worker index, from the `worker_id` label of each worker's counter series
    (`snapshots[k]` is worker `indices[k]`'s). The label is read as decimal and as hex: either
    spelling of the log's number names the worker."""
    found: dict[int, int] = {}
    for snapshot, index in zip(snapshots, indices):
        for labels, _ in snapshot.series:
            value = dict(labels).get("worker_id")
            if not value:
                continue
            for base in (10, 16):
                try:
                    found[int(value, base)] = index
                except ValueError:
                    pass
    return found


def instances_from_health(
    health: Any, snapshots: Sequence[Snapshot], indices: Sequence[int]
) -> dict[int, int]:
    """Instance id -> worker index, from the frontend's `/health` (`instances[]`: `instance_id`,
    `namespace`, `component`, `endpoint`) and the `dynamo_namespace`/`dynamo_component`/
    `dynamo_endpoint` labels of each worker's counter: where an endpoint is one worker's alone."""
    if not isinstance(health, dict):
        return {}
    owner: dict[tuple[str, str, str], set[int]] = {}
    for snapshot, index in zip(snapshots, indices):
        for labels, _ in snapshot.series:
            named = dict(labels)
            key = (
                named.get("dynamo_namespace", ""),
                named.get("dynamo_component", ""),
                named.get("dynamo_endpoint", ""),
            )
            if key[1]:
                owner.setdefault(key, set()).add(index)
    found: dict[int, int] = {}
    for item in health.get("instances") or []:
        if not isinstance(item, dict):
            continue
        key = (str(item.get("namespace", "")), str(item.get("component", "")), str(item.get("endpoint", "")))
        workers = owner.get(key, set())
        try:
            if len(workers) == 1:
                found[int(item["instance_id"])] = next(iter(workers))
        except (KeyError, TypeError, ValueError):
            continue
    return found


def attributed(
    statuses: Mapping[str, int], selected: Mapping[str, list[int]], workers: Mapping[int, int]
) -> dict[int, int] | None:
    """Worker index -> the answered requests the log attributes to it, `statuses` naming each of the
    burst's requests by its id (0: no answer). None where an answered request has no single
    selection of a known worker: the counters alone then judge the burst."""
    served: dict[int, int] = {}
    for request, status in statuses.items():
        if not status:
            continue  # no answer: it may never have been routed
        picked = selected.get(request, [])
        if len(picked) != 1 or picked[0] not in workers:
            return None
        index = workers[picked[0]]
        served[index] = served.get(index, 0) + 1
    return served


@dataclass(frozen=True)
class FrontendLog:
    """The Dynamo frontend's log file, read from where it stood when a burst began."""

    path: Path

    def mark(self) -> int:
        """Where the log ends now: the lines after it are the burst's."""
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0

    def selected(self, since: int) -> dict[str, list[int]]:
        """The selections logged after `since` (a `mark`), by x-request-id."""
        try:
            with self.path.open("rb") as f:
                f.seek(since)
                text = f.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return {}
        return selected_workers(text.splitlines())
