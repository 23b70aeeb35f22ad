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
import timeit
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from measure import (  # noqa: E402
    ForeignCpu,
    HeyResult,
    group_cpu_seconds,
    hey_many,
    machine_info,
    machine_jiffies,
    require_hey,
    wait_for_quiet,
    worker_addresses,
)

from embedlab import Deployment, DeploymentSpec  # noqa: E402

# Not the public API: the frontend's own registry and policies, timed without HTTP around them.
from embedlab.serve.instances import InstanceTable  # noqa: E402
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
    registry = InstanceTable(ttl=3600)
    for i in range(instances):
        registry.register(
            instance_id=f"i{i}",
            endpoint=f"ns.w{i}.generate",
            model=f"m{i % models}",
            url=f"http://127.0.0.1:{20000 + i}",
        )
    policy = make_policy("weighted-random", seed=0)

    def dispatch() -> None:
        live = registry.live("m0")
        policy.pick("m0", live)

    return min(timeit.repeat(dispatch, number=calls, repeat=5)) / calls * 1e6


def context_switches(pids: list[int]) -> int:
    """Voluntary plus involuntary context switches of the processes' main threads."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as handle:
                for line in handle:
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def run_load(
    jobs: list[tuple[str, bytes]],
    *,
    requests: int,
    concurrency: int,
    frontend_pgid: int | None,
    workers: list[int],
    own: list[int],
) -> dict[str, float]:
    """One pooled `hey` run over `jobs`, with the CPU and context switches it cost."""
    lanes = max(1, concurrency // len(jobs))
    f0 = group_cpu_seconds(frontend_pgid) if frontend_pgid else 0.0
    w0 = sum(group_cpu_seconds(p) for p in workers)
    c0 = context_switches(workers)
    b0, t0 = machine_jiffies()
    meter = ForeignCpu(own)
    result: HeyResult = hey_many(jobs, requests=max(lanes, requests // len(jobs)), concurrency=lanes)
    b1, t1 = machine_jiffies()
    foreign = meter.cores()
    f1 = group_cpu_seconds(frontend_pgid) if frontend_pgid else 0.0
    w1 = sum(group_cpu_seconds(p) for p in workers)
    c1 = context_switches(workers)
    n = max(1, result.requests)
    return {
        "rps": result.rps,
        "p50_ms": result.p50_ms,
        "p99_ms": result.p99_ms,
        "failed": result.failed,
        "frontend_cpu_ms_per_request": (f1 - f0) * 1e3 / n,
        "workers_cpu_ms_per_request": (w1 - w0) * 1e3 / n,
        "worker_switches_per_request": (c1 - c0) / n,
        "machine_busy": (b1 - b0) / max(1, t1 - t0),
        "foreign_cores": foreign,
    }


def measure(setting: str, *, requests: int, concurrency: int, clients: int) -> dict[str, float]:
    """The frontend in front of the setting's workers, then (the control) the same workers direct.

    Both use the same client shape: `clients` `hey` processes at concurrency // clients each,
    to the frontend (spread over the models) or straight to the workers (spread over them).
    So the only difference between settings is the pool, and between the two runs the frontend.
    """
    with Deployment(spec_for(setting)) as dep:
        models = sorted(set(dep.models))
        front_jobs = [
            (dep.frontend_url + "/v1/embeddings", body(models[i % len(models)])) for i in range(clients)
        ]
        listed = worker_addresses(dep.frontend_url)
        planes = [(address, model) for model in sorted(listed) for address in listed[model]]
        direct_jobs = [
            (planes[i % len(planes)][0] + "/v1/embeddings", body(planes[i % len(planes)][1]))
            for i in range(clients)
        ]
        workers = [w.pgid for w in dep.workers if w.pgid]
        own = [p.pgid for p in dep.processes if p.pgid]
        # Warm up: the frontend's connections to every worker, lazy imports.
        for jobs in (front_jobs, direct_jobs):
            hey_many(jobs, requests=max(4, 800 // clients), concurrency=max(1, concurrency // clients))
        front = run_load(
            front_jobs,
            requests=requests,
            concurrency=concurrency,
            frontend_pgid=dep.frontend.pgid,  # type: ignore[union-attr]
            workers=workers,
            own=own,
        )
        direct = run_load(
            direct_jobs,
            requests=requests,
            concurrency=concurrency,
            frontend_pgid=None,
            workers=workers,
            own=own,
        )
    front.update({f"direct_{k}": v for k, v in direct.items() if k not in ("frontend_cpu_ms_per_request",)})
    return front


def interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--clients", type=int, default=16, help="hey processes, at concurrency / clients each"
    )
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument(
        "--max-load", type=float, default=1.5, help="wait for the 1-minute load average to fall below this"
    )
    parser.add_argument(
        "--max-foreign",
        type=float,
        default=0.3,
        help="wait until processes not ours use at most this many cores",
    )
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "scale.json")
    args = parser.parse_args()
    require_hey()
    signal.signal(signal.SIGTERM, interrupt)  # unwind like Ctrl-C: every deployment is stopped
    settings = args.settings.split(",")

    runs: dict[str, list[dict[str, float]]] = {s: [] for s in settings}
    routing: dict[str, float] = {}
    loads = []
    for rep in range(args.repeat):
        # The load average is checked before the first round only: ours keeps it up afterwards.
        loads.append(
            wait_for_quiet(max_load=args.max_load if rep == 0 else None, max_foreign_cores=args.max_foreign)
        )
        if not routing:  # timed on a quiet machine too
            routing = {
                s: routing_cost_us(
                    int(s.split("=")[1]), int(s.split("=")[1]) if s.startswith("models") else 1
                )
                for s in settings
            }
        for setting in settings[rep % len(settings) :] + settings[: rep % len(settings)]:
            row = measure(setting, requests=args.requests, concurrency=args.concurrency, clients=args.clients)
            runs[setting].append(row)
            print(
                f"  run {rep + 1} {setting:<11} {row['rps']:8.1f} req/s (direct {row['direct_rps']:7.1f})  "
                f"p50 {row['p50_ms']:6.2f} ms  CPU ms/req frontend {row['frontend_cpu_ms_per_request']:.3f} "
                f"workers {row['workers_cpu_ms_per_request']:.3f}  busy {row['machine_busy']:.0%}  "
                f"others' CPU {row['foreign_cores']:.2f}/{row['direct_foreign_cores']:.2f} cores",
                flush=True,
            )
    loads.append({"load_1m": round(os.getloadavg()[0], 2)})

    rows = []
    for setting in settings:
        kind, n = setting.split("=")
        med = {k: statistics.median(r[k] for r in runs[setting]) for k in runs[setting][0]}
        med["failed"] = sum(r["failed"] for r in runs[setting])
        rows.append(
            {
                "setting": setting,
                "workers": int(n),
                "models": int(n) if kind == "models" else 1,
                **med,
                "routing_us": routing[setting],
                "all_rps": [round(r["rps"], 1) for r in runs[setting]],
            }
        )
    base = next((r for r in rows if r["setting"] == "workers=2"), None)
    targets: dict[str, object] = {}
    if base:
        for r in rows:
            r["vs_2_workers"] = r["rps"] / base["rps"]
            # The control: the same pools without the frontend, under the same client shape.
            r["direct_vs_2_workers"] = r["direct_rps"] / base["direct_rps"]
        for setting in ("workers=16", "models=16"):
            r = next((x for x in rows if x["setting"] == setting), None)
            if r:
                targets[setting] = {
                    "value": r["vs_2_workers"],
                    "target": ">= 0.90",
                    "met": r["vs_2_workers"] >= 0.9,
                }
    targets["met"] = all(t["met"] for t in targets.values() if isinstance(t, dict))
    report = {
        "benchmark": "scale",
        "command": ".venv/bin/python bench/scale.py",
        "machine": machine_info(),
        "load": loads,
        "setup": {
            "engine": "hash",
            "concurrency": args.concurrency,
            "requests": args.requests,
            "repeat": args.repeat,
            "clients": args.clients,
            "load_generator": f"{args.clients} hey processes (keep-alive) at concurrency {args.concurrency // args.clients} "
            "each, pooled; to the frontend spread over the models, direct spread over the workers",
        },
        "rows": rows,
        "targets": targets,
    }
    print(
        f"\n{'setting':<11} {'req/s':>8} {'vs 2':>6} {'p50 ms':>7} {'front CPU':>10} {'workers CPU':>12} "
        f"{'sw/req':>7} {'routing us':>11} | {'direct req/s':>12} {'vs 2':>6} {'workers CPU':>12} {'sw/req':>7}"
    )
    for r in rows:
        print(
            f"{r['setting']:<11} {r['rps']:8.1f} {r.get('vs_2_workers', 0):6.2f} {r['p50_ms']:7.2f} "
            f"{r['frontend_cpu_ms_per_request']:10.3f} {r['workers_cpu_ms_per_request']:12.3f} "
            f"{r['worker_switches_per_request']:7.2f} {r['routing_us']:11.2f} | {r['direct_rps']:12.1f} "
            f"{r.get('direct_vs_2_workers', 0):6.2f} {r['direct_workers_cpu_ms_per_request']:12.3f} "
            f"{r['direct_worker_switches_per_request']:7.2f}"
        )
    print("(CPU in ms per request; sw/req: the workers' context switches per request)")
    for name, t in targets.items():
        if isinstance(t, dict):
            print(
                f"target {name} vs 2 workers: {t['value']:.2f} ({t['target']}) {'met' if t['met'] else 'MISSED'}"
            )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0 if targets["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
