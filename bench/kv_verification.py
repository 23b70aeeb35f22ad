"""KV-aware routing: how often prefix-affinity and kv-participation catch each KV fault, and how fast.

    .venv/bin/python bench/kv_verification.py [--trials 30] [--workers 3] [--more-groups 8]
        [--more-groups-for deaf] [--sizes 2,4,8] [--repeat 5] [--speedups 100,1] [--only power|time]
        [--json PATH]
    .venv/bin/python bench/kv_verification.py --quick    # smoke run: 3 trials, 1 repeat, 2 and 4 workers

Part 1 (power): the embedded frontend with its `kv` policy (router_mode="kv") over `--workers`
hash workers of one model, once correct and once per fault (`--fault blind`: the cached prefix
is ignored; `deaf`: the KV events of the model's first instance are lost; `stick`: every
request on one worker). The four deployments are started once and kept up together; each trial
is a fresh scenario call (a fresh nonce, so fresh prompts) on every one of them, in an order
rotated per trial, so a slow minute on a shared machine lands on every policy alike. Per trial
and policy: `prefix_affinity` at its defaults (4 groups of 6), `kv_participation` at its
defaults (enough new prefixes that a random router leaves a worker out with probability
<= 0.1 %), and, for `deaf` (`--more-groups-for`), `prefix_affinity` with `--more-groups` groups
(the knob that decides how often a deaf worker is reached at all). Per (check, policy): the verdict
counts, the share FAILED (detection, for the fault that check is meant to catch) or not PASSED
(false alarm, for the correct policy), with a 95 % Clopper-Pearson interval, beside the rate
a simple model of the router predicts (`expected`).

Which check is meant to catch which fault:

    blind  prefix-affinity     every request placed at random: groups split
    deaf   prefix-affinity     only where the deaf worker serves some group's first request (the
                               router's KV view then names it, and the group usually splits):
                               1 - (1 - 1/N)^groups of the trials
    deaf   kv-participation    every worker caches new prefixes, so the router's KV view names the
                               deaf one unless it took no part (at most the union bound, 0.1 %)
    stick  kv-participation    the other workers take no part; stick keeps every group on one
                               worker, so it passes prefix-affinity, as it should: no false alarm

Part 2 (time): the wall time to each verdict (`ScenarioResult.wall_seconds`: prompts, quiet
windows, bursts, KV view and judgement, on a deployment already up; its start-up is shown
beside it), median of `--repeat` trials, for both scenarios on 2, 4 and 8 workers: the embedded
frontend (`kv`, hash workers) and Dynamo's frontend (`--router-mode kv`) over Dynamo's mocker,
every worker of the model on one endpoint (endpoints="model"), at each `--speedups` ratio. The
ratio is `dynamo.mocker --speedup-ratio`: the mocker's simulated prefill and decode step times
are divided by it (embedlab's default, `DynamoMocker.speedup`, is 100). It is passed in the
worker's `extra_args`, which follow the class default on the mocker's command line, and the
last occurrence wins (argparse). Dynamo parts are skipped, with a line saying so, where
ai-dynamo is not installed.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scipy import stats

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from measure import machine_info  # noqa: E402

from embedlab import Deployment, DeploymentSpec, ScenarioResult  # noqa: E402
from embedlab.cluster.spec import WorkerSpec  # noqa: E402
from embedlab.errors import EmbedlabError  # noqa: E402
from embedlab.scenarios.builtin.kv import (  # noqa: E402
    AffinityParams,
    kv_participation,
    participation_requests,
    prefix_affinity,
)
from embedlab.stacks.dynamo import dynamo_installed  # noqa: E402
from embedlab.verdicts import Verdict  # noqa: E402

MODEL = "m"
AFFINITY = "prefix-affinity"
PARTICIPATION = "kv-participation"
# policy label -> the embedded frontend's --fault (None: the correct kv policy)
POLICIES: dict[str, str | None] = {"kv": None, "blind": "blind", "deaf": "deaf", "stick": "stick"}
# (check, policy) -> the fault that check is meant to catch
MEANT = {(AFFINITY, "blind"), (AFFINITY, "deaf"), (PARTICIPATION, "deaf"), (PARTICIPATION, "stick")}
DEFAULT_GROUPS = AffinityParams().groups
PER_GROUP = AffinityParams().per_group
VERDICT_COLUMNS = (Verdict.PASSED, Verdict.FAILED, Verdict.INCONCLUSIVE)


def miss_probability(workers: int, requests: int) -> float:
    """Exact chance that `requests` uniform placements over `workers` leave some worker out."""
    return sum(
        (-1) ** (k + 1) * math.comb(workers, k) * (1 - k / workers) ** requests for k in range(1, workers)
    )


def expected_failed(check: str, policy: str, workers: int, groups: int) -> float:
    """The share of trials a simple model of the router predicts FAILED (ties broken at random,
    sequential requests, so no load is ever in flight and only the cached prefix decides)."""
    n = participation_requests(workers)
    if check == PARTICIPATION:
        # Stick leaves workers out for sure; deaf is named unless its worker took no part; every
        # other policy places new prefixes at random.
        if policy == "deaf":
            return 1.0 - miss_probability(workers, n) / workers
        return 1.0 if policy == "stick" else miss_probability(workers, n)
    if policy == "blind":  # every request at random: all groups stay whole with (1/N)^((k-1)g)
        return 1.0 - (1.0 / workers) ** ((PER_GROUP - 1) * groups)
    if policy == "deaf":  # caught where the deaf worker serves some group's first request
        return 1.0 - (1.0 - 1.0 / workers) ** groups
    return 0.0  # kv, stick: each group stays on the worker of its first request


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    if n == 0:
        return (float("nan"), float("nan"))
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=level, method="exact")
    return (float(ci.low), float(ci.high))


def reason_kind(reason: str) -> str:
    """A failing reason, as one of a few kinds (numbers and worker names taken out)."""
    if re.search(r"group \d+ split", reason):
        return "a group split"
    if "never applied" in reason:
        return "KV events the router never applied"
    if "no traffic reached" in reason:
        return "a worker left out"
    if "not in the KV router's worker list" in reason:
        return "a worker unknown to the KV router"
    return re.sub(r"\d+(\.\d+)?", "N", reason)[:80]


@dataclass
class Cell:
    check: str
    policy: str
    groups: int | None  # prefix-affinity's groups; None for participation
    requests: int = 0  # kv-participation's prompts
    verdicts: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)  # per failed trial, each kind once
    seconds: list[float] = field(default_factory=list)

    @property
    def label(self) -> str:
        if self.check == AFFINITY:
            return f"{AFFINITY} ({self.groups} groups of {PER_GROUP})"
        return f"{PARTICIPATION} ({self.requests} prompts)"

    @property
    def trials(self) -> int:
        return sum(self.verdicts.values())

    @property
    def role(self) -> str:
        if self.policy == "kv":
            return "false alarm"
        return "detection" if (self.check, self.policy) in MEANT else "not its fault"

    def rate(self) -> tuple[int, float, float, float]:
        """(count, share, CI low, CI high): not PASSED for the correct policy, FAILED otherwise."""
        if self.policy == "kv":
            k = self.trials - self.verdicts[Verdict.PASSED]
        else:
            k = self.verdicts[Verdict.FAILED]
        low, high = clopper_pearson(k, self.trials)
        return k, (k / self.trials if self.trials else float("nan")), low, high

    def record(self, verdict: str, reasons: list[str], seconds: float) -> None:
        self.verdicts[verdict] += 1
        self.seconds.append(seconds)
        if verdict != Verdict.PASSED:
            for kind in sorted({reason_kind(r) for r in reasons}):
                self.reasons[kind] += 1


def run_check(dep: Deployment, check: str, groups: int | None) -> ScenarioResult:
    if check == AFFINITY:
        return prefix_affinity(dep, groups=groups or DEFAULT_GROUPS)
    return kv_participation(dep)


def timed_check(dep: Deployment, check: str, groups: int | None) -> tuple[str, list[str], float]:
    """(verdict, reasons, wall s); a check that raises counts as `error`, its exception its reason."""
    started = time.monotonic()
    try:
        result = run_check(dep, check, groups)
    except Exception as exc:  # noqa: BLE001 - a broken trial is counted and shown, not fatal
        return str(Verdict.ERROR), [f"{type(exc).__name__}: {exc}"], time.monotonic() - started
    return str(result.verdict), list(result.reasons), result.wall_seconds


def power(args: argparse.Namespace, tmp: Path) -> list[Cell]:
    cells: dict[tuple[str, str, int | None], Cell] = {}
    plan: dict[str, list[tuple[str, int | None]]] = {}
    for policy in POLICIES:
        checks: list[tuple[str, int | None]] = [(AFFINITY, DEFAULT_GROUPS), (PARTICIPATION, None)]
        if args.more_groups and args.more_groups != DEFAULT_GROUPS and policy in args.more_groups_for:
            checks.append((AFFINITY, args.more_groups))
        plan[policy] = checks
        for check, groups in checks:
            cell = Cell(check, policy, groups, requests=participation_requests(args.workers))
            cells[check, policy, groups] = cell
    started = time.monotonic()
    with ExitStack() as stack:
        deps: dict[str, Deployment] = {}
        for policy, fault in POLICIES.items():
            spec = DeploymentSpec.same_model(
                MODEL,
                workers=args.workers,
                router_mode="kv",
                frontend_args=("--fault", fault) if fault else (),
            )
            run_dir = tmp / f"power-{policy}"
            run_dir.mkdir()
            deps[policy] = stack.enter_context(Deployment(spec, run_dir=run_dir))
        print(
            f"power: {len(deps)} embedded deployments of {args.workers} hash workers up in "
            f"{time.monotonic() - started:.1f} s",
            flush=True,
        )
        names = list(deps)
        for t in range(args.trials):
            order = names[t % len(names) :] + names[: t % len(names)]
            line = []
            for policy in order:
                for check, groups in plan[policy]:
                    verdict, reasons, seconds = timed_check(deps[policy], check, groups)
                    cells[check, policy, groups].record(verdict, reasons, seconds)
                    if verdict == Verdict.ERROR:
                        print(f"  trial {t + 1} {policy} {check}: error: {reasons[0]}", flush=True)
                    tag = (
                        "A"
                        if check == AFFINITY and groups == DEFAULT_GROUPS
                        else "a"
                        if check == AFFINITY
                        else "P"
                    )
                    line.append(f"{policy}:{tag}={verdict[0].upper()}")
            print(
                f"  trial {t + 1}/{args.trials} ({time.monotonic() - started:.0f} s): {' '.join(line)}",
                flush=True,
            )
    return list(cells.values())


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{100 * x:.1f} %"


def power_table(cells: list[Cell], workers: int) -> str:
    head = (
        "| check | policy | role | trials | passed / failed / inconclusive / other | rate | 95 % CI "
        "(Clopper-Pearson) | expected | what the check saw (failed or not passed trials) | median s |"
    )
    rows = [head, "|" + "---|" * 10]
    for c in sorted(cells, key=lambda c: (c.check, list(POLICIES).index(c.policy), c.groups or 0)):
        k, share, low, high = c.rate()
        other = c.trials - sum(c.verdicts[v] for v in VERDICT_COLUMNS)
        counts = " / ".join(str(c.verdicts[v]) for v in VERDICT_COLUMNS) + f" / {other}"
        expect = expected_failed(c.check, c.policy, workers, c.groups or DEFAULT_GROUPS)
        saw = "; ".join(f"{kind} ({n})" for kind, n in c.reasons.most_common()) or "nothing"
        rate = f"{_pct(share)} ({k} of {c.trials})"
        rows.append(
            f"| {c.label} | `{c.policy}` | {c.role} | {c.trials} | {counts} | {rate} | "
            f"{_pct(low)} - {_pct(high)} | {_pct(expect)} | {saw} | {statistics.median(c.seconds):.2f} |"
        )
    return "\n".join(rows)


@dataclass(frozen=True)
class Pool:
    label: str  # embedded | mocker
    speedup: float | None = None

    def spec(self, workers: int) -> DeploymentSpec:
        if self.label == "embedded":
            return DeploymentSpec.same_model(MODEL, workers=workers, router_mode="kv")
        extra = ("--speedup-ratio", f"{self.speedup:g}")
        return DeploymentSpec(
            stack="dynamo",
            router_mode="kv",
            endpoints="model",
            workers=tuple(WorkerSpec(model=MODEL, server="mocker", extra_args=extra) for _ in range(workers)),
        )

    @property
    def display(self) -> str:
        if self.label == "embedded":
            return "embedded `kv`, hash workers"
        return f"Dynamo `kv`, mocker x{self.speedup:g}"


def time_to_verdict(args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    pools = [Pool("embedded")]
    if dynamo_installed():
        pools += [Pool("mocker", s) for s in args.speedups]
    else:
        print(
            "time: ai-dynamo is not installed: the Dynamo mocker rows are skipped (`make dynamo`)", flush=True
        )
    rows: list[dict[str, Any]] = []
    for n in args.sizes:
        for pool in pools:
            run_dir = tmp / f"time-{pool.label}-{pool.speedup or 0:g}-{n}"
            run_dir.mkdir()
            walls: dict[str, list[float]] = {AFFINITY: [], PARTICIPATION: []}
            verdicts: dict[str, Counter[str]] = {AFFINITY: Counter(), PARTICIPATION: Counter()}
            try:
                with Deployment(pool.spec(n), run_dir=run_dir) as dep:
                    launch = dep.startup_seconds.get("total", float("nan"))
                    for r in range(args.repeat):
                        checks = [AFFINITY, PARTICIPATION]
                        for check in checks if r % 2 == 0 else checks[::-1]:
                            verdict, reasons, seconds = timed_check(dep, check, None)
                            walls[check].append(seconds)
                            verdicts[check][verdict] += 1
                            if verdict != Verdict.PASSED:
                                print(f"  {pool.display}, {n} workers, {check}: {verdict}: {reasons[:2]}")
            except EmbedlabError as exc:
                print(f"time: {pool.display} on {n} workers skipped: {exc}", flush=True)
                continue
            for check in (AFFINITY, PARTICIPATION):
                requests = DEFAULT_GROUPS * PER_GROUP if check == AFFINITY else participation_requests(n)
                row = {
                    "pool": pool.display,
                    "stack": "embedded" if pool.label == "embedded" else "dynamo",
                    "speedup": pool.speedup,
                    "workers": n,
                    "check": check,
                    "requests": requests,
                    "median_s": statistics.median(walls[check]),
                    "min_s": min(walls[check]),
                    "max_s": max(walls[check]),
                    "verdicts": dict(verdicts[check]),
                    "launch_s": launch,
                }
                rows.append(row)
                print(
                    f"  {pool.display}, {n} workers, {check} ({requests} requests): median "
                    f"{row['median_s']:.2f} s over {len(walls[check])}, {dict(verdicts[check])}; "
                    f"started in {launch:.1f} s",
                    flush=True,
                )
    return rows


def time_table(rows: list[dict[str, Any]]) -> str:
    out = [
        "| pool | workers | check | requests | verdict s (median) | min - max s | verdicts | start-up s |",
        "|---|---:|---|---:|---:|---|---|---:|",
    ]
    for r in rows:
        verdicts = ", ".join(f"{v} {n}" for v, n in sorted(r["verdicts"].items()))
        out.append(
            f"| {r['pool']} | {r['workers']} | {r['check']} | {r['requests']} | {r['median_s']:.2f} | "
            f"{r['min_s']:.2f} - {r['max_s']:.2f} | {verdicts} | {r['launch_s']:.1f} |"
        )
    return "\n".join(out)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=30, help="trials per (check, policy) in part 1")
    parser.add_argument("--workers", type=int, default=3, help="hash workers per deployment in part 1")
    parser.add_argument(
        "--more-groups",
        type=int,
        default=8,
        help="prefix-affinity also at this many groups, for --more-groups-for (0: not)",
    )
    parser.add_argument(
        "--more-groups-for",
        type=lambda s: [p for p in s.split(",") if p.strip()],
        default=["deaf"],
        help="the policies that run prefix-affinity at --more-groups too (comma-separated)",
    )
    parser.add_argument("--sizes", type=_ints, default=[2, 4, 8], help="pool sizes of part 2")
    parser.add_argument("--repeat", type=int, default=5, help="trials per scenario and pool in part 2")
    parser.add_argument(
        "--speedups",
        type=lambda s: [float(x) for x in s.split(",") if x.strip()],
        default=[100.0, 1.0],
        help="the mocker's --speedup-ratio values in part 2",
    )
    parser.add_argument("--only", choices=("power", "time"), help="run one part only")
    parser.add_argument("--quick", action="store_true", help="smoke run: 3 trials, 1 repeat, sizes 2,4")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    if args.quick:
        args.trials, args.repeat, args.sizes = 3, 1, [2, 4]
    if args.trials < 1 or args.repeat < 1 or args.workers < 2:
        parser.error("--trials and --repeat must be at least 1, --workers at least 2")

    info = machine_info()
    print(
        f"machine: {info['cores']} cores ({info['cpu']}), Python {info['python']}; {info['date']}",
        flush=True,
    )
    started = time.monotonic()
    report: dict[str, Any] = {"machine": info, "args": {k: v for k, v in vars(args).items() if k != "json"}}
    with tempfile.TemporaryDirectory(prefix="kv-verification-") as name:
        tmp = Path(name)
        if args.only in (None, "power"):
            t0 = time.monotonic()
            cells = power(args, tmp)
            report["power_s"] = time.monotonic() - t0
            table = power_table(cells, args.workers)
            report["power"] = [
                {
                    "check": c.check,
                    "policy": c.policy,
                    "groups": c.groups,
                    "role": c.role,
                    "verdicts": dict(c.verdicts),
                    "rate": c.rate()[1],
                    "ci95": list(c.rate()[2:]),
                    "expected": expected_failed(c.check, c.policy, args.workers, c.groups or DEFAULT_GROUPS),
                    "reasons": dict(c.reasons),
                }
                for c in cells
            ]
            report["power_table"] = table
            print(
                f"\nDetection and false alarms: embedded frontend, {args.workers} hash workers, "
                f"{args.trials} trials each ({report['power_s']:.0f} s)\n"
            )
            print(table)
            print(
                "\nrole: detection = share FAILED for the fault the check is meant to catch (blind, deaf: "
                "prefix-affinity; stick: kv-participation); false alarm = share not PASSED for the correct "
                "kv policy; not its fault = share FAILED where the check is not meant to catch the fault "
                "(stick passing prefix-affinity is expected). expected: the share FAILED a model of the "
                "router predicts (ties at random, no load in flight)."
            )
        if args.only in (None, "time"):
            t0 = time.monotonic()
            rows = time_to_verdict(args, tmp)
            report["time_s"] = time.monotonic() - t0
            report["time"] = rows
            report["time_table"] = time_table(rows)
            print(
                f"\nTime to verdict on a started deployment, median of {args.repeat} "
                f"({report['time_s']:.0f} s)\n"
            )
            print(report["time_table"])
    report["wall_s"] = time.monotonic() - started
    print(f"\nwall {report['wall_s']:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
        print(f"wrote {args.json}")
    return report


if __name__ == "__main__":
    main()
