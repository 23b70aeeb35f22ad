"""Does the embedded frontend keep its throughput as the pool grows?

Hash workers behind the embedded frontend: 2, 4, 8 and 16 workers of one model, and 16
models of one worker each. Load is `hey` at concurrency 32 (for 16 models: 16 `hey`s
at concurrency 2 started together, one per model, pooled). Each setting is launched
afresh per repeat and the settings take turns in a rotated order, so that a noisy
minute on a shared machine is spread over all of them; each figure is the median.

Beside throughput it reports CPU per request of the frontend and of all workers
(from /proc), how busy the machine was, and the cost of one routing decision
(registry lookup plus policy pick) timed in-process at each pool size: that separates
"the frontend's routing got slower" from "more processes share two cores".

    make bench
    .venv/bin/python bench/scale.py                 # writes bench/results/scale.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import time
import timeit
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from measure import (  # noqa: E402
    ForeignCpu, HeyResult, group_cpu_seconds, hey, hey_many, machine_info, machine_jiffies, require_hey, wait_for_quiet,
)

from embedlab import Deployment, DeploymentSpec  # noqa: E402
from embedlab.serve.registry import Registry  # noqa: E402
from embedlab.serve.router import make_policy  # noqa: E402

MODEL = "scale-model"
SETTINGS = ("workers=2", "workers=4", "workers=8", "workers=16", "models=16")


def body(model: str) -> bytes:
    return json.dumps({"model": model, "input": "hello world"}).encode()


def spec_for(setting: str) -> DeploymentSpec:
    kind, n = setting.split("=")
    if kind == "workers":
        return DeploymentSpec.same_model(MODEL, workers=int(n), startup_timeout=180)
    return DeploymentSpec.multi_model([f"{MODEL}-{i}" for i in range(int(n))], startup_timeout=180)


def routing_cost_us(instances: int, models: int = 1, *, calls: int = 20000) -> float:
    """Microseconds for one registry lookup and one weighted-random pick, as dispatch does them."""
    registry = Registry(ttl=3600)
    for i in range(instances):
        registry.register(instance_id=f"i{i}", endpoint=f"ns.w{i}.generate", model=f"m{i % models}",
                          url=f"http://127.0.0.1:{20000 + i}")
    policy = make_policy("weighted-random", seed=0)

    def dispatch() -> None:
        live = registry.live("m0")
        policy.pick("m0", live)

    return min(timeit.repeat(dispatch, number=calls, repeat=5)) / calls * 1e6


def measure(setting: str, *, requests: int, concurrency: int) -> dict[str, float]:
    with Deployment(spec_for(setting)) as dep:
        models = sorted(set(dep.models))
        jobs = [(dep.frontend_url + "/v1/embeddings", body(m)) for m in models]
        lanes = max(1, concurrency // len(jobs))
        per_job = max(lanes, requests // len(jobs))
        # Warm up: connections from the frontend to every worker, lazy imports.
        hey_many(jobs, requests=max(lanes * 4, 400 // len(jobs)), concurrency=lanes)
        frontend_pgid = dep.frontend.pgid  # type: ignore[union-attr]
        worker_pgids = [w.pgid for w in dep.workers]
        f0 = group_cpu_seconds(frontend_pgid)  # type: ignore[arg-type]
        w0 = sum(group_cpu_seconds(p) for p in worker_pgids)  # type: ignore[arg-type]
        b0, t0 = machine_jiffies()
        meter = ForeignCpu([p.pgid for p in dep.processes if p.pgid])
        result: HeyResult = hey_many(jobs, requests=per_job, concurrency=lanes) if len(jobs) > 1 else \
            hey(jobs[0][0], jobs[0][1], requests=per_job, concurrency=lanes)
        b1, t1 = machine_jiffies()
        foreign = meter.cores()
        f1 = group_cpu_seconds(frontend_pgid)  # type: ignore[arg-type]
        w1 = sum(group_cpu_seconds(p) for p in worker_pgids)  # type: ignore[arg-type]
    n = max(1, result.requests)
    return {
        "rps": result.rps, "p50_ms": result.p50_ms, "p99_ms": result.p99_ms, "failed": result.failed,
        "frontend_cpu_ms_per_request": (f1 - f0) * 1e3 / n, "workers_cpu_ms_per_request": (w1 - w0) * 1e3 / n,
        "machine_busy": (b1 - b0) / max(1, t1 - t0), "foreign_cores": foreign,
    }


def interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--max-load", type=float, default=1.5, help="wait for the 1-minute load average to fall below this")
    parser.add_argument("--max-foreign", type=float, default=0.3,
                        help="wait until processes not ours use at most this many cores")
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "scale.json")
    args = parser.parse_args()
    require_hey()
    signal.signal(signal.SIGTERM, interrupt)  # unwind like Ctrl-C: every deployment is stopped
    settings = args.settings.split(",")

    routing = {s: routing_cost_us(int(s.split("=")[1]), int(s.split("=")[1]) if s.startswith("models") else 1) for s in settings}
    runs: dict[str, list[dict[str, float]]] = {s: [] for s in settings}
    loads = []
    for rep in range(args.repeat):
        # The load average is checked before the first round only: ours keeps it up afterwards.
        loads.append(wait_for_quiet(max_load=args.max_load if rep == 0 else None, max_foreign_cores=args.max_foreign))
        for setting in settings[rep % len(settings):] + settings[: rep % len(settings)]:
            row = measure(setting, requests=args.requests, concurrency=args.concurrency)
            runs[setting].append(row)
            print(f"  run {rep + 1} {setting:<11} {row['rps']:8.1f} req/s  p50 {row['p50_ms']:6.2f} ms  "
                  f"frontend {row['frontend_cpu_ms_per_request']:.3f} ms CPU/req  busy {row['machine_busy']:.0%}  "
                  f"others' CPU {row['foreign_cores']:.2f} cores", flush=True)
    loads.append({"load_1m": round(os.getloadavg()[0], 2)})

    rows = []
    for setting in settings:
        kind, n = setting.split("=")
        med = {k: statistics.median(r[k] for r in runs[setting]) for k in runs[setting][0]}
        med["failed"] = sum(r["failed"] for r in runs[setting])
        rows.append({"setting": setting, "workers": int(n), "models": int(n) if kind == "models" else 1, **med,
                     "routing_us": routing[setting], "all_rps": [round(r["rps"], 1) for r in runs[setting]]})
    base = next((r for r in rows if r["setting"] == "workers=2"), None)
    targets: dict[str, object] = {}
    if base:
        for r in rows:
            r["vs_2_workers"] = r["rps"] / base["rps"]
        for setting in ("workers=16", "models=16"):
            r = next((x for x in rows if x["setting"] == setting), None)
            if r:
                targets[setting] = {"value": r["vs_2_workers"], "target": ">= 0.90", "met": r["vs_2_workers"] >= 0.9}
    targets["met"] = all(t["met"] for t in targets.values() if isinstance(t, dict))
    report = {
        "benchmark": "scale", "command": ".venv/bin/python bench/scale.py", "machine": machine_info(), "load": loads,
        "setup": {"engine": "hash", "concurrency": args.concurrency, "requests": args.requests, "repeat": args.repeat,
                  "load_generator": "hey (keep-alive); 16 models: 16 hey processes at concurrency 2, pooled"},
        "rows": rows, "targets": targets,
    }
    print(f"\n{'setting':<11} {'req/s':>8} {'vs 2':>6} {'p50 ms':>7} {'p99 ms':>7} {'front CPU ms/req':>17} "
          f"{'workers CPU ms/req':>19} {'busy':>5} {'routing us':>11}")
    for r in rows:
        print(f"{r['setting']:<11} {r['rps']:8.1f} {r.get('vs_2_workers', 0):6.2f} {r['p50_ms']:7.2f} {r['p99_ms']:7.2f} "
              f"{r['frontend_cpu_ms_per_request']:17.3f} {r['workers_cpu_ms_per_request']:19.3f} {r['machine_busy']:5.0%} "
              f"{r['routing_us']:11.2f}")
    for name, t in targets.items():
        if isinstance(t, dict):
            print(f"target {name} vs 2 workers: {t['value']:.2f} ({t['target']}) {'met' if t['met'] else 'MISSED'}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0 if targets["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
