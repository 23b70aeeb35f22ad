"""Failover's figures: plain data, read by the views and the reports through the `Figures`
protocol (kept apart from `resilience.py`, which kills the worker)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..result import DataFigures

__all__ = ["FailoverFigures"]


@dataclass(frozen=True)
class FailoverFigures(DataFigures):
    """What failover measured around the kill. Asserted on some stacks, reported on others."""

    victim: int
    kill_after_responses: int
    requests: int
    killed_at_s: float | None  # seconds into the burst
    excluded_after_s: float | None  # from the kill until the frontend stopped dispatching to it
    lease_ttl_s: (
        float | None
    )  # the stack's own lease where embedlab's frontend keeps it; None: the stack decides
    failed_requests: int
    codes: dict[str, int]  # HTTP status of the failed requests; "0": no answer
    responses_after_kill: int
    errors_window_s: float  # from the kill until the last failed response
    asserted: bool
    victim_counter_before: float | None  # None: it could not be read before the burst
    served_by: dict[str, int]  # responses per worker, by label, where the frontend names them
    # What the router's own counters say it sent the victim over the burst (None: it keeps
    # none): beside the responses that named the victim, sends that died with it show.
    router_counted_victim: float | None = None

    def rows(self) -> list[tuple[str, str]]:
        killed = (
            "never"
            if self.killed_at_s is None
            else f"{self.killed_at_s:.3f} s into the burst, after {self.kill_after_responses} responses"
        )
        out = (
            "never seen"
            if self.excluded_after_s is None
            else f"{self.excluded_after_s * 1000:.0f} ms after the kill"
        )
        ttl = (
            f"{self.lease_ttl_s:g} s (limit: 2 TTLs)"
            if self.lease_ttl_s
            else "the stack's own discovery decides"
        )
        rows = [
            ("victim", f"worker {self.victim}"),
            ("killed at", killed),
            ("out of dispatch", out),
            ("lease TTL", ttl),
            ("failed requests", str(self.failed_requests)),
            ("errors seen for", f"{self.errors_window_s:.2f} s after the kill"),
            ("responses after the kill", str(self.responses_after_kill)),
        ]
        rows += [(f"served by {w}", str(n)) for w, n in sorted(self.served_by.items())] or [
            ("served by", "not named: this frontend marks no response with its worker")
        ]
        if self.router_counted_victim is not None:
            rows.append((f"the router counted for worker {self.victim}", f"{self.router_counted_victim:g}"))
        return rows + [("verdict", "asserted" if self.asserted else "reported, not asserted")]

    def key_figures(self) -> dict[str, Any]:
        shown = f" (HTTP {', '.join(sorted(self.codes))})" if self.codes else ""
        out = (
            "not seen"
            if self.excluded_after_s is None
            else f"{self.excluded_after_s * 1000:.0f} ms after the kill"
        )
        figures = {"lost": f"{self.failed_requests} of {self.requests}{shown}", "out of dispatch": out}
        answered = self.served_by.get(f"worker {self.victim}")
        if self.router_counted_victim is not None and answered is not None:
            # Sends that died with the worker, or were retried elsewhere, count here and answered nothing.
            figures["dead worker"] = (
                f"router counted {self.router_counted_victim:g} sends, {answered} answered"
            )
        return figures
