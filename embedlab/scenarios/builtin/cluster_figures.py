"""The cluster faults' own knobs and figures: partition, etcd-restart and the lease-TTL sweep.

Kept apart from `cluster.py`, which runs the faults: these are plain data, read by the
views and the reports through the `Figures` protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..params import knob
from ..result import DataFigures, Unread

__all__ = [
    "CounterSample",
    "EtcdRestartParams",
    "FaultFigures",
    "PartitionParams",
    "TtlPoint",
    "TtlSweepFigures",
    "TtlSweepParams",
]

RATE = 20.0  # requests per second of steady traffic: enough to see every second of a fault
# 128 in flight: at 20 requests/s, requests that hang 5 s must not stall the traffic.
IN_FLIGHT = 128


@dataclass(frozen=True, kw_only=True)
class PartitionParams:
    victim: int = knob(1, "the worker whose host is cut off (its host, not host 0)", min=0)
    concurrency: int = knob(IN_FLIGHT, "requests that may hang at once", min=1)

    def describe(self) -> str:
        return (
            f"steady traffic at {RATE:g} requests/s (up to {self.concurrency} in flight), "
            f"worker {self.victim}'s host cut off for 2 lease TTLs + 2 s"
        )


@dataclass(frozen=True, kw_only=True)
class EtcdRestartParams:
    down_s: float = knob(3.0, "seconds etcd stays down", min=0)
    concurrency: int = knob(IN_FLIGHT, "requests that may hang at once", min=1)

    def describe(self) -> str:
        return (
            f"steady traffic at {RATE:g} requests/s (up to {self.concurrency} in flight), "
            f"etcd down for {self.down_s:g} s"
        )


@dataclass(frozen=True, kw_only=True)
class TtlSweepParams:
    ttls: tuple[float, ...] = knob(
        (3.0, 5.0, 10.0), "the workers' lease TTLs, in seconds, one deployment each"
    )
    victim: int = knob(1, "the worker that is SIGKILLed", min=0)
    concurrency: int = knob(IN_FLIGHT, "requests that may hang at once", min=1)

    def describe(self) -> str:
        ttls = ", ".join(f"{t:g}" for t in self.ttls)
        return (
            f"steady traffic at {RATE:g} requests/s (up to {self.concurrency} in flight), worker {self.victim} "
            f"SIGKILLed at lease TTLs of {ttls} s"
        )


@dataclass(frozen=True)
class CounterSample:
    """Worker `worker`'s counter `at_s` seconds into the traffic; None where it could not be read."""

    at_s: float
    worker: int
    value: float | None


@dataclass(frozen=True)
class FaultFigures(DataFigures):
    """What a cluster fault did to steady traffic: reported figures, and the recovery that was asserted."""

    fault: str  # "partition of host 2", "etcd down 3 s"
    started_s: float  # when the fault began, seconds into the traffic
    ended_s: float | None  # when it was undone (heal, etcd ready)
    failed_requests: int
    status_codes: dict[str, int]  # of the failed requests; "0": no HTTP answer at all
    longest_hang_s: float  # the slowest request, failed or not
    served_during_fault: int  # requests answered 200 while the fault lasted
    left_dispatch_after_s: float | None  # from the fault until the frontend stopped listing the victim
    back_after_s: float | None  # from the fault's end until the victim served again
    recovered: bool  # the same-model check after recovery passed
    samples: tuple[CounterSample, ...] = ()  # every worker's counter, polled through the fault
    not_judged: str | None = None  # why the recovery burst decided nothing, where it did not
    unread: tuple[Unread, ...] = ()  # the workers the recovery burst could not read: down or restarting

    def rows(self) -> list[tuple[str, str]]:
        codes = ", ".join(
            f"{n} x {'no answer' if c == '0' else 'HTTP ' + c}" for c, n in sorted(self.status_codes.items())
        )
        ended = "-" if self.ended_s is None else f"{self.ended_s:.1f}"
        left = self.left_dispatch_after_s
        back = self.back_after_s
        return [
            ("fault", f"{self.fault}, from {self.started_s:.1f} s to {ended} s"),
            ("failed requests", f"{self.failed_requests}" + (f" ({codes})" if codes else "")),
            ("longest hang", f"{self.longest_hang_s:.2f} s"),
            ("answered during the fault", str(self.served_during_fault)),
            ("out of dispatch", "not seen" if left is None else f"{left:.1f} s after the fault"),
            ("serving again", "not seen" if back is None else f"{back:.1f} s after it ended"),
            ("recovery burst (asserted)", self._recovery()),
        ] + [(f"worker {u.worker} not read {u.when}", u.error) for u in self.unread]

    def _recovery(self) -> str:
        if self.recovered:
            return "passed"
        return "FAILED" if self.not_judged is None else f"not judged: {self.not_judged}"

    def key_figures(self) -> dict[str, Any]:
        left = self.left_dispatch_after_s
        return {
            "failed requests": self.failed_requests,
            "out of dispatch": "not seen" if left is None else f"{left:.1f} s after the fault",
            "longest hang": f"{self.longest_hang_s:.2f} s",
            "recovered": "yes" if self.recovered else ("NO" if self.not_judged is None else "not judged"),
        }


@dataclass(frozen=True)
class TtlPoint:
    """One setting of the lease-TTL sweep: a worker SIGKILLed, and how long the cluster took to notice."""

    lease_ttl_s: float
    left_dispatch_after_s: float | None
    failed_requests: int
    status_codes: dict[str, int]


@dataclass(frozen=True)
class TtlSweepFigures(DataFigures):
    """The sweep's points, one per lease TTL."""

    points: tuple[TtlPoint, ...]

    def rows(self) -> list[tuple[str, str]]:
        return [(f"TTL {p.lease_ttl_s:g} s", _point(p)) for p in self.points]

    def key_figures(self) -> dict[str, Any]:
        return {f"TTL {p.lease_ttl_s:g} s": _point(p) for p in self.points}


def _point(p: TtlPoint) -> str:
    left = "never" if p.left_dispatch_after_s is None else f"{p.left_dispatch_after_s:.1f} s"
    return f"out of dispatch after {left}, {p.failed_requests} failed requests"
