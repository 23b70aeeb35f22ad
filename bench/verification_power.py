"""How often do embedlab's checks catch a routing fault, and how often do they cry wolf?

Each fault of the embedded frontend's catalogue (`--fault`) runs at least 50 times
through the scenario check it should trip, at the scenarios' default burst sizes, and
clean deployments run 100 times per scenario. The detection and false-alarm rates, and
the burst size the fairness test needs to catch a 90/10 skew, go into
docs/verification.md and bench/results/verification_power.json.

    .venv/bin/python bench/verification_power.py [--runs 50] [--clean-runs 100] [--background-runs 20]

With another client: `hey` sends one model's requests, 20 a second, to the same pool
during every run, and the checks run twice, on one deployment, in turns: launched (the
embedded stack names the serving worker on each response, which proves placement) and as
an attached user sees it (the counters alone, which cannot tell that client's requests
from the check's).

The busy-pool table (issue 30) is its own step, and rewrites only its section of the doc:

    .venv/bin/python bench/verification_power.py --busy [--sim-clean-runs 200] [--sim-fault-runs 100]
    .venv/bin/python bench/verification_power.py --busy --from-json   # re-render from the last results

Attached, counters only, pools 1x2 (same-model), 2x1 (multi-model), 2x2 (mixed) and 1x16
(same-model). Real runs (hash workers, the embedded frontend with `--fault`, `hey` as the other
client) measure, per pool, what the check's schedule is on this machine: the window and the
requests in it that the sender was fitted to, the wall time a kept block costs (the blocks set
aside for a late answer included), the time before the schedule starts (the quiet bursts, the
fitting) and the other client's variance per window. The hundreds of runs per cell are then
simulated from those figures (`embedlab.evidence.busy.simulate`: the other client's arrivals at
each shape and rate, the router's placement and the frontend's faults, feeding the same
BlockEngine a real check decides with), and a few cells are run for real beside them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from embedlab import Deployment, DeploymentSpec, ScenarioPlan, ScenarioResult

# Not in the public API: the named defaults themselves, which this benchmark reports on.
from embedlab.defaults import FAIRNESS_ALPHA as DEFAULT_FAIRNESS_ALPHA
from embedlab.evidence.busy import leak_requests, quiet_power, required_requests
from embedlab.evidence.busy.simulate import Background, Pool, simulate
from embedlab.jsonio import write_text_atomic
from embedlab.verdicts import Verdict

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from measure import HEY  # noqa: E402

MULTI_BURST = 10  # multi_model_dispatch's default requests (per burst)


@dataclass
class Case:
    label: str
    fault: str | None
    scenario: str  # same-model | multi-model | drain
    requests: int
    why: str
    target: float | None = None  # required detection rate, or None: reported only
    outcomes: list[bool] = field(default_factory=list)  # True: the check flagged the run
    reasons: dict[str, int] = field(default_factory=dict)
    latency_ratio: list[float] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        return sum(self.outcomes) / len(self.outcomes) if self.outcomes else float("nan")


DEFAULT_SAME_MODEL_REQUESTS = required_requests([1.0, 1.0]).requests  # the scenario's own, for two replicas


def run_scenario(dep: Deployment, scenario: str, requests: int) -> ScenarioResult:
    return ScenarioPlan(scenario=scenario, params={"requests": requests}).run_on(dep)


FRONTEND = {"processes": 1}  # set from --frontend-processes


def spec_for(case: Case) -> DeploymentSpec:
    args = ("--fault", case.fault) if case.fault else ()
    if FRONTEND["processes"] > 1:
        args += ("--processes", str(FRONTEND["processes"]))
    if case.scenario == "multi-model":
        return DeploymentSpec.multi_model(["model-a", "model-b"], frontend_args=args)
    return DeploymentSpec.same_model("embed-model", workers=2, frontend_args=args)


def per_worker_latency_ratio(result: ScenarioResult) -> float:
    """Slowest worker's median latency over the fastest's, from the served-by headers."""
    by_worker: dict[str, list[float]] = {}
    for record in result.bursts[0].traffic.records:
        if record.ok and record.worker:
            by_worker.setdefault(record.worker, []).append(record.latency)
    medians = [statistics.median(v) for v in by_worker.values() if v]
    return max(medians) / min(medians) if len(medians) >= 2 else float("nan")


def measure(case: Case, runs: int) -> None:
    started = time.monotonic()
    with Deployment(spec_for(case)) as dep:
        for _ in range(runs):
            result = run_scenario(dep, case.scenario, case.requests)
            flagged = not result.passed
            case.outcomes.append(flagged)
            for reason in result.reasons:
                key = reason.split(": ", 1)[-1].split("(")[0].split(" worker")[0].strip()
                case.reasons[key] = case.reasons.get(key, 0) + 1
            if case.fault and case.fault.startswith("slow"):
                case.latency_ratio.append(per_worker_latency_ratio(result))
    case.seconds = time.monotonic() - started


@contextlib.contextmanager
def another_client(dep: Deployment, model: str, *, rate: int = 20) -> Iterator[None]:
    """`hey` sending `model`'s requests at `rate` a second for as long as the block runs."""
    body = json.dumps({"model": model, "input": "another client's request"})
    argv = [
        HEY,
        "-z",
        "3600s",
        "-c",
        "1",
        "-q",
        str(rate),
        "-m",
        "POST",
        "-T",
        "application/json",
        "-d",
        body,
    ]
    proc = subprocess.Popen(
        [*argv, f"{dep.frontend_url}/v1/embeddings"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        yield
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


@dataclass
class BackgroundCase:
    label: str
    fault: str | None
    scenario: str
    requests: int
    verdicts: dict[str, Counter[str]] = field(
        default_factory=lambda: {"launched": Counter(), "attached": Counter()}
    )
    proven_by_header: int = 0


def measure_with_another_client(case: BackgroundCase, runs: int) -> None:
    base = Case(case.label, case.fault, case.scenario, case.requests, "")
    with Deployment(spec_for(base)) as dep:
        # Counters only, as `embedlab scenario --frontend-url ... --system-url ...` sees it.
        attached = replace(dep.target(), endpoints=(), stack="attached")
        model = "model-a" if case.scenario == "multi-model" else "embed-model"
        with another_client(dep, model):
            for _ in range(runs):
                for how, target in (("launched", dep), ("attached", attached)):
                    plan = ScenarioPlan(scenario=case.scenario, params={"requests": case.requests})
                    result = plan.run_on(target)
                    case.verdicts[how][str(result.verdict)] += 1
                    if how == "launched":
                        case.proven_by_header += sum(1 for b in result.bursts if b.proven_by)


def skew_power(n: int, skew: float = 0.9, alpha: float = DEFAULT_FAIRNESS_ALPHA) -> tuple[float, float]:
    """Exact power against a skewed split, and the false-alarm rate, of the fairness test."""
    rejects = [k for k in range(n + 1) if stats.binomtest(k, n, 0.5).pvalue < alpha]
    power = float(sum(stats.binom.pmf(k, n, skew) for k in rejects))
    false_alarm = float(sum(stats.binom.pmf(k, n, 0.5) for k in rejects))
    return power, false_alarm


def smallest_burst(target: float = 0.99) -> int:
    n = 2
    while skew_power(n)[0] < target:
        n += 1
    return n


# Not measured here: what the burst path does on a busy pool since issue 30, and Dynamo's attribution finding.
BUSY_SECTION = """\
## On a busy pool: the randomized schedule (issue 30)

The attached figures above predate it (the measured and simulated table of the busy check is the
next section): since issue 30, a check whose quiet windows see traffic
embedlab did not send, and whose responses name no worker, no longer stops at *inconclusive*. It
runs a randomized on/off schedule instead (`--busy` asks for it on a quiet pool too; `--budget-s`,
default 60 s) and its verdict is the schedule's; `docs/busy-method.md` has the method and its
simulated figures, `tests/integration/test_other_traffic.py` the real pool (attached to 2 models x 2
replicas, `hey` sending both models' requests at 40 a second: a correct router passes, `leak:0.1`
and `stick` fail, counters only).

- **Design.** Windows of 0.25 s (longer where the sender cannot answer a window's requests within
  it), every worker read at every boundary, in blocks of one window per arm (same-model: off and
  on; multi-model and mixed: one model per window) in an order drawn at random per block: a
  switchback design (Bojinov, Simchi-Levi and Zhao, *Design and Analysis of Switchback
  Experiments*, Management Science 69(7), 2023). A block in which a request was still unanswered
  at a window's end is set aside and run again, so every count kept belongs to its own window.
- **Test.** Per unit (a model's replicas, one replica's share), a randomization test over the
  block's orders turned into a bet, its running product an e-process (the aGRAPA bet of
  Waudby-Smith and Ramdas, JRSS-B 2024; Ramdas, Grünwald, Vovk and Shafer, *Game-theoretic
  statistics and safe anytime-valid inference*, Stat. Sci. 2023), inverted into confidence
  sequences: the false-alarm rate (0.1 % per check) holds at whatever block the check stops,
  whatever the other clients send. Lindon and Malek (NeurIPS 2022) and Lindon et al. (KDD 2022)
  treat the same shared time-varying rate for counting processes; their `savvi`, `confseq` and
  `expectation` were read and not used (`docs/busy-method.md`, "Why no library").
- **Verdicts.** Passed only once an idle replica, a 0.9/0.1 skew and (with two models or more) a
  leak of 1 in 10 are all ruled out; failed where a unit's expected value is ruled out; at the
  budget, inconclusive with what it could rule out. Each verdict says how placement was proven:
  the counters on a quiet pool, the schedule's on-minus-off counts, or per-response attribution.
- **Power on a quiet pool.** Every same-model, multi-model and mixed verdict states the smallest
  fault it would have caught with 99 %, and the default burst follows from the pool
  (`power.required_requests`: 40 requests for two equal replicas, 690 for 16, 4350 for 64;
  44 per model for a 1-in-10 leak). A burst given by hand that cannot reach 99 % against an idle
  replica and a 0.9/0.1 skew ends inconclusive, never passed.
- **Failover.** Its burst is the burst path's (`run_burst`, every worker read but the victim):
  quiet windows around it, the header believed only where the survivors' counters agree, and on a
  busy pool (or `--busy`) the survivors judged after the kill by the schedule, the dead worker left
  out of it (read by no window, in no unit).
- **A header the counters refute.** Where the `x-embedlab-worker` header proves placement, every
  worker's counter must rise by at least the responses naming it in the same burst; a router that
  replays a cached response fails, naming the worker and both numbers
  (`tests/integration/test_header_replay.py`).

### Dynamo's own attribution

Dynamo 1.6.1's frontend answers `/v1/embeddings` with no worker header and no `nvext` field, even
when the request asks for `nvext: {"extra_fields": ["worker_id"]}` (that field exists for
completions), and its `/metrics` carry no per-worker series (their labels: model, endpoint,
request type, status, error type, router id, stage, and `worker` for a tokio thread). One signal
exists: with `DYN_LOG='warn,dynamo_runtime::pipeline::network::egress::push_router=info'` the frontend
logs `Selected worker` (target `dynamo_runtime::pipeline::network::egress::push_router`) for every
routing attempt, with `worker_id` (the instance id, which the frontend's `/health` maps to its
component, `embed-worker-N`) and the client's `x_request_id`, which the frontend also echoes on its
answer. Measured: 400 requests at concurrency 8 with unique `x-request-id`s, 400 of 400 found in the
log, and the per-worker counts from it (185 and 215) equal to the counters' deltas; random and
least-loaded modes 200 of 200. A 404 for an unknown model is rejected before routing and logs no
line; newer Dynamo sources log round-robin and random choices at trace level only, so the signal is
1.6.1's. An attached check given that log (`--dynamo-log PATH`, `attach(..., dynamo_log=)`; the
frontend's two variables are `embedlab.defaults.DYNAMO_ATTRIBUTION_ENV`) sends a unique `x-request-id`
with every request and, where the quiet windows see traffic embedlab did not send, attributes each
answered response by its `Selected worker` line, the instance id mapped to its worker by the
`worker_id` label of that worker's counter (decimal or hex; `embedlab/evidence/dynamo_log.py`). The
burst is then judged per response, and believed only where every worker's counter rose by at least
the responses the log names for it (the header's rule). A request with no line, or with more than one
(a reselection), leaves the burst to its counters, and so to the schedule; without the log, attached
Dynamo checks use the counters (quiet pool or schedule). The launched dynamo stack keeps its
frontend at `DYN_LOG=warn`; `DeploymentSpec(env=DYNAMO_ATTRIBUTION_ENV)` turns the log on
(`tests/integration/test_other_traffic.py`, attached to two Dynamo workers with `hey` beside).
"""


# The continuous watch's figures (issue 32): bench/watch_power.py and tests/integration/test_watch.py.
WATCH_SECTION = """\
## A continuous watch (issue 32)

`embedlab watch` runs the busy-pool schedule for as long as it runs (README, "Watching a live
pool"). Its defaults: 8 requests per model in windows of 0.25 s, blocks spaced so that its own
traffic averages 16 req/s at most (a block of a 2 x 2 pool every 1 s on average, at a random
spacing of 0.5-1.5 s so that no periodic fault can keep clear of its requests; it was 8 req/s, a block
every 2 s, until the figures below showed a correct router needing more than the first minute to
turn ok), a new anytime-valid test every 60 s, each living 300 s; a check fails when a test's
units rule a correct router out (at 0.1 % per test) or when a worker of another model refuses
one of its requests and the response names that worker (the embedded frontend's
`x-embedlab-worker`), and stays failing while its fault lasts.

**The counters alone, simulated** (`bench/watch_power.py --tests 6000`: the judge's own
BlockEngine on a 2 x 2 pool, another client at 4 req/s, a block a second at the 16 req/s default;
x86_64, Python 3.11.7, run 2026-12-02, 46 s on the shared 2-core machine):

- A correct router: 2 of 6,000 tests ever ruled it out over their 300 blocks (0.033 %; 95 %
  upper bound 0.105 %, nominal at most 0.1 %). Each test stands for 60 s of watching: 0.02 false
  alarms per watch-hour over 100 simulated watch-hours, at most 0.063 an hour (95 %), about one
  in 16 days of watching; the bound before any measurement is 0.1 % x 60 tests = 0.06 an hour.
- A fault meets the newest test when that test is 0 to 60 s old (60 blocks); an older test's
  bets have settled near zero on the correct blocks before, and take about twice as long to turn:

| fault | meets a test after | caught within its life | blocks to conviction, median / p90 | seconds |
|---|---|---|---|---|
| `leak:0.1` | 0 blocks | 100.0 % | 25 / 32 | 25 / 32 |
| `leak:0.1` | 60 blocks | 99.8 % | 58 / 76 | 58 / 76 |
| `leak:0.05` | 0 blocks | 100.0 % | 51 / 85 | 51 / 85 |
| `leak:0.05` | 60 blocks | 99.8 % | 97 / 133 | 97 / 133 |
| `leak:0.01` | 0 blocks | 3.7 % | 210 / 295 | 210 / 295 |
| `leak:0.01` | 60 blocks | 2.7 % | 242 / 288 | 242 / 288 |
| `skew:0.9` | 0 blocks | 100.0 % | 18 / 19 | 18 / 19 |
| `skew:0.9` | 60 blocks | 99.8 % | 38 / 47 | 38 / 47 |
| `idle` | 0 blocks | 100.0 % | 17 / 18 | 17 / 18 |
| `idle` | 60 blocks | 99.8 % | 37 / 46 | 37 / 46 |

A leak of 1 in 100 is out of the counters' reach at a few requests a second: it shifts the
placement unit by 2 % of the check's requests, under the other client's Poisson noise on the
same counters. In a longer simulation (20 tests that never end, 6 requests a window, 4 req/s of
background) it took 1,660 blocks (median; 41 minutes at 1.5 s a block); on a nearly quiet pool
(0.5 req/s of background) none of 20 tests convicted it in 3,000 blocks (a test's scale is the
median spread of recent blocks, which a rare leak leaves at zero). (At a block a second a test lives
300 blocks, and 2.7-3.7 % of them convict `leak:0.01` late in their life, at a median 210-242
blocks.) What finds it is the check's own request that lands on the wrong worker: an
embedlab worker refuses a model it does not serve with a 404, and the embedded frontend's
response names the worker, so the multi-model check fails on that response, proven by
attribution, with nothing else to rule out. The watch sends 8 req/s of each model, so with
`leak:p` the first of its requests to leak comes after 1/(8p) s on average: 12.5 s for 1 in 100,
125 s for 1 in 1,000. Through a router that names no worker, a refused request is counted where
it landed (one 4xx among a model's 200s is a worker's refusal), and the counters judge it as
above.

**Real processes** (`tests/integration/test_watch.py`: a 2 x 2 pool of hash workers behind the
embedded frontend, another client (`hey`) at 2 req/s per model, the watch at its defaults, on
the shared 2-core machine):

- At 16 req/s (the default since; 2026-12-02 15:05 UTC, beside a 2-hour soak of the same pool):
  every check ok 20.4 s after the watch started, and ok through a worker's restart for the 30 s
  it was held; the watch's own 7.4 req/s per model, the pool's 18.7 req/s; CPU 2.7 s over 52 s
  (5.2 % of a core), 63 MiB resident. `leak:0.01@40s`: the multi-model check failing 31.5 s
  after the fault's start (at the latest), one alarm, 2 misplaced requests seen, and
  Prometheus's `EmbedlabRoutingFailing` firing at 32.6 s. The three tests of the file and the
  notebook's take 192 s.
- `make run` runs `notebooks/watch_pool.ipynb` (`watch-leak` in the default matrix: `leak:0.05@5s`,
  40 s of watching): PASSED in 44 s, both multi-model checks failing, 2 alarms; and JupyterLab
  runs it by Run All under Chromium (`tests/notebooks/test_jupyterlab.py`: the figure shows
  while the watch runs and is redrawn in place, the alarm, the verdict, nothing left running;
  45 s).
- Two hours of a correct router at 16 req/s (`bench/watch_soak.py --minutes 120`, before the
  random spacing): **one alarm**, same-model model-a at 6,379 s (0.5 an hour, against the
  simulation's 0.02); 6,987 blocks kept, 51 late; every check ok by 21 s; 4.7 % of a core, 67 MiB.
  The goal is none; the share test's binomial approximation ("Exact and approximate",
  docs/busy-method.md) is the suspect, not yet analysed.

At 8 req/s (the earlier default):

- A correct router (one run, on the shared 2-core machine with other engineers' tests): every
  check ok 67.6 s after the watch started (the simulation's median at this background is 50 s,
  p95 82 s: on a busy machine its blocks come slower than every 2 s), and ok through a worker's
  restart (an `unreadable` event, then `readable`; no alarm) for the 30 s it was held. The
  watch's own rate 3.5 req/s per model (7.1 in all, under the 8 req/s cap: a block took longer
  than its 2 s), the pool's 10.7 req/s; its CPU 5.5 s over 103 s (5.3 % of a core) and
  63 MiB resident.
- `leak:0.01@40s`: the multi-model checks turned failing 26.5 s after the fault's start (at the
  latest: the frontend's clock starts after the launch began), each of the two multi-model
  series' alarm counters rose by exactly one, and stayed at one through 15 s more of the leak
  (3 misplaced requests in all); Debian's Prometheus 2.42, scraping the watch every second with
  `embedlab/watch/assets/rules.yml`, had `EmbedlabRoutingFailing` inactive before the fault and
  firing 28.4 s after its start (`/api/v1/rules`, `/api/v1/alerts`). The two tests take 113 s
  and 86 s.
- 11 minutes of a correct router (`bench/watch_soak.py --minutes 11`, the same pool and other
  client): no alarm; every check first ok by 79 s; the watch's own 7.45 req/s, the pool's 11.9;
  252 blocks kept and 56 set aside as late (the windows grew once, to 0.5 s: the machine could
  not answer 8 requests within 0.175 s often enough); 27 s of CPU (4.1 % of a core), 67 MiB peak.
- `notebooks/watch_pool.ipynb` under papermill (`tests/notebooks/test_watch_notebook.py`:
  `leak:0.05@5s`, 40 s of watching) found the leak and stopped everything it started: 79 s.

Against the issue's goals: at 8 req/s a correct router turned ok in 68 s and 79 s, not within
the first minute; at the 16 req/s default it turned ok in 20 s (the simulation's median 25 s, p95
41 s, at a block a second), and `leak:0.01` was found in 32 s, within the 2 minutes. On real
processes (`bench/watch_soak.py`, the same pool and other client, 2026-12-02 15:40 UTC, beside a
fresh clone's `make run`): `--fault leak:0.001@60s` (5 minutes) turned both multi-model checks
failing 100 s after the fault's start, one alarm each, on 4 misplaced requests; `--fault
stick@60s` (3 minutes: each model's second replica receives nothing) turned the same-model
checks failing 19 s and 51 s after it; every check was first ok by 20-22 s in both; the watch at
15.8 req/s, 3.7-3.9 % of a core, 64 MiB.
"""


def render(
    cases: list[Case],
    clean: list[Case],
    sweep: list[tuple[int, float, float, float | None]],
    args: argparse.Namespace,
    background: list[BackgroundCase],
) -> str:
    total_clean = sum(len(c.outcomes) for c in clean)
    false_alarms = sum(sum(c.outcomes) for c in clean)
    lines = [
        "# Verification power",
        "",
        "How often embedlab's checks catch a deliberately injected routing fault (`embedlab frontend --fault`),",
        "and how often they flag a clean deployment. Every run is a real scenario over real processes on",
        "loopback: an embedded frontend and two hash workers, the counters read from each worker's `/metrics`.",
        "",
        f"Regenerate: `.venv/bin/python bench/verification_power.py --runs {args.runs} --clean-runs {args.clean_runs}`",
        f"(machine: {platform.machine()}, {platform.python_version()}, {args.cpus} CPUs; run {time.strftime('%Y-%m-%d %H:%M')}).",
        "",
        "## Detection",
        "",
        "| fault | scenario (burst) | runs | detected | target | what the check saw |",
        "|---|---|---|---|---|---|",
    ]
    for c in cases:
        target = f"≥ {c.target:.0%}" if c.target is not None else "reported"
        met = "" if c.target is None else (" ✅" if c.rate >= c.target else " ❌")
        seen = (
            "; ".join(f"{k} ({v})" for k, v in sorted(c.reasons.items(), key=lambda kv: -kv[1])[:2])
            or "nothing"
        )
        if c.latency_ratio:
            seen += f"; slow worker's median latency {statistics.median(c.latency_ratio):.1f}× the other's"
        lines.append(
            f"| `{c.fault}` | {c.scenario} ({c.requests}) | {len(c.outcomes)} | {c.rate:.1%}{met} | {target} | {seen} |"
        )
    lines += [
        "",
        "## False alarms",
        "",
        "| scenario (burst) | clean runs | flagged |",
        "|---|---|---|",
    ]
    for c in clean:
        lines.append(
            f"| {c.scenario} ({c.requests}) | {len(c.outcomes)} | {sum(c.outcomes)} ({c.rate:.1%}) |"
        )
    rate = false_alarms / total_clean if total_clean else float("nan")
    lines += [
        f"| **all** | {total_clean} | {false_alarms} ({rate:.2%}) {'✅' if rate <= 0.01 else '❌'} (target ≤ 1%) |",
        "",
        "## With another client sending to the pool",
        "",
        "`hey` sends one model's requests (model-a's, or the one model's), 20 a second, to the same frontend",
        "throughout. Each run checks twice in turns: launched, where the embedded stack names the serving worker",
        "on every response (`x-embedlab-worker`) and that header proves placement, and attached, where the",
        "counters alone cannot tell that client's requests from the check's. *Failed* is an accusation against",
        "the router; *inconclusive* names the traffic embedlab did not send and judges nothing.",
        "",
        "| fault | scenario (burst) | runs | launched: passed / failed / inconclusive | attached (counters only): passed / failed / inconclusive |",
        "|---|---|---|---|---|",
    ]
    for b in background:
        cells = [
            " / ".join(str(b.verdicts[how].get(v, 0)) for v in ("passed", "failed", "inconclusive"))
            for how in ("launched", "attached")
        ]
        runs = sum(b.verdicts["launched"].values())
        lines.append(
            f"| {f'`{b.fault}`' if b.fault else 'none (clean)'} | {b.scenario} ({b.requests}) | {runs} | {cells[0]} | {cells[1]} |"
        )
    if background:
        clean_bg = [b for b in background if b.fault is None]
        fault_bg = [b for b in background if b.fault is not None]
        accused = sum(b.verdicts[h]["failed"] for b in clean_bg for h in ("launched", "attached"))
        total = sum(sum(b.verdicts[h].values()) for b in clean_bg for h in ("launched", "attached"))
        caught = sum(b.verdicts["launched"]["failed"] for b in fault_bg)
        faulty = sum(sum(b.verdicts["launched"].values()) for b in fault_bg)
        lines += [
            "",
            f"False alarms with the other client: {accused} of {total} clean checks failed (launched and attached"
            f" together). Detection with it: {caught} of {faulty} faulty runs failed when launched (placement by"
            " the header); attached, the counters alone end inconclusive and accuse nobody.",
            "",
        ]
    lines += BUSY_SECTION.rstrip("\n").split("\n") + [""]
    lines += WATCH_SECTION.rstrip("\n").split("\n") + [""]
    lines += [
        "## Burst size for the fairness test",
        "",
        f"The same-model check fails a burst whose split has a two-sided binomial p-value below {DEFAULT_FAIRNESS_ALPHA:g}",
        "against the configured weights. Against a `skew:0.9` fault on a 50/50 pool, its power depends on the burst size:",
        "",
        "| burst | power (exact) | false alarm (exact) | detected (measured) |",
        "|---|---|---|---|",
    ]
    for n, power, fa, measured in sweep:
        shown = "" if measured is None else f"{measured:.1%}"
        lines.append(f"| {n} | {power:.2%} | {fa:.3%} | {shown} |")
    need = smallest_burst()
    lines += [
        "",
        f"The smallest burst that reaches 99% is **{need}**; the same-model scenario's default burst is "
        f"{DEFAULT_SAME_MODEL_REQUESTS} (it was 20, which catches the skew only {skew_power(20)[0]:.0%} of the time).",
        "",
        "## Notes",
        "",
        f"- `leak:{1 / MULTI_BURST:g}` leaks exactly one request in every {MULTI_BURST} of a model (evenly spread), so each",
        "  burst of the multi-model scenario carries one leaked request: detection must be 100%.",
        "- `ghost` keeps dispatching to a drained instance (deregistered, still serving); the drain scenario",
        "  expects the drained worker's counter not to move.",
        "- `drop` answers 503 without dispatch: caught by the failed requests and by the total delta",
        "  falling short of the requests sent.",
        "- `slow` is not a dispatch fault: routing stays correct, so the dispatch check rightly passes. It shows",
        "  in the per-worker latency split (attributed by the `x-embedlab-worker` header) and the latency figure.",
    ]
    return "\n".join(lines) + "\n"


# -- issue 30: attached, counters only, another client sending: measured, then simulated ---------

BUSY_BEGIN = "<!-- busy-table: regenerated by bench/verification_power.py --busy -->"
BUSY_END = "<!-- /busy-table -->"
BUSY_JSON = REPO / "bench" / "results" / "verification_busy.json"
SHAPES = ("steady", "bursty", "ramp")
MULTIPLES = (0.5, 1.0, 4.0)


@dataclass(frozen=True)
class BusyPool:
    label: str  # models x replicas
    scenario: str
    models: tuple[str, ...]
    replicas: int
    faults: tuple[str, ...]

    def spec(self, fault: str | None) -> DeploymentSpec:
        args = ("--fault", fault) if fault else ()
        if len(self.models) == 1:
            return DeploymentSpec.same_model(self.models[0], workers=self.replicas, frontend_args=args)
        return DeploymentSpec.pool(list(self.models), replicas=self.replicas, frontend_args=args)

    def simulated(self, fault: str = "") -> Pool:
        if len(self.models) == 1:
            return Pool.same_model(self.replicas, fault=fault)
        return Pool.multi_model(len(self.models), self.replicas, fault=fault)

    @property
    def title(self) -> str:
        m, k = len(self.models), self.replicas
        return f"{m} model{'s' * (m > 1)} x {k} replica{'s' * (k > 1)} ({self.scenario})"


# Requests served twice (issue 42): one in ten and one in fifty, on every pool.
DOUBLE = ("double:0.1", "double:0.02")
BUSY_POOLS = (
    BusyPool("1x2", "same-model", ("embed-model",), 2, ("stick", "skew:0.9", *DOUBLE)),
    BusyPool("2x1", "multi-model", ("model-a", "model-b"), 1, ("leak:0.1", *DOUBLE)),
    BusyPool("2x2", "mixed", ("model-a", "model-b"), 2, ("leak:0.1", "stick", "skew:0.9", *DOUBLE)),
    BusyPool("1x16", "same-model", ("embed-model",), 16, ("stick", "skew:0.9", *DOUBLE)),
)
# No other client at all: `--busy` on a quiet pool, where a surplus has no noise to hide in.
QUIET = Background("steady", 0.0)


def _counted(dep: Deployment) -> float:
    from embedlab.evidence.metrics import scrape_all

    return sum(s.value for s in scrape_all(dep.system_urls))


@contextlib.contextmanager
def background(dep: Deployment, models: tuple[str, ...], rate: float) -> Iterator[None]:
    """`hey` sending every model's requests, `rate` a second in all (paced per connection), for as
    long as the block runs; in once its requests show on the counters."""
    per = rate / len(models)
    lanes = max(1, int(np.ceil(per / 20)))  # one paced connection keeps up with 20 a second under load
    procs = []
    for model in models:
        body = json.dumps({"model": model, "input": "another client's request"})
        argv = [HEY, "-z", "3600s", "-c", str(lanes), "-q", f"{per / lanes:g}", "-m", "POST"]
        argv += ["-T", "application/json", "-d", body, f"{dep.frontend_url}/v1/embeddings"]
        procs.append(
            subprocess.Popen(
                argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
            )
        )
    try:
        start, deadline = _counted(dep), time.monotonic() + 30
        while _counted(dep) - start < 2 * len(models):
            if time.monotonic() > deadline:
                raise SystemExit("the other client's requests never reached the counters")
            time.sleep(0.05)
        yield
    finally:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)


def schedule_stats(result: ScenarioResult) -> dict[str, Any] | None:
    """What one real busy check's schedule was on this machine: the simulation's inputs."""
    run = result.schedule
    if run is None or not run.windows:
        return None
    kept = [w for w in run.windows if w.kept]
    arms = len({w.arm for w in run.windows})
    blocks = len(kept) // arms
    span = run.windows[-1].end_s
    other = np.array([sum(w.deltas) - sum(w.sent.values()) for w in kept], dtype=float)
    mean = float(other.mean()) if len(other) else 0.0
    return {
        "window_s": run.window_s,
        "requests": int(round(run.rate_per_s * run.window_s)),
        "rate_per_s": run.rate_per_s,
        "blocks": blocks,
        "set_aside_blocks": run.set_aside // arms,
        "block_s": span / blocks if blocks else float("nan"),
        "overhead_s": result.wall_seconds - span,
        "other_per_s": mean / run.window_s,
        "fano": float(other.var(ddof=1) / mean) if mean > 0 and len(other) > 2 else 1.0,
    }


def real_check(target: Any, pool: BusyPool, budget_s: float | None, *, busy: bool = False) -> dict[str, Any]:
    params: dict[str, Any] = {"budget_s": budget_s} if budget_s is not None else {}
    if busy:
        params["busy"] = True
    result = ScenarioPlan(scenario=pool.scenario, params=params).run_on(target)
    return {
        "verdict": str(result.verdict),
        "seconds": result.wall_seconds,
        "proven_by": result.proven_by,
        "reasons": list(result.reasons[:2]),
        "power": result.power,
        "schedule": schedule_stats(result),
    }


def measure_busy_pool(pool: BusyPool, args: argparse.Namespace) -> dict[str, Any]:
    """Real runs on one pool: quiet checks, then busy ones with `hey` beside them, clean and faulty."""
    found: dict[str, Any] = {
        "pool": pool.label, "quiet": {}, "busy": {}, "quiet_busy": {}, "router": {},
        "background_per_s": args.real_rate,
    }  # fmt: skip
    real = dict.fromkeys((*pool.faults[: args.real_faults], "double:0.1"))
    for fault in (None, *real):
        name = fault or "clean"
        started = time.monotonic()
        with Deployment(pool.spec(fault)) as dep:
            # As a user attaches: counters only (no header, not the router's own counts) ...
            target = replace(dep.target(), endpoints=(), stack="attached", router_metrics=None)
            found["quiet"][name] = [real_check(target, pool, None) for _ in range(args.quiet_runs)]
            if fault is None or fault in DOUBLE:  # --busy on the quiet pool: no noise to hide a surplus
                found["quiet_busy"][name] = [real_check(target, pool, args.budget_s, busy=True)]
            runs = args.real_runs if fault is None else args.real_fault_runs
            with background(dep, pool.models, args.real_rate):
                found["busy"][name] = [real_check(target, pool, args.budget_s) for _ in range(runs)]
                # ... and given the router's own per-model counts too (--router-metrics).
                counted = replace(target, router_metrics=dep.target().router_metrics)
                found["router"][name] = [real_check(counted, pool, args.budget_s) for _ in range(runs)]
        shown = {
            k: [(r["verdict"], round(r["seconds"], 1)) for r in found[k].get(name, [])]
            for k in ("busy", "router", "quiet_busy")
        }
        print(f"{pool.label} {name}: quiet {[r['verdict'] for r in found['quiet'][name]]}, {shown}"
              f" ({time.monotonic() - started:.0f} s)", flush=True)  # fmt: skip
    return found


def calibration(measured: dict[str, Any]) -> dict[str, Any]:
    """The simulation's inputs for a pool, pooled over its real busy checks (clean and faulty)."""
    stats_ = [r["schedule"] for runs in measured["busy"].values() for r in runs if r["schedule"]]
    if not stats_:
        return {}
    # The sender is fitted per check: the schedule most checks were fitted to stands for all.
    (window_s, requests), _ = Counter((s["window_s"], s["requests"]) for s in stats_).most_common(1)[0]
    return {
        "window_s": window_s,
        "requests": requests,
        "rate_per_s": requests / window_s,
        "block_s": float(np.median([s["block_s"] for s in stats_])),
        "overhead_s": float(np.median([s["overhead_s"] for s in stats_])),
        "fano": float(np.median([s["fano"] for s in stats_])),
        "other_per_s": float(np.median([s["other_per_s"] for s in stats_])),
        "set_aside": sum(s["set_aside_blocks"] for s in stats_) / max(1, sum(s["blocks"] + s["set_aside_blocks"] for s in stats_)),
        "runs": len(stats_),
    }  # fmt: skip


def nominal(pool: BusyPool) -> dict[str, Any]:
    """The schedule as designed, unmeasured (--nominal: a dry run of the simulation and the table)."""
    from embedlab.evidence.busy import busy_rate

    arms = 2 if len(pool.models) == 1 else len(pool.models)
    rate = busy_rate(pool.replicas)
    return {
        "window_s": 0.25, "requests": int(round(rate * 0.25)), "rate_per_s": rate, "block_s": arms * 0.25,
        "overhead_s": 2.0, "fano": 1.0, "other_per_s": float("nan"), "set_aside": 0.0, "runs": 0,
    }  # fmt: skip


def _cell(sim: Any, verdict: Verdict) -> dict[str, Any]:
    return {
        "runs": sim.runs,
        "count": sim.count(verdict),
        "passed": sim.count(Verdict.PASSED),
        "failed": sim.count(Verdict.FAILED),
        "median_s": sim.seconds_to(None, 0.5),
        "p95_s": sim.seconds_to(None, 0.95),
    }


def simulate_busy_pool(pool: BusyPool, cal: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    backgrounds = [Background(shape, m) for shape in SHAPES for m in MULTIPLES]
    options = {
        "rate_per_s": cal["rate_per_s"], "window_s": cal["window_s"], "requests": cal["requests"],
        "block_s": cal["block_s"], "overhead_s": cal["overhead_s"], "fano": cal["fano"],
        "leak_rule": "debt", "budget_s": args.budget_s,
    }  # fmt: skip
    cells: dict[str, Any] = {}
    # Counters only at every background, then no other client (--busy on a quiet pool), then at
    # every background with the router's own counts read beside the workers'.
    for router, shown in ((False, backgrounds), (False, [QUIET]), (True, backgrounds)):
        clean = simulate(
            pool.simulated(), backgrounds=shown, runs=args.sim_clean_runs, seed=1, router=router, **options
        )
        for b, c in zip(shown, clean):
            cells[_cell_name(b, router)] = {"clean": _cell(c, Verdict.FAILED)}
        for n, fault in enumerate(pool.faults):
            sims = simulate(
                pool.simulated(fault),
                backgrounds=shown,
                runs=args.sim_fault_runs,
                seed=2 + n,
                router=router,
                **options,
            )
            for b, sim in zip(shown, sims):
                cells[_cell_name(b, router)][fault] = _cell(sim, Verdict.FAILED)
    return cells  # fmt: skip


def _cell_name(b: Background, router: bool) -> str:
    if b.multiple == 0:
        return "none (--busy on a quiet pool)"
    return f"{b.shape} {b.multiple:g}x" + (", router's counts" if router else "")


def quiet_exact(pool: BusyPool) -> dict[str, str]:
    """What a quiet check of this pool catches, exactly (evidence.busy.power, the verdicts' own
    sentences), at the scenario's default burst."""
    k, weights = pool.replicas, [1.0] * pool.replicas
    n = required_requests(weights).requests if k > 1 else 0
    out: dict[str, str] = {}
    if len(pool.models) > 1:
        n = max(leak_requests(), n)
        out["leak:0.1"] = f"100 % ({n} per model: {int(0.1 * n)} leaked in each, one fails it)"
    # On a quiet pool the counters must move by exactly the requests sent: one doubled request fails it.
    out["double:0.1"] = f"100 % ({n} requests: {n // 10} doubled, one fails it)"
    out["double:0.02"] = f"{1 - 0.98**n:.1%} (a router doubling each with 1/50 doubles one of {n})"
    if k > 1:
        q = quiet_power(n, weights)
        out["stick"] = "100 % (every replica must move)" if q.require_all else f"{q.idle:.1%}"
        out["skew:0.9"] = f"{q.skew:.2%}" if k == 2 else f"≥ {q.skew:.2%} (0.9 on one of {k})"
    return out


def _rate(count: int, runs: int) -> str:
    return f"{100 * count / runs:.1f} %" if runs else "–"


def _time(cell: dict[str, Any]) -> str:
    return f"{cell['median_s']:.0f} / {cell['p95_s']:.0f}"


def _verdicts(runs: list[dict[str, Any]]) -> str:
    found = Counter(r["verdict"] for r in runs)
    return ", ".join(f"{v} {found[v]}" for v in ("passed", "failed", "inconclusive") if found[v]) or "–"


def render_busy(results: dict[str, Any]) -> str:
    meta = results["meta"]
    lines = [
        BUSY_BEGIN,
        "## On a busy pool, attached with counters only: false alarms, detection, time to verdict",
        "",
        f"Regenerate: `.venv/bin/python bench/verification_power.py --busy --sim-clean-runs {meta['sim_clean_runs']} "
        f"--sim-fault-runs {meta['sim_fault_runs']}` (machine: {meta['machine']}; {meta['when']}; real runs "
        f"{meta['real_seconds']:.0f} s, simulation {meta['sim_seconds']:.0f} s)"
        + (
            f"; the simulated cells run again on {meta['resimulated']} with the engine of that day, on the "
            "same real runs (`--resimulate`)."
            if meta.get("resimulated")
            else "."
        ),
        "",
        "Attached as a user is (`--frontend-url`, `--system-url`s, counters only: no response names its worker), "
        "while another client sends every model's requests through the same embedded frontend. **Measured**: "
        "real runs on hash workers and the embedded frontend (`--fault` for the faulty routers), `hey` as the "
        f"other client at {meta['real_rate']:g} requests a second in all; each real busy check measured what "
        "its schedule was on this machine (first table). **Simulated**: the cells, "
        f"{meta['sim_clean_runs']} clean and {meta['sim_fault_runs']} faulty checks each "
        "(`embedlab.evidence.busy.simulate` fed those measurements: the other client's arrivals at each "
        "shape and rate, with the variance per window measured; the router's weighted-random placement and "
        "the frontend's own faults, `leak:0.1` as its exact one-in-ten rule over both clients' requests; "
        "decided by the same `BlockEngine` a real check runs, stopped at its first decision or its budget). "
        "The other client's rate is a multiple of the check's own rate while a window sends (the table "
        "below); steady is Poisson-like at the measured variance, bursty 1 s at 3x then 2 s silent, a ramp "
        f"from 0 to twice its mean over the budget ({meta['budget_s']:g} s). Times: seconds from the start "
        "of the check to its verdict (the quiet bursts and the sender's fitting included; inconclusive at "
        "the budget), median / p95 over every check of the cell.",
        "",
        "### What the real runs measured: the simulation's inputs",
        "",
        "| pool | window | requests per window | check's rate while on | a kept block costs (blocks set aside) | before the schedule | other client: measured rate, variance / mean per window | real busy checks |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for pool in BUSY_POOLS:
        cal = results["calibration"].get(pool.label) or {}
        if not cal:
            lines.append(f"| {pool.title} | not measured | | | | | | 0 |")
            continue
        lines.append(
            f"| {pool.title} | {cal['window_s']:g} s | {cal['requests']} | {cal['rate_per_s']:g} req/s | "
            f"{cal['block_s']:.2f} s ({cal['set_aside']:.0%}) | {cal['overhead_s']:.1f} s | "
            f"{cal['other_per_s']:.0f} req/s, {cal['fano']:.2f} | {cal['runs']} |"
        )
    for pool in BUSY_POOLS:
        cells = results["simulated"].get(pool.label)
        if not cells:
            continue
        head = ["other client (x the check's rate)", "false alarms", "passed", "time"]
        for fault in pool.faults:
            head += [f"`{fault}` caught", "time"]
        lines += ["", f"### {pool.title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for name, cell in cells.items():
            c = cell["clean"]
            row = [name, f"{c['count']} of {c['runs']}", _rate(c["passed"], c["runs"]), _time(c)]
            for fault in pool.faults:
                f = cell[fault]
                passed = f" ({f['passed']} passed)" if f["passed"] else ""
                row += [_rate(f["count"], f["runs"]) + passed, _time(f)]
            lines.append("| " + " | ".join(row) + " |")
        quiet = results["measured"].get(pool.label, {}).get("quiet", {})
        exact = quiet_exact(pool)
        clean = quiet.get("clean", [])
        times = [r["seconds"] for runs in quiet.values() for r in runs]
        shown = f"{statistics.median(times):.1f} s" if times else "–"
        row = ["**quiet pool** (exact; real runs)", f"≤ 0.1 % ({_verdicts(clean)})", "", shown]
        for fault in pool.faults:
            real = quiet.get(fault, [])
            row += [f"{exact.get(fault, '–')}" + (f" ({_verdicts(real)})" if real else ""), ""]
        lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        "### Real busy checks beside the simulation",
        "",
        f"`hey` at {meta['real_rate']:g} requests a second, steady; the multiple is that rate over the "
        "check's own rate while on, as measured. The simulated column is the cell nearest to it.",
        "",
        "| pool | router | runs | other client | verdicts | time to verdict, each (s) | simulated: nearest cell, its rate, median time |",
        "|---|---|---|---|---|---|---|",
    ]
    for pool in BUSY_POOLS:
        measured = results["measured"].get(pool.label)
        cal = results["calibration"].get(pool.label) or {}
        if not measured or not cal:
            continue
        multiple = meta["real_rate"] / cal["rate_per_s"]
        nearest = min(MULTIPLES, key=lambda m: abs(np.log(m / multiple)))
        sets = (
            ("busy", f"steady {nearest:g}x", f"steady {multiple:.2f}x"),
            ("router", f"steady {nearest:g}x, router's counts", f"steady {multiple:.2f}x, router's counts"),
            ("quiet_busy", "none (--busy on a quiet pool)", "none, `--busy`"),
        )
        for kind, near, other in sets:
            for name, runs in measured.get(kind, {}).items():
                cell = results["simulated"][pool.label][near]["clean" if name == "clean" else name]
                rate = cell["passed"] if name == "clean" else cell["count"]
                said = "passed" if name == "clean" else "failed"
                each = ", ".join(f"{r['seconds']:.0f}" for r in runs)
                lines.append(
                    f"| {pool.title} | {'correct' if name == 'clean' else f'`{name}`'} | {len(runs)} | "
                    f"{other} | {_verdicts(runs)} | {each} | "
                    f"{near}: {_rate(rate, cell['runs'])} {said}, {cell['median_s']:.0f} s |"
                )
    lines += sender_lines()
    lines += ["", BUSY_END]
    return "\n".join(lines) + "\n"


def sender_lines() -> list[str]:
    """The check's own sender against `hey` (bench/time_to_verdict.py --sender), where measured."""
    path = REPO / "bench" / "results" / "time_to_verdict_sender.json"
    if not path.is_file():
        return []
    found = json.loads(path.read_text())
    lines = [
        "",
        "### The check's own sender against `hey`",
        "",
        f"`.venv/bin/python bench/time_to_verdict.py --sender` ({found['turns']} turns each, medians; one "
        f"embedded frontend, {found['workers']} hash workers, {found['requests']} requests at concurrency "
        f"{found['concurrency']}, load {found['load_1m']} at the end): the sender bounds every time to verdict.",
        "",
        "| sender | req/s | p50 | CPU per request (the sender's process) |",
        "|---|---|---|---|",
    ]
    for name, m in found["medians"].items():
        cpu = f"{m['cpu_ms_per_request']:.2f} ms" if "cpu_ms_per_request" in m else "–"
        lines.append(f"| {name} | {m['rps']:.0f} | {m['p50_ms']:.1f} ms | {cpu} |")
    lines += ["", f"On hey's own body the sender reaches {found['sender_share_of_hey']:.0%} of hey's rate."]
    if "lanes_over_shared_pool" in found:
        lines[-1] += (
            f" Its lanes (`clients.LaneTransport`: a pool of one connection per request in flight) send "
            f"{found['lanes_over_shared_pool']:.2f}x the rate of the one shared httpx pool every burst used "
            "before, in the same run."
        )
    return lines


def write_busy_section(text: str, path: Path) -> None:
    """Put the busy table into the doc, in place of its previous version (or before the burst-size section)."""
    doc = path.read_text()
    if BUSY_BEGIN in doc:
        before, rest = doc.split(BUSY_BEGIN, 1)
        after = rest.split(BUSY_END, 1)[1].lstrip("\n")
        doc = before + text + "\n" + after
    else:
        anchor = "## Burst size for the fairness test"
        doc = doc.replace(anchor, text + "\n" + anchor, 1) if anchor in doc else doc + "\n" + text
    write_text_atomic(path, doc)


def kept_busy_section(path: Path) -> str:
    """The busy table as the doc has it now ("": none): the full regeneration keeps it."""
    doc = path.read_text() if path.exists() else ""
    if BUSY_BEGIN not in doc:
        return ""
    return BUSY_BEGIN + doc.split(BUSY_BEGIN, 1)[1].split(BUSY_END, 1)[0] + BUSY_END + "\n"


def busy_main(args: argparse.Namespace) -> int:
    if args.from_json or args.resimulate:
        results = json.loads(BUSY_JSON.read_text())
        if args.resimulate:
            # The real runs and their calibration as measured; the simulated cells from today's engine.
            started = time.monotonic()
            for pool in BUSY_POOLS:
                cal = results["calibration"].get(pool.label)
                if cal and (not args.pools or pool.label in args.pools.split(",")):
                    results["simulated"][pool.label] = simulate_busy_pool(pool, cal, args)
            results["meta"]["resimulated"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
            results["meta"]["sim_seconds"] = time.monotonic() - started
            write_text_atomic(BUSY_JSON, json.dumps(results, indent=2, default=float))
    else:
        results = {"measured": {}, "calibration": {}, "simulated": {}}
        pools = [p for p in BUSY_POOLS if not args.pools or p.label in args.pools.split(",")]
        started = time.monotonic()
        if args.real_runs or args.quiet_runs:
            for pool in pools:
                results["measured"][pool.label] = measure_busy_pool(pool, args)
                results["calibration"][pool.label] = calibration(results["measured"][pool.label])
        real = time.monotonic() - started
        for pool in pools:
            if args.nominal and not results["calibration"].get(pool.label):
                results["calibration"][pool.label] = nominal(pool)
            cal = results["calibration"].get(pool.label)
            if cal:
                t0 = time.monotonic()
                results["simulated"][pool.label] = simulate_busy_pool(pool, cal, args)
                print(f"{pool.label}: simulated in {time.monotonic() - t0:.0f} s", flush=True)
        results["meta"] = {
            "machine": f"{platform.machine()}, Python {platform.python_version()}, {os.cpu_count()} CPUs",
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "real_rate": args.real_rate,
            "budget_s": args.budget_s,
            "sim_clean_runs": args.sim_clean_runs,
            "sim_fault_runs": args.sim_fault_runs,
            "real_seconds": real,
            "sim_seconds": time.monotonic() - started - real,
        }
        BUSY_JSON.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(BUSY_JSON, json.dumps(results, indent=2, default=float))
    text = render_busy(results)
    write_busy_section(text, args.out)
    print(text)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50, help="runs per fault (at least 50 for the report)")
    parser.add_argument("--clean-runs", type=int, default=100, help="runs per scenario on clean deployments")
    parser.add_argument(
        "--background-runs", type=int, default=20, help="runs per case with another client sending (0: none)"
    )
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "verification.md")
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "verification_power.json")
    parser.add_argument(
        "--frontend-processes",
        type=int,
        default=1,
        help="routing processes of each deployment's frontend (embedlab frontend --processes)",
    )
    busy = parser.add_argument_group("the busy-pool table (issue 30): --busy runs it alone")
    busy.add_argument("--busy", action="store_true", help="measure and simulate the busy-pool table only")
    busy.add_argument(
        "--from-json", action="store_true", help="re-render it from bench/results/verification_busy.json"
    )
    busy.add_argument(
        "--resimulate",
        action="store_true",
        help="keep the JSON's real runs and calibration, simulate its cells again with today's engine",
    )
    busy.add_argument("--pools", default="", help="comma-separated pool labels (1x2,2x1,2x2,1x16); none: all")
    busy.add_argument(
        "--real-rate", type=float, default=40.0, help="the other client's rate in the real runs, in all"
    )
    busy.add_argument("--real-runs", type=int, default=2, help="real busy checks per pool, correct router")
    busy.add_argument(
        "--real-faults", type=int, default=1, help="faults per pool also run for real (in order)"
    )
    busy.add_argument(
        "--real-fault-runs", type=int, default=1, help="real busy checks per fault run for real"
    )
    busy.add_argument("--quiet-runs", type=int, default=2, help="real quiet checks per deployment")
    busy.add_argument(
        "--nominal", action="store_true", help="simulate unmeasured pools at the designed schedule"
    )
    busy.add_argument("--budget-s", type=float, default=60.0, help="the busy checks' budget")
    busy.add_argument(
        "--sim-clean-runs", type=int, default=200, help="simulated clean checks per cell (>= 100)"
    )
    busy.add_argument(
        "--sim-fault-runs", type=int, default=100, help="simulated faulty checks per cell (>= 50)"
    )
    args = parser.parse_args()
    if args.busy or args.from_json or args.resimulate:
        return busy_main(args)
    FRONTEND["processes"] = args.frontend_processes

    args.cpus = os.cpu_count()
    same = DEFAULT_SAME_MODEL_REQUESTS
    cases = [
        Case(
            "leak",
            f"leak:{1 / MULTI_BURST:g}",
            "multi-model",
            MULTI_BURST,
            "one leaked request per burst",
            1.0,
        ),
        Case("stick", "stick", "same-model", same, "always the first instance", 1.0),
        Case("ghost", "ghost", "drain", 20, "dispatch to a drained instance", 1.0),
        Case("skew", "skew:0.9", "same-model", same, "90% to one instance", 0.99),
        Case("drop", "drop:0.05", "same-model", same, "5% answered 503", None),
        Case("slow", "slow:50", "same-model", same, "one instance 50 ms late", None),
    ]
    clean = [
        Case("clean", None, "same-model", same, "no fault"),
        Case("clean", None, "multi-model", MULTI_BURST, "no fault"),
        Case("clean", None, "drain", 20, "no fault"),
    ]
    for case in cases:
        measure(case, args.runs)
        print(
            f"{case.fault:>10} via {case.scenario:<11} ({case.requests:>3}): detected {case.rate:6.1%} of {len(case.outcomes)} in {case.seconds:.0f} s",
            flush=True,
        )
    for case in clean:
        measure(case, args.clean_runs)
        print(
            f"{'clean':>10} via {case.scenario:<11} ({case.requests:>3}): flagged  {case.rate:6.1%} of {len(case.outcomes)} in {case.seconds:.0f} s",
            flush=True,
        )
    background = [
        BackgroundCase("clean", None, "same-model", same),
        BackgroundCase("clean", None, "multi-model", MULTI_BURST),
        BackgroundCase("leak", f"leak:{1 / MULTI_BURST:g}", "multi-model", MULTI_BURST),
        BackgroundCase("stick", "stick", "same-model", same),
        BackgroundCase("skew", "skew:0.9", "same-model", same),
    ]
    if args.background_runs:
        for b in background:
            measure_with_another_client(b, args.background_runs)
            print(f"{b.label:>10} via {b.scenario:<11} with another client: {dict(b.verdicts)}", flush=True)
    else:
        background = []
    # The burst-size sweep for skew: exact power, and a measurement at the old default.
    old = Case("skew@20", "skew:0.9", "same-model", 20, "90% to one instance")
    measure(old, args.runs)
    sweep = []
    for n in (20, 30, 36, 40, 50):
        power, fa = skew_power(n)
        measured = old.rate if n == 20 else (cases[3].rate if n == same else None)
        sweep.append((n, power, fa, measured))
    text = render(cases, clean, sweep, args, background)
    kept = kept_busy_section(args.out)
    if kept:
        text = text.replace(
            "## Burst size for the fairness test", kept + "\n## Burst size for the fairness test", 1
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out, text)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(
        args.json,
        json.dumps(
            {
                "faults": [
                    {
                        "fault": c.fault,
                        "scenario": c.scenario,
                        "burst": c.requests,
                        "runs": len(c.outcomes),
                        "detected": sum(c.outcomes),
                        "rate": c.rate,
                        "target": c.target,
                    }
                    for c in cases
                ],
                "clean": [
                    {
                        "scenario": c.scenario,
                        "burst": c.requests,
                        "runs": len(c.outcomes),
                        "flagged": sum(c.outcomes),
                    }
                    for c in clean
                ],
                "skew_sweep": [
                    {"burst": n, "power": p, "false_alarm": f, "measured": m} for n, p, f, m in sweep
                ],
                "smallest_burst_for_99pct": smallest_burst(),
                "with_another_client": [
                    {
                        "fault": b.fault,
                        "scenario": b.scenario,
                        "burst": b.requests,
                        "launched": dict(b.verdicts["launched"]),
                        "attached": dict(b.verdicts["attached"]),
                        "bursts_proven_by_header": b.proven_by_header,
                    }
                    for b in background
                ],
                "frontend_processes": args.frontend_processes,
            },
            indent=2,
        ),
    )
    print(text)
    failed = [c.label for c in cases if c.target is not None and c.rate < c.target]
    failed += [
        f"{b.label} with another client"
        for b in background
        if b.fault is None and b.verdicts["launched"]["failed"] + b.verdicts["attached"]["failed"]
    ]
    false_rate = sum(sum(c.outcomes) for c in clean) / max(1, sum(len(c.outcomes) for c in clean))
    if failed or false_rate > 0.01:
        print(f"targets missed: {failed} false-alarm rate {false_rate:.2%}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
