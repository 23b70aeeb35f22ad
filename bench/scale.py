"""Does the embedded frontend keep its throughput as the pool grows?

Hash workers behind the embedded frontend: 2, 4, 8 and 16 workers of one model, and 16
models of one worker each. `--settings frontend=1,frontend=2,frontend=4` instead puts
`--frontend-workers` hash workers behind a frontend of 1, 2 and 4 routing processes
(`embedlab frontend --processes N`); there the target is 4 processes against 1, and
while the load runs, worker 0 is drained and resumed over and over, and the frontend's
own histogram says how long each table change took to reach every routing process. Load is `hey` at concurrency 32 (for 16 models: 16 `hey`s
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
import threading
import time
import timeit
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from measure import (  # noqa: E402
    ForeignCpu,
    HeyResult,
    add_load_options,
    group_cpu_seconds,
    hey_many,
    machine_info,
    machine_jiffies,
    require_hey,
    wait_for_quiet,
    worker_addresses,
)

from embedlab import Deployment, DeploymentSpec  # noqa: E402
from embedlab.jsonio import write_text_atomic  # noqa: E402
from embedlab.serving.frontend.dispatch import make_policy  # noqa: E402

# Not the public API: the frontend's own registry and policies, timed without HTTP around them.
from embedlab.serving.frontend.instances import InstanceTable  # noqa: E402

MODEL = "scale-model"
SETTINGS = ("workers=2", "workers=4", "workers=8", "workers=16", "models=16")
ENCODING = {"encoding": "float"}  # set from --encoding


def body(model: str) -> bytes:
    payload = {"model": model, "input": "hello world"}
    if ENCODING["encoding"] == "base64":
        payload["encoding_format"] = "base64"
    return json.dumps(payload).encode()


def spec_for(setting: str, *, frontend_workers: int = 16) -> DeploymentSpec:
    kind, n = setting.split("=")
    if kind == "workers":
        return DeploymentSpec.same_model(MODEL, workers=int(n), startup_timeout=180)
    if kind == "frontend":
        return DeploymentSpec.same_model(
            MODEL, workers=frontend_workers, startup_timeout=180, frontend_args=("--processes", n)
        )
    return DeploymentSpec.multi_model([f"{MODEL}-{i}" for i in range(int(n))], startup_timeout=180)


def propagation(frontend_url: str) -> dict[str, object]:
    """The frontend's own histogram of table changes reaching its routing processes."""
    text = httpx.get(f"{frontend_url}/metrics", timeout=10).text
    buckets: list[tuple[float, float]] = []
    total = count = 0.0
    for family in text_string_to_metric_families(text):
        if family.name != "embedlab_frontend_table_propagation_seconds":
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                buckets.append((float(sample.labels["le"]), sample.value))
            elif sample.name.endswith("_sum"):
                total = sample.value
            elif sample.name.endswith("_count"):
                count = sample.value
    buckets.sort()

    def quantile(q: float) -> float | None:
        for bound, cumulative in buckets:
            if count and cumulative >= q * count:
                return bound
        return None

    return {
        "acks": count,
        "mean_ms": 1000 * total / count if count else None,
        "p50_le_ms": None if quantile(0.5) is None else 1000 * quantile(0.5),  # type: ignore[operator]
        "p99_le_ms": None if quantile(0.99) is None else 1000 * quantile(0.99),  # type: ignore[operator]
        "max_le_ms": None if quantile(1.0) is None else 1000 * quantile(1.0),  # type: ignore[operator]
        "buckets": buckets,
    }


class DrainCycles(threading.Thread):
    """Drains and resumes worker 0 while the load runs: each call returns once every routing
    process has the change, so its wall time bounds the propagation as a caller sees it."""

    def __init__(self, dep: Deployment) -> None:
        super().__init__(daemon=True)
        self.dep = dep
        self.stop = threading.Event()
        self.drain_ms: list[float] = []
        self.resume_ms: list[float] = []

    def run(self) -> None:
        system = self.dep.system_urls[0]
        with httpx.Client(timeout=10) as client:
            while not self.stop.wait(0.2):
                for path, sink in (("/drain", self.drain_ms), ("/resume", self.resume_ms)):
                    t = time.perf_counter()
                    client.post(system + path).raise_for_status()
                    sink.append(1000 * (time.perf_counter() - t))


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


def measure(
    setting: str, *, requests: int, concurrency: int, clients: int, frontend_workers: int = 16
) -> dict[str, float]:
    """The frontend in front of the setting's workers, then (the control) the same workers direct.

    Both use the same client shape: `clients` `hey` processes at concurrency // clients each,
    to the frontend (spread over the models) or straight to the workers (spread over them).
    So the only difference between settings is the pool, and between the two runs the frontend.
    """
    with Deployment(spec_for(setting, frontend_workers=frontend_workers)) as dep:
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
        cycles = DrainCycles(dep) if setting.startswith("frontend=") and setting != "frontend=1" else None
        if cycles is not None:
            cycles.start()
        try:
            front = run_load(
                front_jobs,
                requests=requests,
                concurrency=concurrency,
                frontend_pgid=dep.frontend.pgid,  # type: ignore[union-attr]
                workers=workers,
                own=own,
            )
        finally:
            if cycles is not None:
                cycles.stop.set()
                cycles.join()
        if cycles is not None:
            front["propagation"] = {  # type: ignore[assignment]
                **propagation(dep.frontend_url),
                "drain_call_ms": cycles.drain_ms,
                "resume_call_ms": cycles.resume_ms,
            }
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


def pool_size(setting: str, frontend_workers: int) -> int:
    kind, n = setting.split("=")
    return frontend_workers if kind == "frontend" else int(n)


def models_of(setting: str) -> int:
    kind, n = setting.split("=")
    return int(n) if kind == "models" else 1


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
    add_load_options(parser)
    parser.add_argument(
        "--encoding",
        choices=["float", "base64"],
        default="float",
        help="the answers' encoding_format (base64: less JSON for every process to write and copy)",
    )
    parser.add_argument(
        "--frontend-workers", type=int, default=16, help="hash workers behind the frontend=N settings"
    )
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "scale.json")
    args = parser.parse_args()
    ENCODING["encoding"] = args.encoding
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
                s: routing_cost_us(pool_size(s, args.frontend_workers), models_of(s)) for s in settings
            }
        for setting in settings[rep % len(settings) :] + settings[: rep % len(settings)]:
            row = measure(
                setting,
                requests=args.requests,
                concurrency=args.concurrency,
                clients=args.clients,
                frontend_workers=args.frontend_workers,
            )
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
        med = {
            k: statistics.median(r[k] for r in runs[setting])
            for k, v in runs[setting][0].items()
            if isinstance(v, (int, float))
        }
        med["failed"] = sum(r["failed"] for r in runs[setting])
        row = {
            "setting": setting,
            "workers": pool_size(setting, args.frontend_workers),
            "models": models_of(setting),
            "frontend_processes": int(n) if kind == "frontend" else 1,
            **med,
            "routing_us": routing[setting],
            "all_rps": [round(r["rps"], 1) for r in runs[setting]],
        }
        if any("propagation" in r for r in runs[setting]):
            row["propagation"] = [r["propagation"] for r in runs[setting] if "propagation" in r]
        rows.append(row)
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
    one = next((r for r in rows if r["setting"] == "frontend=1"), None)
    for r in rows:
        if one and r["setting"].startswith("frontend="):
            r["vs_1_process"] = r["rps"] / one["rps"]
    four = next((r for r in rows if r["setting"] == "frontend=4"), None)
    if one and four:
        targets["frontend=4"] = {
            "value": four["vs_1_process"],
            "target": ">= 3.0",
            "met": four["vs_1_process"] >= 3.0,
        }
    targets["met"] = all(t["met"] for t in targets.values() if isinstance(t, dict))
    report = {
        "benchmark": "scale",
        "command": " ".join(["bench/scale.py", *sys.argv[1:]]),
        "machine": machine_info(),
        "load": loads,
        "setup": {
            "engine": "hash",
            "encoding_format": args.encoding,
            "frontend_workers": args.frontend_workers,
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
    for r in rows:
        for prop in r.get("propagation", []):
            print(
                f"{r['setting']}: table propagation over {prop['acks']:.0f} acks: mean {prop['mean_ms'] or 0:.2f} ms, "
                f"p99 <= {prop['p99_le_ms']} ms, max <= {prop['max_le_ms']} ms; drain calls "
                f"max {max(prop['drain_call_ms'], default=0):.1f} ms, resume calls max {max(prop['resume_call_ms'], default=0):.1f} ms"
            )
    for name, t in targets.items():
        if isinstance(t, dict):
            print(
                f"target {name} vs {'1 process' if name.startswith('frontend') else '2 workers'}: "
                f"{t['value']:.2f} ({t['target']}) {'met' if t['met'] else 'MISSED'}"
            )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.json, json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0 if targets["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
