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

Needs `prometheus` on PATH (Debian's package: `apt-get install prometheus`). Every process it
starts (the pool, each Prometheus) is stopped by its process group, also on failure or SIGTERM.
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
    args = parser.parse_args()
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
