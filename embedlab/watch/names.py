"""The watch's names and defaults, defined once: what crosses to Prometheus, Grafana and the rules.

The metrics follow Prometheus's conventions: a state set in kube-state-metrics' style (one
series per state, the current one 1 and the others 0), gauges in base units, counters ending
in `_total`. `assets/rules.yml` and `assets/dashboard.json` use these names;
tests/unit/watch/test_watch_assets.py checks that every name they use is one the exporter serves.
"""

from __future__ import annotations

from pathlib import Path

# -- defaults ---------------------------------------------------------------------------------
PORT = 9464  # `--port`: Prometheus's own exporters' range (9464 is OpenTelemetry's exporter port)
# The check's own average request rate (`--max-rate`), over the whole pool. The windows send
# faster (WINDOW_REQUESTS per model in a window of WINDOW_S) and the blocks are spaced so that
# the average stays under the cap: the evidence grows with the product of the average and the
# in-window rate, so short dense windows with gaps between them decide sooner than a steady
# trickle at the same average. Simulated on a 2 x 2 pool with another client at 4 req/s, a
# correct router passed every check in 34 blocks of 6 requests a window (median; p95 66) and in
# 25 of 8 (p95 41), 5 of them needing 47: 8 a window passes soonest in the tail. At 16 req/s a
# block of a 2 x 2 pool starts every 1 s: a median 25 s and a p95 of 41 s to ok, inside the first
# minute (at 8 req/s: 50 s and 82 s); 16 small requests a second are a sliver of what a pool
# serves (docs/verification.md, "A continuous watch").
MAX_RATE = 16.0
WINDOW_REQUESTS = 8
# How long one test lives, and how often a new one starts: a fault that starts after an hour
# meets a test at most STAGGER_S old, and a verdict rests on the last HORIZON_S alone.
HORIZON_S = 300.0
STAGGER_S = 60.0
# A test's false-alarm probability over its whole life (Ville's inequality; judge.py). A one-shot
# busy check runs at evidence.busy.constants.BUSY_CHECK_ALPHA (0.001), but the watch starts a test
# every STAGGER_S, so its bound is alpha x 3600 / STAGGER_S alarms an hour: at 0.001 that is 0.06 an hour,
# 1.4 a day, too many for an alert that pages someone. At 1e-4 it is 0.006 an hour, one a week at
# most whatever the pool does, for about a quarter more blocks to ok and to conviction (simulated:
# first ok median 32 s against 26 s, an idle replica caught in 22 blocks against 17;
# docs/verification.md).
WATCH_TEST_ALPHA = 1e-4
SCRAPE_TIMEOUT_S = 5.0  # one read of a worker; longer, and the read failed (an event, never a verdict)
RETRY_S = 1.0  # after a failed read or a disturbed block, the wait before the next try
# After a worker was unreadable or restarted, blocks wait this long: a worker back on its port may
# serve /metrics before its router sends it traffic again, and those seconds are not routing's.
SETTLE_S = 5.0
RATE_SPAN_S = 60.0  # the request rates shown are averages over this long

# -- what the watch says ----------------------------------------------------------------------
OK, FAILING, INCONCLUSIVE = "ok", "failing", "inconclusive"
STATES = (OK, FAILING, INCONCLUSIVE)
SAME_MODEL, MULTI_MODEL, COUNTED_ONCE = "same-model", "multi-model", "counted-once"

# -- metrics ------------------------------------------------------------------------------------
PREFIX = "embedlab_watch_"
VERDICT = PREFIX + "verdict"  # {check, model, verdict}: 1 for the current state, 0 for the others
EVIDENCE = PREFIX + "evidence"  # {check, model}: log10 of the largest e-value against a correct router
EVIDENCE_THRESHOLD = PREFIX + "evidence_threshold"  # {check, model}: the log10 e-value that is an alarm
RULED_OUT = PREFIX + "ruled_out"  # {check, model}: the smallest fault ruled out now (NaN: none yet)
REQUEST_RATE = PREFIX + "request_rate"  # {check, model}: the check's own requests per second
POOL_RATE = PREFIX + "pool_request_rate"  # every worker's counter together, per second
SHARE = PREFIX + "share"  # {worker, model}: the check's own share estimate on the worker
SHARE_LOW = PREFIX + "share_low"  # {worker, model}: its confidence sequence's bounds
SHARE_HIGH = PREFIX + "share_high"
SHARE_EXPECTED = PREFIX + "share_expected"  # {worker, model}: what its weight says
ALARMS = PREFIX + "alarms_total"  # {check, model}: one per fault found (not per window it lasts)
CHECKS = PREFIX + "checks_total"  # {check, model}: tests run to their end (passed, failed or expired)
BLOCKS = PREFIX + "blocks_total"  # {outcome}: kept, or set aside and why
REQUESTS = PREFIX + "requests_total"  # {model}: the check's own requests answered
SCRAPE_FAILURES = PREFIX + "scrape_failures_total"  # {worker}: reads that failed or timed out
EVENTS = PREFIX + "events_total"  # {kind}: what the pool did (a reset, a worker gone, the router down)
MISPLACED = PREFIX + "misplaced_total"  # {model}: the check's requests a worker of another model refused
UPTIME = PREFIX + "uptime_seconds"
# {source, url}: where the workers' counters are read, "prometheus" (its URL) or each worker's "metrics"
COUNTERS_INFO = PREFIX + "counters_info"
SCRAPE_WAIT = PREFIX + "scrape_wait_seconds_total"  # the reads' waits for Prometheus to scrape every worker

# Labels.
CHECK, MODEL, STATE, WORKER, OUTCOME, KIND = "check", "model", "verdict", "worker", "outcome", "kind"
SOURCE, URL = "source", "url"

# The alert the rules file defines (and the Prometheus test waits for).
ALERT = "EmbedlabRoutingFailing"

ASSETS = Path(__file__).with_name("assets")
RULES_FILE = ASSETS / "rules.yml"
DASHBOARD_FILE = ASSETS / "dashboard.json"
