"""The busy-pool check's statistical defaults, named once (the budget and the rate: embedlab/defaults.py).

Each says why it is what it is; the figures behind them are in docs/busy-method.md.
"""

from __future__ import annotations

from ...defaults import BUSY_BUDGET_S, BUSY_RATE_PER_S

# The longest a busy-pool check runs before it ends inconclusive, saying what it could rule out.
BUDGET_S = BUSY_BUDGET_S
# One window of the schedule. Under steady Poisson traffic the check's power depends on its rate
# times the budget, not on the window; but each block at most doubles the evidence (a sign-flip),
# and a burst edge inside a pair is noise, so shorter windows decide sooner: simulated at 40 req/s
# and 1x bursty traffic, 0.5 s windows passed a correct 2-replica pool 51 % of the time within
# 60 s, 0.25 s windows 99 % (median 22 s; docs/busy-method.md). Below 0.25 s a 64-worker
# snapshot and the check's own latency take too large a part of each window.
WINDOW_S = 0.25
# Through Prometheus, each window lasts a scrape interval (evidence/prom_source.py) and sends for
# what fits of it: the budget counts that sending, and holds at least this many blocks (60 s of
# sending holds 9 blocks of 3.25 s windows at 5 s scrapes, short of the 14 a sign-flip test needs at
# the check's level). A correct 2 x 2 pool passed direct in about 20 blocks with another client at
# its rate (docs/verification.md); twice that, for slack.
SCRAPED_BLOCKS = 40
# The check's rate while it sends, for a model of two replicas (embedlab.defaults, where the burst
# path reads it too): what the simulations assume unless told otherwise.
RATE_PER_S = BUSY_RATE_PER_S
# Requests of a window are sent in its first part and answered before its end, so none is in
# flight at the snapshot that closes it (a request that is would count in the next window).
SEND_FRACTION = 0.7
# Family-wise error of one busy check (split over its tests by Bonferroni): a correct router is
# accused with at most this probability, whatever the other clients do; the same level as the
# quiet pool's fairness test (embedlab.defaults.FAIRNESS_ALPHA).
BUSY_CHECK_ALPHA = 0.001
# The faults a passing check must have ruled out: an idle replica, a 0.9/0.1 skew between two
# replicas, (with two models or more) a leak of one request in ten, and, per model, one request in
# ten counted twice (a timeout retry whose first attempt still counts, hedging) or not at all
# (answered by a response cache, or dropped with a 200).
SKEW = 0.9
LEAK = 0.1
SURPLUS = 0.1
# The quiet pool's target: each of those faults caught with at least this probability.
POWER = 0.99
# More requests than this share still in flight at a window's end, and the check ends
# inconclusive: the counts of the following windows carry them.
LATE_TOLERANCE = 0.01
# A random router's binomial split of a window's requests is skewed for a small share (docs/busy-
# method.md, "Exact and approximate"): past this skewness, the side a replica's share test leans
# to accuses only at a level SKEWED_STRICTER times stricter. Simulated on 16 replicas at 5
# requests a 1 s window (skewness 1.6), 400 clean and 100 faulty checks a cell: false alarms
# 0.3 % at most (up to 2.8 % judged evenly, 0 % with that side off), stick and skew:0.9 still
# caught in 100 % of checks up to 1x (0 % at 1x bursty with that side off).
SKEWNESS = 0.5
SKEWED_STRICTER = 10.0
