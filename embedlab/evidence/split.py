"""How a same-model split over a router's workers is judged, by its policy: named once.

    WEIGHTS  random, weighted: the split's p-value against the weights must reach alpha
    EXACT    round-robin: every worker within one request of the others
    REPORT   a policy that may pick one worker (cache-aware, least-loaded): shown, not asserted

A stack says which applies to each of its policies (`split_for(router_mode)`).
"""

from __future__ import annotations

import enum

__all__ = ["Split"]


class Split(enum.StrEnum):
    WEIGHTS = "weights"
    EXACT = "exact"
    REPORT = "report"
