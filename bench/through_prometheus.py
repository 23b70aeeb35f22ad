"""Time to verdict through Prometheus against scraping the workers directly.

On one 2 x 2 embedded pool (hash workers, model-a and model-b) with a correct router, and on one
whose frontend leaks (`--fault leak:0.1`), the same-model and multi-model checks are run as a user
runs them (`embedlab scenario ... --json`, a fresh process each) in three ways:

- direct: plain attach, the harness scraping the workers itself: multi-model with
  `--frontend-url URL --system-url x4 --worker-models A,A,B,B`; same-model (which takes one model)
  with the two model-a workers' `--system-url` and `--models model-a`;
- through Debian's Prometheus at each scrape interval of --intervals, the workers found by the
  Dynamo operator's labels (`--prometheus-url PROM --discover prometheus:SELECTOR`), Prometheus
  finding them through file_sd with those labels (as in tests/integration/test_through_prometheus.py).

Per pool, check and way: the verdict of every trial, the median CLI wall time (the process, from
start to exit: imports, discovery, bursts, judgement) and the median `wall_seconds` of the
scenario (its --json), with the ratio of each to direct.

    .venv/bin/python bench/through_prometheus.py [--intervals 1,5] [--trials 3] [--out results.json]

`--false-alarms N` instead runs N clean same-model checks (correct router, 40 requests of model-a)
through Prometheus at 1 s, on ONE pool and ONE Prometheus kept up across them all, each check
in-process (`embedlab.ScenarioPlan` + `run_scenario`, the CLI's --prometheus-url/--discover
options), and reports the verdict counts, the false-alarm rate (share FAILED) with its 95 %
Clopper-Pearson interval, the inconclusive share (stale scrapes) and the median time to verdict.
`--budget S` stops starting checks after S seconds (the N done is reported).

    .venv/bin/python bench/through_prometheus.py --false-alarms 200 [--budget 1200] [--out fa.json]

`--busy` instead runs the busy check (the randomized on/off schedule, `mixed --busy` attached,
in-process as the CLI runs it) on the 2 x 2 pool, read directly and through Prometheus at each
interval, with a correct router and each of the busy table's faults (docs/verification.md,
"On a busy pool"): on a quiet pool, and on a busy one with `hey` as the other client through the
same frontend (40 req/s in all, both models, paced; a bounded number of requests, to 127.0.0.1
only). Per check: the verdict, the time to it, the windows kept and set aside, the waits for
scrapes the verdict states, and what a window costs (its span from one read to the next). Then
the same decision code (`embedlab.evidence.busy.simulate`, its `BlockEngine`) is fed what the
real runs measured, per way: >= 200 clean and >= 100 faulty checks per cell.

    .venv/bin/python bench/through_prometheus.py --busy [--ways direct,1,5] [--beside 5]
        [--busy-trials direct:3,1:2,5:1] [--sim-clean-runs 200 --sim-fault-runs 100] [--out busy.json]

`--beside W`: the ways W run in a second process of this script, on their own pools, beside the
others (their checks mostly wait for scrapes); both are reported together. `--measure-only` runs
the real checks alone into --out; `--from FILE [FILE ...]` only simulates and prints, from the
real checks of such files (or of reports) together: cells split over processes run side by side
(`--routers`, `--conditions busy` or `quiet`) are reported as one run. Through Prometheus each check
keeps how many 0.25 s pieces its windows sent (as many as fit between the workers' scrapes, since
c2546db) and the simulation sends as many (also at the fewest of a real pool), its budget the
windows' sending, at least 40 blocks (8bcea5d). With --out, each way's checks are also kept as they end,
beside it (OUT-STEM.WAY.partial.json, OUT-STEM.beside.json), so a run stopped early keeps them.

Needs `prometheus` on PATH (Debian's package: `apt-get install prometheus`), and `hey` for --busy.
Every process it starts (the pools, each Prometheus, hey, a --beside child) is stopped by its
process group, also on failure or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from embedlab import Deployment, DeploymentSpec, ScenarioPlan, run_scenario
from embedlab.cluster.ports import release_port, reserve_port

REPO = Path(__file__).resolve().parents[1]

MODELS = ("model-a", "model-b")
GRAPH = "embed-graph"
# The operator's labels (nvidia.com/dynamo-...) as Prometheus keeps them, on each file_sd target.
LABELS = {
    "nvidia_com_dynamo_graph_deployment_name": GRAPH,
    "nvidia_com_dynamo_component_type": "worker",
    "nvidia_com_dynamo_namespace": "embedlab",
}
# The workers found by those labels, in the operator's own spelling.
SELECTOR = (
    f'prometheus:nvidia.com/dynamo-graph-deployment-name="{GRAPH}",nvidia.com/dynamo-component-type="worker"'
)
# The checks' own arguments, as in the integration test (same-model: 40 requests of model-a).
SCENARIOS = {
    "same-model": ("--models", MODELS[0], "--requests", "40"),
    "multi-model": (),
}
ROUTERS = {"correct": "", "leaking": "leak:0.1"}


def _stop_group(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@contextmanager
def prometheus(dep: Deployment, interval: float) -> Iterator[str]:
    """Debian's Prometheus on 127.0.0.1 in a temporary directory, scraping `dep`'s workers every
    `interval` seconds through file_sd with the operator's labels; ready once every worker is up."""
    binary = shutil.which("prometheus")
    if binary is None:
        sys.exit("prometheus is missing: apt-get install prometheus")
    targets = [url.split("://", 1)[1].split("/", 1)[0] for url in dep.system_urls]
    with tempfile.TemporaryDirectory(prefix="through-prom-") as tmp:
        root = Path(tmp)
        (root / "workers.json").write_text(json.dumps([{"targets": targets, "labels": LABELS}]))
        config = root / "prometheus.yml"
        config.write_text(
            f"global: {{scrape_interval: {interval:g}s, scrape_timeout: {min(interval, 1.0):g}s}}\n"
            "scrape_configs:\n"
            "  - job_name: dynamo-workers\n"
            f"    file_sd_configs: [{{files: ['{root / 'workers.json'}'], refresh_interval: 1s}}]\n"
        )
        port = reserve_port()
        argv = [
            binary, f"--config.file={config}", f"--storage.tsdb.path={root / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ]  # fmt: skip
        with open(root / "prometheus.log", "w") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        try:
            end = time.monotonic() + 60 + 3 * interval
            while True:
                if proc.poll() is not None:
                    raise RuntimeError((root / "prometheus.log").read_text()[-3000:])
                try:
                    active = httpx.get(f"{url}/api/v1/targets", timeout=2).json()["data"]["activeTargets"]
                    if len([t for t in active if t["health"] == "up"]) == len(targets):
                        break
                except (httpx.HTTPError, ValueError, KeyError):
                    pass
                if time.monotonic() > end:
                    raise RuntimeError("prometheus did not scrape every worker in time")
                time.sleep(0.2)
            yield url
        finally:
            _stop_group(proc)
            release_port(port)


def run_check(scenario: str, attach: list[str], out: Path) -> dict[str, Any]:
    """One `embedlab scenario` in a fresh process: its verdict, CLI wall time and wall_seconds."""
    out.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "embedlab", "scenario", scenario, *attach, *SCENARIOS[scenario]]
    started = time.perf_counter()
    proc = subprocess.run(
        [*argv, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        start_new_session=True,
    )
    cli = time.perf_counter() - started
    text = proc.stdout + proc.stderr
    data = json.loads(out.read_text()) if out.exists() else {}
    verdict = str(data.get("verdict") or ("error" if proc.returncode else "?")).upper()
    return {
        "verdict": verdict,
        "exit": proc.returncode,
        "cli_s": cli,
        "wall_s": data.get("wall_seconds"),
        "discovered": "discovered 4 workers through Prometheus" in text,
        "reasons": data.get("reasons"),
        "tail": text[-1500:] if verdict not in ("PASSED", "FAILED") else "",
    }


def measure_pool(
    fault: str, intervals: list[float], trials: int, work: Path
) -> dict[str, list[dict[str, Any]]]:
    """Every way on one pool: {way: [trial results]}, way "direct" or "prom Ns" plus the scenario."""
    spec = DeploymentSpec.pool(list(MODELS), replicas=2, frontend_args=("--fault", fault) if fault else ())
    results: dict[str, list[dict[str, Any]]] = {}
    with Deployment(spec, run_dir=work / f"run-{fault or 'correct'}".replace(":", "-")) as dep:
        direct = [
            "--frontend-url",
            dep.frontend_url,
            *[a for u in dep.system_urls for a in ("--system-url", u)],
            "--worker-models",
            ",".join(m for m in MODELS for _ in range(2)),
        ]
        # same-model takes one model: attached directly, the CLI is given that model's workers alone.
        direct_one = [
            "--frontend-url",
            dep.frontend_url,
            *[a for u in dep.system_urls[:2] for a in ("--system-url", u)],
        ]
        ways: list[tuple[str, float | None]] = [("direct", None), *[(f"prom {i:g}s", i) for i in intervals]]
        for way, interval in ways:
            with prometheus(dep, interval) if interval else _nothing() as prom:
                attach = direct if prom is None else ["--frontend-url", dep.frontend_url]
                if prom is not None:
                    attach += ["--prometheus-url", prom, "--discover", SELECTOR]
                for trial in range(trials):
                    for scenario in SCENARIOS:
                        argv = direct_one if prom is None and scenario == "same-model" else attach
                        r = run_check(scenario, argv, work / "result.json")
                        results.setdefault(f"{scenario}|{way}", []).append(r)
                        wall = f"{r['wall_s']:.2f}" if r["wall_s"] is not None else "-"
                        print(
                            f"  {fault or 'correct':9} {scenario:11} {way:8} trial {trial + 1}: {r['verdict']}"
                            f" (exit {r['exit']}) cli {r['cli_s']:.2f} s, wall_seconds {wall}"
                            + (f", 4 workers discovered: {r['discovered']}" if prom else ""),
                            flush=True,
                        )
                        if r["tail"]:
                            print(r["tail"], flush=True)
    return results


def clopper_pearson(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """The exact (Clopper-Pearson) 1 - alpha interval of a binomial share k/n, by bisection."""

    def cdf(x: int, p: float) -> float:  # P(X <= x), X ~ Binomial(n, p)
        return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(x + 1))

    def solve(f: Any) -> float:  # f decreasing in p from >0 to <0 on [0, 1]
        lo, hi = 0.0, 1.0
        for _ in range(100):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if f(mid) > 0 else (lo, mid)
        return (lo + hi) / 2

    if n == 0:
        return 0.0, 1.0
    lower = 0.0 if k == 0 else solve(lambda p: alpha / 2 - (1 - cdf(k - 1, p)))  # P(X >= k) = alpha/2
    upper = 1.0 if k == n else solve(lambda p: cdf(k, p) - alpha / 2)
    return lower, upper


def false_alarms(n: int, budget: float | None, work: Path) -> dict[str, Any]:
    """N clean same-model checks through one Prometheus at 1 s on one correct 2 x 2 pool, in-process."""
    spec = DeploymentSpec.pool(list(MODELS), replicas=2)
    checks: list[dict[str, Any]] = []
    with Deployment(spec, run_dir=work / "run-false-alarms") as dep, prometheus(dep, 1.0) as prom:
        plan = ScenarioPlan(
            scenario="same-model",
            frontend_url=dep.frontend_url,
            prometheus_url=prom,
            discover=SELECTOR,
            models=(MODELS[0],),
            params={"requests": 40},
        )
        started = time.perf_counter()
        for i in range(n):
            if budget is not None and time.perf_counter() - started > budget:
                print(f"  budget of {budget:g} s spent: stopping after {i} checks", flush=True)
                break
            out = io.StringIO()
            t0 = time.perf_counter()
            try:
                with contextlib.redirect_stdout(out):
                    result = run_scenario(plan)
                verdict = result.verdict.value.upper()
                wall, reasons = result.wall_seconds, list(result.reasons or [])
            except Exception as exc:  # noqa: BLE001 -- counted as "other", the run goes on
                verdict, wall, reasons = "ERROR", None, [f"{type(exc).__name__}: {exc}"]
            seconds = time.perf_counter() - t0
            checks.append(
                {
                    "verdict": verdict,
                    "seconds": seconds,
                    "wall_s": wall,
                    "discovered": "discovered 4 workers through Prometheus" in out.getvalue(),
                    "reasons": reasons if verdict != "PASSED" else [],
                }
            )
            print(f"  check {i + 1}/{n}: {verdict} {seconds:.2f} s", flush=True)
            if verdict != "PASSED":
                print("    " + "; ".join(map(str, reasons))[:1500], flush=True)
        loop_s = time.perf_counter() - started
    done = len(checks)
    counts = {v: sum(c["verdict"] == v for c in checks) for v in ("PASSED", "FAILED", "INCONCLUSIVE")}
    counts["other"] = done - sum(counts.values())
    lo, hi = clopper_pearson(counts["FAILED"], done)
    summary = {
        "n": done,
        "counts": counts,
        "false_alarm_rate": counts["FAILED"] / done if done else None,
        "false_alarm_ci95": [lo, hi],
        "inconclusive_share": counts["INCONCLUSIVE"] / done if done else None,
        "median_s": _median([c["seconds"] for c in checks]),
        "median_wall_s": _median([c["wall_s"] for c in checks]),
        "p90_s": sorted(c["seconds"] for c in checks)[int(0.9 * (done - 1))] if done else None,
        "all_discovered": all(c["discovered"] for c in checks),
        "loop_s": loop_s,
    }
    return {"summary": summary, "checks": checks}


@contextmanager
def _nothing() -> Iterator[None]:
    yield None


def _median(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


def table(all_results: dict[str, dict[str, list[dict[str, Any]]]], intervals: list[float]) -> str:
    ways = ["direct", *[f"prom {i:g}s" for i in intervals]]
    lines = [
        "| router | check | counters read | verdicts | CLI wall s (median) | x direct | wall_seconds (median) | x direct |",
        "|---|---|---|---|---:|---:|---:|---:|",
    ]
    for router, results in all_results.items():
        for scenario in SCENARIOS:
            base = results.get(f"{scenario}|direct", [])
            base_cli = _median([r["cli_s"] for r in base])
            base_wall = _median([r["wall_s"] for r in base])
            for way in ways:
                rows = results.get(f"{scenario}|{way}", [])
                if not rows:
                    continue
                verdicts = sorted({r["verdict"] for r in rows})
                counts = ", ".join(
                    f"{sum(r['verdict'] == v for r in rows)}/{len(rows)} {v}" for v in verdicts
                )
                cli = _median([r["cli_s"] for r in rows])
                wall = _median([r["wall_s"] for r in rows])
                label = (
                    "direct scrapes"
                    if way == "direct"
                    else f"Prometheus, {way.split()[1]} scrapes, --discover"
                )
                lines.append(
                    f"| {router} | {scenario} | {label} | {counts} | {_fmt(cli)} | {_ratio(cli, base_cli)}"
                    f" | {_fmt(wall)} | {_ratio(wall, base_wall)} |"
                )
    return "\n".join(lines)


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _ratio(v: float | None, base: float | None) -> str:
    return "-" if v is None or not base else f"{v / base:.1f}"


# -- the busy check: direct, and through Prometheus ---------------------------------------------

# The busy table's faults on the 2 x 2 pool (docs/verification.md, "On a busy pool"), one in ten served twice.
BUSY_ROUTERS = {"correct": "", "leak:0.1": "leak:0.1", "stick": "stick", "skew:0.9": "skew:0.9",
                "double:0.1": "double:0.1"}  # fmt: skip
# On a quiet pool (`--busy` alone) and on a busy one (`hey` beside the check).
CONDITIONS = ("busy", "quiet")
OTHER_RATE = 40.0  # the other client's requests a second, both models together (the busy table's)
WORKER_MODELS = tuple(m for m in MODELS for _ in range(2))


def _way(interval: float | None) -> str:
    return "direct" if interval is None else f"prom {interval:g}s"


def _counted(dep: Deployment) -> float:
    from embedlab.evidence.metrics import scrape_all

    return sum(s.value for s in scrape_all(dep.system_urls))


@contextmanager
def other_client(dep: Deployment, rate: float, seconds: float) -> Iterator[None]:
    """`hey` sending both models' requests through `dep`'s frontend (127.0.0.1), `rate` a second
    in all, paced, at most `seconds` of them; in once its requests show on the counters."""
    hey = shutil.which("hey")
    if hey is None:
        sys.exit("hey is missing: apt-get install hey")
    if not dep.frontend_url.startswith("http://127.0.0.1:"):
        sys.exit(f"the other client only targets 127.0.0.1, not {dep.frontend_url}")
    per = rate / len(MODELS)  # one paced connection per model keeps up with 20 a second
    procs = []
    try:
        for model in MODELS:
            body = json.dumps({"model": model, "input": "another client's request"})
            argv = [hey, "-n", str(max(1, int(per * seconds))), "-c", "1", "-q", f"{per:g}", "-m", "POST"]
            argv += ["-T", "application/json", "-d", body, f"{dep.frontend_url}/v1/embeddings"]
            procs.append(
                subprocess.Popen(
                    argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
                )
            )
        start, deadline = _counted(dep), time.monotonic() + 30
        while _counted(dep) - start < 2 * len(MODELS):
            if time.monotonic() > deadline:
                raise RuntimeError("the other client's requests never reached the counters")
            time.sleep(0.05)
        yield
    finally:
        for proc in procs:
            _stop_group(proc)


def busy_check(dep: Deployment, prom: str | None, budget_s: float) -> dict[str, Any]:
    """One busy check (`mixed --busy`), attached as the CLI attaches: directly (the 4 workers'
    system URLs and models) or through Prometheus (the workers found by their labels)."""
    attach: dict[str, Any] = (
        {"system_urls": tuple(dep.system_urls), "worker_models": WORKER_MODELS}
        if prom is None
        else {"prometheus_url": prom, "discover": SELECTOR}
    )
    plan = ScenarioPlan(
        scenario="mixed", frontend_url=dep.frontend_url, params={"busy": True, "budget_s": budget_s}, **attach
    )
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        target = plan.target(plan.discovered() if prom else None)
        t0 = time.perf_counter()
        result = plan.run_on(target)
        seconds = time.perf_counter() - t0
    counters = target.counters
    run = result.schedule
    windows = run.windows if run else []
    kept = [w for w in windows if w.kept]
    arms = len({w.arm for w in windows}) or 1
    # A window's span: from its opening read to its closing one, which opens the next window
    # (through Prometheus each read waits for a scrape of every worker after it was asked).
    spans = [b.start_s - a.start_s for a, b in zip(windows, windows[1:]) if b.index == a.index + 1]
    span = _median(spans) or (run.window_s if run else None)
    waited, reads = (counters.waited_s, counters.reads) if counters is not None else (0.0, 0)
    per_read = waited / reads if reads else 0.0
    # The other client's requests per kept window: every worker's delta less the check's own.
    other = np.array([sum(w.deltas) - sum(w.sent.values()) for w in kept], dtype=float)
    mean = float(other.mean()) if len(other) else 0.0
    blocks = len(kept) // arms
    # Each worker's count in the windows of the other models' arms is the other client's alone:
    # its variance over its mean, as the variance a window's count of a model would need for the
    # simulation's split of it over the model's replicas (binomial) to spread the workers as much.
    spread = []
    models = run.worker_models if run else ()
    for i, model in enumerate(models):
        alone = [w.deltas[i] for w in kept if w.arm != model and model is not None]
        share = 1 / sum(m == model for m in models)
        if len(alone) > 2 and np.mean(alone) > 0:
            spread.append((np.var(alone, ddof=1) / np.mean(alone) - (1 - share)) / share)
    # Each model's count of the other client's requests per window (its replicas' deltas less the
    # check's own of it): its variance over its mean.
    by_model = []
    for model in dict.fromkeys(m for m in models if m is not None):
        ix = [i for i, m in enumerate(models) if m == model]
        counts = [sum(w.deltas[i] for i in ix) - w.sent.get(model, 0) for w in kept]
        if len(counts) > 2 and np.mean(counts) > 0:
            by_model.append(np.var(counts, ddof=1) / np.mean(counts))
    schedule_wall = (windows[-1].start_s + (span or 0.0)) if windows else 0.0
    # How many times each window sent its arm's requests (one window_s apart; through Prometheus
    # as many as fit between the workers' scrapes, direct once), from its sending part.
    pieces = (
        _median([round((w.end_s - w.start_s) / run.window_s) for w in windows]) if windows and run else None
    )
    said = getattr(counters, "windows", "") if counters is not None else ""
    return {
        "verdict": str(result.verdict).upper(),
        "seconds": seconds,
        "wall_s": result.wall_seconds,
        "windows": len(windows),
        "kept": len(kept),
        "set_aside": len(windows) - len(kept),
        "stale_windows": sum(w.stale for w in windows),
        "blocks": blocks,
        "arms": arms,
        "window_s": run.window_s if run else None,
        "requests": int(round(run.rate_per_s * run.window_s)) if run else None,
        "pieces": pieces,
        "windows_said": said,
        "budget_floor_s": _raised_budget(said),
        "span_s": span,
        "waited_s": waited,
        "reads": reads,
        "stale_reads": counters.stale if counters is not None else 0,
        "wait_per_read_s": per_read,
        "wall_block_s": schedule_wall / blocks if blocks else None,
        "overhead_s": result.wall_seconds - schedule_wall if windows else None,
        "other_per_window": mean,
        "other_per_s": mean / span if span else None,
        "fano": float(other.var(ddof=1) / mean) if mean > 0 and len(other) > 2 else 1.0,
        "model_fano": float(np.mean(by_model)) if by_model else None,
        "worker_fano": float(np.mean(spread)) if spread else None,
        "waits_stated": "waiting for scrapes" in (result.power or ""),
        "power": result.power,
        "reasons": [str(r) for r in result.reasons[:3]] if str(result.verdict).upper() != "PASSED" else [],
    }


def _raised_budget(said: str) -> float | None:
    """The budget the verdict's sentence says it was raised to, if so: "at least 40 blocks (260 s
    of sending)" (since 8bcea5d), or "the budget raised to 400 s" of wall time (c2546db)."""
    import re

    m = re.search(r"blocks \(([0-9.]+) s of sending\)|budget raised to ([0-9.]+) s", said or "")
    return float(m.group(1) or m.group(2)) if m else None


def measure_busy_way(
    interval: float | None,
    trials: int,
    budget_s: float,
    work: Path,
    out: Path | None,
    routers: dict[str, str] = BUSY_ROUTERS,
    conditions: tuple[str, ...] = CONDITIONS,
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """One way (direct, or Prometheus at `interval`) on a fresh pool per router: {router: {condition:
    [checks]}}; every check is written to `out` (when given) as it ends."""
    way = _way(interval)
    found: dict[str, dict[str, list[dict[str, Any]]]] = {}
    # The longest a check's other client may need: its budget of the schedule's own time, at
    # the waits for scrapes (two windows a block, each up to an interval longer), then margin.
    per_check = 60.0 + budget_s * (1 + (2 * interval / 0.5 if interval else 1))
    for router, fault in routers.items():
        spec = DeploymentSpec.pool(
            list(MODELS), replicas=2, frontend_args=("--fault", fault) if fault else ()
        )
        run_dir = work / f"busy-{way}-{router}".replace(" ", "-").replace(":", "-")
        with (
            Deployment(spec, run_dir=run_dir) as dep,
            prometheus(dep, interval) if interval else _nothing() as prom,
        ):
            for condition in conditions:
                beside = (
                    other_client(dep, OTHER_RATE, trials * per_check) if condition == "busy" else _nothing()
                )
                with beside:
                    for trial in range(trials):
                        r = busy_check(dep, prom, budget_s)
                        found.setdefault(router, {}).setdefault(condition, []).append(r)
                        print(
                            f"  {way:9} {router:10} {condition:5} trial {trial + 1}: {r['verdict']} in"
                            f" {r['seconds']:.1f} s; {r['kept']} windows kept, {r['set_aside']} set aside"
                            f" ({r['stale_windows']} stale); window span {_fmt(r['span_s'])} s; waits"
                            f" {r['waited_s']:.1f} s over {r['reads']} reads; other client"
                            f" {r['other_per_window']:.1f} a window",
                            flush=True,
                        )
                        if r["reasons"]:
                            print("    " + "; ".join(r["reasons"])[:600], flush=True)
                        if out is not None:
                            out.write_text(json.dumps({way: found}, indent=1))
    return found


def _own_block_s(c: dict[str, Any]) -> float | None:
    """What the budget counts of a kept block: the schedule's own time (its wall time less the
    waits for scrapes of its reads: one closing each window, one more after a block set aside)."""
    if not c["blocks"]:
        return None
    reads = c["windows"] + math.ceil(c["set_aside"] / c["arms"])
    return (c["wall_block_s"] * c["blocks"] - c["wait_per_read_s"] * reads) / c["blocks"]


def measured_inputs(checks: list[dict[str, Any]]) -> dict[str, Any]:
    """The simulation's inputs for one way, pooled over its real busy checks (every router)."""
    done = [c for c in checks if c["blocks"]]
    busy = [c for c in done if c["condition"] == "busy"]
    clean = [c for c in busy if c["router"] == "correct"]
    med = lambda key, rows=done: _median([c[key] for c in rows])  # noqa: E731
    window_s, requests = done[0]["window_s"], done[0]["requests"]
    # Through Prometheus (reads that wait for scrapes) each window sends its arm's requests
    # `pieces` times (as many 0.25 s windows as fit between the workers' scrapes; that pool's
    # Prometheus's scrape phases set it), and the budget counts the windows' sending, at least
    # SCRAPED_BLOCKS blocks (8bcea5d; at c2546db, wall time: the verdict's sentence says which).
    # Checks measured before the windows were filled (no `pieces` kept) sent once.
    through = any(c["reads"] for c in done) and all(c.get("pieces") is not None for c in done)
    pieces = [int(c.get("pieces") or 1) for c in done]
    floors = [c["budget_floor_s"] for c in done if c.get("budget_floor_s")]
    return {
        "through": through,
        "arms": done[0]["arms"],
        "pieces": _median([float(p) for p in pieces]),
        "pieces_range": (min(pieces), max(pieces)),
        "budget_floor_s": _median(floors),
        "window_s": window_s,
        "requests": requests,
        "rate_per_s": requests / window_s,
        "span_s": med("span_s"),
        "block_s": _median([_own_block_s(c) for c in done]),
        "wall_block_s": med("wall_block_s"),
        "overhead_s": med("overhead_s"),
        # the other client's variance over its mean per window, in the clean busy checks: of a
        # model's count (where a check recorded it, else of both models' together), the median and
        # the largest (a model's, or as each worker's count spread, whichever is more)
        "fano": _median([c.get("model_fano") or c["fano"] for c in clean]) or 1.0,
        "fano_max": max(
            [max(c.get("model_fano") or c["fano"], c.get("worker_fano") or 0.0) for c in clean], default=1.0
        ),
        "other_per_s": med("other_per_s", busy),
        "multiple": (med("other_per_s", busy) or 0.0) / (requests / window_s),
        "set_aside": sum(c["set_aside"] for c in done) / max(1, sum(c["windows"] for c in done)),
        "checks": len(done),
    }


SIM_FAULTS = [f for f in BUSY_ROUTERS.values() if f]
HEY_MEASURED = "hey as measured (steady, its rate, the median variance)"
HEY_SPREAD = "hey as measured, the largest variance of a real check"


def _filled(cal: dict[str, Any], pieces: int, budget_s: float) -> dict[str, Any]:
    """simulate()'s options for windows that send `pieces` x 0.25 s each (through Prometheus since
    c2546db), with the budget as at 8bcea5d: the windows' sending, at least SCRAPED_BLOCKS blocks."""
    from embedlab.evidence.busy.constants import SCRAPED_BLOCKS

    sending = pieces * cal["window_s"]
    return {
        "window_s": sending, "requests": pieces * cal["requests"],
        "block_s": cal["arms"] * sending / max(1e-9, 1 - cal["set_aside"]),
        "budget_s": max(budget_s, SCRAPED_BLOCKS * cal["arms"] * sending),
    }  # fmt: skip


def simulate_way(cal: dict[str, Any], clean_runs: int, fault_runs: int, budget_s: float) -> dict[str, Any]:
    """The 2 x 2 pool simulated at one way's measured inputs: the other client as measured (steady
    at its rate; a model's count per window as variable as measured, then as variable as each
    worker's count was), none (--busy on a quiet pool), and the busy table's shapes."""
    from embedlab.evidence.busy.simulate import Background, Pool, simulate
    from embedlab.verdicts import Verdict

    measured = Background("steady", cal["multiple"])
    shapes = [Background(shape, m) for shape in ("steady", "bursty", "ramp") for m in (0.5, 1.0, 4.0)]
    # hey at its measured rate, its count per window as variable as measured (the median of the
    # clean checks), then as in the most variable one: the time to a verdict grows steeply with it.
    runs_of: list[tuple[str, Background, float]] = [(HEY_MEASURED, measured, cal["fano"])]
    runs_of.append((HEY_SPREAD, measured, cal["fano_max"]))
    runs_of.append(("none (--busy on a quiet pool)", Background("steady", 0.0), cal["fano"]))
    runs_of += [(f"{b.shape} {b.multiple:g}x", b, cal["fano"]) for b in shapes]
    options = {
        "rate_per_s": cal["rate_per_s"], "window_s": cal["window_s"], "requests": cal["requests"],
        # a kept block's own time, the blocks set aside included (what the budget counts)
        "block_s": cal["block_s"] / max(1e-9, 1 - cal["set_aside"]),
        "span_s": cal["span_s"], "overhead_s": cal["overhead_s"],
        "leak_rule": "debt", "budget_s": budget_s,
    }  # fmt: skip
    if cal.get("through"):
        # The filled windows: each sends `pieces` x the arm's requests over pieces x 0.25 s (the
        # check's rate kept) and spans read to read as measured; the budget counts the windows'
        # sending (the blocks set aside included), at least SCRAPED_BLOCKS blocks, the waits on top.
        options |= _filled(cal, int(cal["pieces"]), budget_s)
    # Each pool's Prometheus scrapes its workers at phases of its own, so the windows of one pool
    # send more or less of the interval than another's: hey as measured, also at the fewest.
    extra: dict[str, dict[str, Any]] = {}
    if cal.get("through") and cal["pieces_range"][0] < cal["pieces"]:
        fewest = int(cal["pieces_range"][0])
        name = f"hey as measured, the fewest pieces of a real pool ({fewest} x {cal['window_s']:g} s)"
        runs_of.insert(2, (name, measured, cal["fano"]))
        extra[name] = _filled(cal, fewest, budget_s)
    cells: dict[str, dict[str, Any]] = {name: {} for name, _, _ in runs_of}
    groups = dict.fromkeys((f, name if name in extra else "") for name, _, f in runs_of)
    for fano, alone in groups:
        chosen = [
            (name, b)
            for name, b, f in runs_of
            if f == fano and (name == alone if alone else name not in extra)
        ]
        for n, fault in enumerate(["", *SIM_FAULTS]):
            sims = simulate(
                Pool.multi_model(2, 2, fault=fault),
                backgrounds=[b for _, b in chosen],
                runs=fault_runs if fault else clean_runs,
                seed=11 + n,
                fano=fano,
                **(options | extra.get(alone, {})),
            )
            for (name, _), sim in zip(chosen, sims):
                cells[name][fault or "correct"] = {
                    "runs": sim.runs,
                    "failed": sim.count(Verdict.FAILED),
                    "passed": sim.count(Verdict.PASSED),
                    "median_s": sim.seconds_to(None, 0.5),
                    "p95_s": sim.seconds_to(None, 0.95),
                }
    return {"inputs": cal, "options": options, "cells": cells}


def busy_real_table(measured: dict[str, Any], ways: list[str]) -> str:
    lines = [
        "| router | other client | counters read | verdicts | time to verdict s (median) | x direct"
        " | windows kept / set aside (stale) | window span s | waits stated (median) |",
        "|---|---|---|---|---:|---:|---|---:|---|",
    ]
    for router in BUSY_ROUTERS:
        for condition in CONDITIONS:
            base = _median(
                [c["seconds"] for c in measured.get("direct", {}).get(router, {}).get(condition, [])]
            )
            for way in ways:
                rows = measured.get(way, {}).get(router, {}).get(condition, [])
                if not rows:
                    continue
                verdicts = ", ".join(
                    f"{sum(r['verdict'] == v for r in rows)}/{len(rows)} {v}"
                    for v in sorted({r["verdict"] for r in rows})
                )
                t = _median([r["seconds"] for r in rows])
                kept = "; ".join(f"{r['kept']} / {r['set_aside']} ({r['stale_windows']})" for r in rows)
                waits = (
                    f"{_median([r['waited_s'] for r in rows]):.0f} s over {_median([r['reads'] for r in rows]):.0f} reads"
                    + ("" if all(r["waits_stated"] for r in rows) else " (not stated!)")
                    if way != "direct"
                    else "-"
                )
                other = f"hey {OTHER_RATE:g} req/s" if condition == "busy" else "none"
                lines.append(
                    f"| {router} | {other} | {way} | {verdicts} | {_fmt(t)} | {_ratio(t, base)} | {kept}"
                    f" | {_fmt(_median([r['span_s'] for r in rows]))} | {waits} |"
                )
    return "\n".join(lines)


def inputs_table(sims: dict[str, Any]) -> str:
    lines = [
        "| counters read | window (sending part) | requests a window | window span | a kept block: own time (the budget) | a kept block: wall | before the schedule | other client per window: mean, variance / mean | set aside | real checks |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]  # fmt: skip
    for way, sim in sims.items():
        c = sim["inputs"]
        n, (lo, hi) = int(c.get("pieces") or 1), c.get("pieces_range") or (1, 1)
        sending = f"{n} x {c['window_s']:g} s" + (f" ({lo} to {hi} by pool)" if lo != hi else "")
        own = _fmt(sim["options"]["block_s"]) + (" s sent" if c.get("through") else " s")
        budget = sim["options"]["budget_s"]
        lines.append(
            f"| {way} | {sending if c.get('through') else str(c['window_s']) + ' s'} | {n * c['requests']}"
            f" | {_fmt(c['span_s'])} s | {own} ({budget:g} s)"
            f" | {_fmt(c['wall_block_s'])} s | {_fmt(c['overhead_s'])} s"
            f" | {(c['other_per_s'] or 0) * c['span_s']:.1f} ({_fmt(c['other_per_s'])} req/s, {c['multiple']:.2f}x the check's), {c['fano']:.2f}"
            f" (largest {c['fano_max']:.2f})"
            f" | {100 * c['set_aside']:.1f} % | {c['checks']} |"
        )
    return "\n".join(lines)


def sim_table(sims: dict[str, Any]) -> str:
    routers = ["correct", *SIM_FAULTS]
    head = "| other client | counters read | false alarms | passed | time | " + " | ".join(
        f"`{f}` caught | time" for f in SIM_FAULTS
    )
    lines = [head + " |", "|---|---|" + "---|" * (2 * len(routers) + 0) + "---|"]
    names = list(dict.fromkeys(n for sim in sims.values() for n in sim["cells"]))
    for name in names:
        for way, sim in sims.items():
            cell = sim["cells"].get(name)
            if not cell:
                continue
            c = cell["correct"]
            row = [
                name, way, f"{c['failed']} of {c['runs']}", f"{100 * c['passed'] / c['runs']:.1f} %",
                f"{c['median_s']:.0f} / {c['p95_s']:.0f}",
            ]  # fmt: skip
            for f in SIM_FAULTS:
                x = cell[f]
                caught = f"{100 * x['failed'] / x['runs']:.1f} %" + (
                    f" ({x['passed']} passed)" if x["passed"] else ""
                )
                row += [caught, f"{x['median_s']:.0f} / {x['p95_s']:.0f}"]
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def busy_report(measured: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The real table, the simulation's inputs per way, and the simulated cells; printed."""
    ways = [w for w in ("direct", *(f"prom {i}" for i in ("1s", "5s"))) if w in measured]
    ways += [w for w in measured if w not in ways]
    sims = {}
    for way in ways:
        checks = [
            c | {"condition": cond, "router": router}
            for router, found in measured[way].items()
            for cond, rows in found.items()
            for c in rows
        ]
        cal = measured_inputs(checks)
        started = time.perf_counter()
        sims[way] = simulate_way(cal, args.sim_clean_runs, args.sim_fault_runs, args.budget_s)
        sims[way]["sim_s"] = time.perf_counter() - started
    print("\nReal busy checks (mixed --busy on the 2 x 2 pool):\n")
    print(busy_real_table(measured, ways))
    print("\nWhat the real runs measured, per way (the simulation's inputs):\n")
    print(inputs_table(sims))
    print(
        f"\nSimulated ({args.sim_clean_runs} clean, {args.sim_fault_runs} faulty checks a cell; median / p95"
        " seconds to the verdict, inconclusive at the budget):\n"
    )
    print(sim_table(sims))
    print(f"\nsimulation {sum(s['sim_s'] for s in sims.values()):.0f} s")
    return {"measured": measured, "simulated": sims}


def _trials(text: str) -> dict[str, int]:
    """`direct:3,1:2,5:1` -> {"direct": 3, "prom 1s": 2, "prom 5s": 1}."""
    out = {}
    for item in text.split(","):
        way, _, n = item.partition(":")
        out["direct" if way == "direct" else _way(float(way))] = int(n)
    return out


def merged(files: list[Path]) -> dict[str, Any]:
    """The real checks of several --busy --out files (a report's, or --measure-only's), together."""
    out: dict[str, Any] = {}
    for path in files:
        data = json.loads(path.read_text())
        for way, routers in data.get("measured", data).items():
            for router, conditions in routers.items():
                for condition, rows in conditions.items():
                    out.setdefault(way, {}).setdefault(router, {}).setdefault(condition, []).extend(rows)
    return out


def busy_main(args: argparse.Namespace) -> None:
    if args.from_file:
        report = busy_report(merged(args.from_file), args)
        if args.out:
            args.out.write_text(json.dumps(report, indent=1))
        return
    ways = [None if w.strip() == "direct" else float(w) for w in args.ways.split(",") if w.strip()]
    beside = {float(w) for w in args.beside.split(",") if w.strip()} if args.beside else set()
    trials = _trials(args.busy_trials)
    routers = {r: BUSY_ROUTERS[r] for r in args.routers.split(",")} if args.routers else BUSY_ROUTERS
    conditions = tuple(c for c in args.conditions.split(",") if c in CONDITIONS)
    started = time.perf_counter()
    measured: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="through-prom-busy-") as tmp:
        child = None
        # kept beside --out (a run stopped early keeps what the second process measured)
        part = args.out.with_name(f"{args.out.stem}.beside.json") if args.out else Path(tmp) / "beside.json"
        if beside:
            argv = [
                sys.executable,
                __file__,
                "--busy",
                "--measure-only",
                "--ways",
                ",".join(f"{w:g}" for w in sorted(beside)),
            ]
            argv += ["--busy-trials", args.busy_trials, "--budget-s", str(args.budget_s), "--out", str(part)]
            argv += ["--routers", ",".join(routers), "--conditions", ",".join(conditions)]
            child = subprocess.Popen(argv, start_new_session=True)
        try:
            for interval in ways:
                if interval in beside:
                    continue
                way = _way(interval)
                partial = (
                    args.out.with_name(f"{args.out.stem}.{way.replace(' ', '-')}.partial.json")
                    if args.out
                    else None
                )
                measured[way] = measure_busy_way(
                    interval,
                    trials[way],
                    args.budget_s,
                    Path(tmp),
                    args.out if args.measure_only else partial,
                    routers,
                    conditions,
                )
                if args.measure_only and args.out:
                    args.out.write_text(json.dumps(measured, indent=1))
            if child is not None:
                child.wait()
                if part.exists():
                    measured.update(json.loads(part.read_text()))
        finally:
            if child is not None:
                _stop_group(child)
    real_s = time.perf_counter() - started
    if args.measure_only:
        if args.out:
            args.out.write_text(json.dumps(measured, indent=1))
        return
    report = busy_report(measured, args)
    report["meta"] = {
        "real_s": real_s, "trials": trials, "budget_s": args.budget_s, "other_rate": OTHER_RATE,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(),
        "load": os.getloadavg(),
    }  # fmt: skip
    print(f"real runs {real_s:.0f} s; {trials} trials a cell")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--intervals", default="1,5", help="Prometheus scrape intervals in seconds (default: 1,5)"
    )
    parser.add_argument("--trials", type=int, default=3, help="trials per check and way (default: 3)")
    parser.add_argument("--out", type=Path, default=None, help="also write every trial as JSON here")
    parser.add_argument(
        "--false-alarms", type=int, default=0, metavar="N",
        help="instead: N clean same-model checks through one Prometheus at 1 s on one pool",
    )  # fmt: skip
    parser.add_argument(
        "--budget", type=float, default=None, help="--false-alarms: seconds after which no check starts"
    )
    parser.add_argument(
        "--busy", action="store_true", help="instead: the busy check, direct and through Prometheus"
    )
    parser.add_argument(
        "--ways", default="direct,1,5", help="--busy: direct and/or scrape intervals (default: direct,1,5)"
    )
    parser.add_argument(
        "--beside", default="", help="--busy: ways run in a second process beside the rest (e.g. 5)"
    )
    parser.add_argument(
        "--busy-trials",
        default="direct:3,1:2,5:1",
        help="--busy: real checks a cell, per way (default: direct:3,1:2,5:1)",
    )
    parser.add_argument(
        "--budget-s", type=float, default=60.0, help="--busy: each check's budget (default: 60)"
    )
    parser.add_argument(
        "--sim-clean-runs", type=int, default=200, help="--busy: simulated clean checks a cell"
    )
    parser.add_argument(
        "--sim-fault-runs", type=int, default=100, help="--busy: simulated faulty checks a cell"
    )
    parser.add_argument(
        "--from",
        dest="from_file",
        type=Path,
        nargs="+",
        default=None,
        help="--busy: only simulate and print, from these --out files' real checks together",
    )
    parser.add_argument(
        "--routers", default="", help=f"--busy: some of {','.join(BUSY_ROUTERS)} (default: all)"
    )
    parser.add_argument(
        "--conditions",
        default="busy,quiet",
        help="--busy: the pool busy (hey beside), quiet, or both (default)",
    )
    parser.add_argument(
        "--measure-only", action="store_true", help="--busy: only the real checks, into --out (for --from)"
    )
    args = parser.parse_args()
    if args.busy:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        busy_main(args)
        return
    if args.false_alarms:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="through-prom-bench-") as tmp:
            res = false_alarms(args.false_alarms, args.budget, Path(tmp))
        s = res["summary"]
        c = s["counts"]
        lo, hi = s["false_alarm_ci95"]
        print(
            f"\n{s['n']} clean same-model checks through Prometheus at 1 s: {c['PASSED']} passed,"
            f" {c['FAILED']} failed, {c['INCONCLUSIVE']} inconclusive, {c['other']} other\n"
            f"false-alarm rate {c['FAILED']}/{s['n']} = {100 * (s['false_alarm_rate'] or 0):.1f} %"
            f" (95 % Clopper-Pearson {100 * lo:.2f} to {100 * hi:.2f} %); inconclusive"
            f" {100 * (s['inconclusive_share'] or 0):.1f} %\n"
            f"time to verdict: median {_fmt(s['median_s'])} s (p90 {_fmt(s['p90_s'])} s), median"
            f" wall_seconds {_fmt(s['median_wall_s'])} s; 4 workers discovered every time: {s['all_discovered']}\n"
            f"checks {s['loop_s']:.0f} s; bench wall {time.perf_counter() - started:.0f} s"
        )
        if args.out:
            args.out.write_text(json.dumps(res, indent=1))
        return
    intervals = [float(x) for x in args.intervals.split(",") if x.strip()]
    # SIGTERM unwinds like Ctrl-C, so the pool and Prometheus are stopped by their process groups.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.perf_counter()
    all_results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    with tempfile.TemporaryDirectory(prefix="through-prom-bench-") as tmp:
        for router, fault in ROUTERS.items():
            print(f"{router} router{f' (--fault {fault})' if fault else ''}:", flush=True)
            all_results[router] = measure_pool(fault, intervals, args.trials, Path(tmp))
    print()
    print(table(all_results, intervals))
    print(f"\n{args.trials} trials; bench wall {time.perf_counter() - started:.0f} s")
    if args.out:
        args.out.write_text(json.dumps(all_results, indent=1))


if __name__ == "__main__":
    main()
