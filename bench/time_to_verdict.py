"""Wall time from nothing to a verdict, cold: launch, readiness, burst and check, teardown.

Each scenario on each stack runs in a fresh Python process (cold imports included), with
the hash engine and with the tiny transformers model, and reports where the time went.

    .venv/bin/python bench/time_to_verdict.py [--repeat 3] [--engines hash,transformers] [--stacks embedded,dynamo,dynamo-etcd-3hosts]
    .venv/bin/python bench/time_to_verdict.py --quiet-only   # the quiet windows' cost alone

The quiet windows' cost per burst is measured on one warm deployment per stack: the
same-model burst with its quiet windows and without, in turns, on the same inputs.

The check's own sender against `hey`, in one run, through one frontend, on the same input:

    .venv/bin/python bench/time_to_verdict.py --sender [--sender-workers 8 --sender-requests 768 --sender-concurrency 32]

In turns on one warm deployment (the embedded frontend, hash workers): `hey`; the sender that every
burst uses (`asend_burst`) on hey's one body; the same sender on the check's own inputs (one per
request); and the same-model scenario's burst at that size. Per turn: requests a second, p50, and
the CPU seconds the sender's process (or hey) spent per request, which is what bounds it where the
frontend and workers are not the limit.

`dynamo-etcd-3hosts` is Dynamo on etcd with its workers on two other hosts (network
namespaces; as root): etcd, the namespaces and their teardown count in the wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from measure import add_load_options, machine_info, wait_for_quiet  # noqa: E402

from embedlab.jsonio import write_text_atomic  # noqa: E402

# Runs in a fresh interpreter, so import time counts as it does for a user.
CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from embedlab import ScenarioPlan
imported = time.perf_counter()
plan = ScenarioPlan(scenario=sys.argv[1], stack=sys.argv[2], engine=sys.argv[3], discovery=sys.argv[4], hosts=int(sys.argv[5]))
dep = plan.deployment()
dep.start()
ready = time.perf_counter()
result = plan.run_on(dep)
checked = time.perf_counter()
dep.stop()
stopped = time.perf_counter()
print(json.dumps({"passed": result.passed, "import": imported - t0, "launch_and_ready": ready - imported,
                  "burst_and_check": checked - ready, "teardown": stopped - checked, "total": stopped - t0,
                  "startup": dep.startup_seconds}))
"""


# A stack label -> (stack, discovery, hosts).
STACKS = {
    "embedded": ("embedded", "file", 1),
    "dynamo": ("dynamo", "file", 1),
    "dynamo-etcd-3hosts": ("dynamo", "etcd", 3),
}


def measure(scenario: str, label: str, engine: str) -> dict[str, float]:
    stack, discovery, hosts = STACKS[label]
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, scenario, stack, engine, discovery, str(hosts)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{scenario}/{stack}/{engine} failed:\n{proc.stderr[-3000:]}")
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    row["wall"] = wall  # includes the interpreter's own start
    return row


def quiet_window_cost(label: str, runs: int) -> dict[str, Any]:
    """Median wall time of one same-model burst and its check, with and without quiet windows."""
    from embedlab import Deployment, DeploymentSpec
    from embedlab.defaults import QUIET_WINDOW_S
    from embedlab.evidence.busy import required_requests
    from embedlab.evidence.clients import run_sync
    from embedlab.evidence.traffic import default_inputs
    from embedlab.scenarios.builtin.dispatch import SameModelParams
    from embedlab.scenarios.burst import BurstSpec, judge, run_burst

    # The scenario's own burst for two equal replicas (its default follows from the pool).
    requests = required_requests([1.0, 1.0]).requests

    stack, discovery, hosts = STACKS[label]
    spec = DeploymentSpec.same_model("embed-model", workers=2, stack=stack, discovery=discovery, hosts=hosts)
    times: dict[float, list[float]] = {QUIET_WINDOW_S: [], 0.0: []}
    verdicts: set[str] = set()
    with Deployment(spec) as dep:
        target = dep.target()
        for i in range(2 * runs):
            quiet = QUIET_WINDOW_S if i % 2 == 0 else 0.0
            burst = BurstSpec(
                name="same-model",
                model="embed-model",
                expected=frozenset({0, 1}),
                requests=requests,
                concurrency=SameModelParams.concurrency,
                inputs=default_inputs(requests),
                quiet_s=quiet,
            )
            started = time.perf_counter()
            verdict, _ = judge([run_sync(run_burst(target, burst))], exact_total=True)
            times[quiet].append(time.perf_counter() - started)
            verdicts.add(str(verdict))
    with_s, without_s = (statistics.median(times[q]) for q in (QUIET_WINDOW_S, 0.0))
    return {
        "stack": label,
        "runs": runs,
        "requests": requests,
        "window_s": QUIET_WINDOW_S,
        "with_windows_s": with_s,
        "without_windows_s": without_s,
        "cost_s": with_s - without_s,
        "verdicts": sorted(verdicts),
    }


SAME_INPUT = "the same input for both senders"


def sender_vs_hey(workers: int, requests: int, concurrency: int, turns: int) -> dict[str, Any]:
    """`hey` and the check's own sender in turns, on one frontend: rate, p50, CPU per request."""
    import resource

    from measure import hey

    from embedlab import Deployment, DeploymentSpec, ScenarioPlan
    from embedlab.evidence.clients import run_sync
    from embedlab.evidence.traffic import asend_burst, default_inputs

    model = "embed-model"
    body = json.dumps({"model": model, "input": SAME_INPUT}).encode()
    found: dict[str, list[dict[str, float]]] = {"hey": [], "sender, hey's body": [], "sender, own inputs": []}
    found["same-model burst"] = []
    # The transport every burst had before clients.LaneTransport: one httpx pool of `concurrency`
    # connections, whose bookkeeping grows with them (encode/httpcore#1035).
    found["sender, one shared pool"] = []
    spec = DeploymentSpec.same_model(model, workers=workers)
    with Deployment(spec) as dep:
        url = f"{dep.frontend_url}/v1/embeddings"

        async def burst_of(inputs: list[Any], shared_pool: bool) -> Any:
            if not shared_pool:
                return await asend_burst(
                    dep.frontend_url, model, requests, concurrency=concurrency, inputs=inputs
                )
            async with one_pool(concurrency) as http:
                return await asend_burst(
                    dep.frontend_url, model, requests, concurrency=concurrency, inputs=inputs, client=http
                )

        def sender(inputs: list[Any], *, shared_pool: bool = False) -> dict[str, float]:
            cpu = time.process_time()
            burst = run_sync(burst_of(inputs, shared_pool))
            spent = time.process_time() - cpu
            return {
                "rps": requests / burst.wall_seconds,
                "p50_ms": burst.latency_ms()["p50"],
                "failed": len(burst.failures),
                "cpu_ms_per_request": 1000 * spent / requests,
                "seconds": burst.wall_seconds,
            }

        sender([SAME_INPUT])  # connections and the frontend's first requests: not timed
        for _ in range(turns):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            h = hey(url, body, requests=requests, concurrency=concurrency)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
            found["hey"].append(
                {"rps": h.rps, "p50_ms": h.p50_ms, "failed": h.failed, "cpu_ms_per_request": 1000 * cpu / requests,
                 "seconds": h.seconds}
            )  # fmt: skip
            found["sender, hey's body"].append(sender([SAME_INPUT]))
            found["sender, own inputs"].append(sender(list(default_inputs(requests))))
            found["sender, one shared pool"].append(sender([SAME_INPUT], shared_pool=True))
            plan = ScenarioPlan(
                scenario="same-model", params={"requests": requests, "concurrency": concurrency}
            )
            result = plan.run_on(dep)
            traffic = result.bursts[0].traffic
            found["same-model burst"].append(
                {"rps": requests / traffic.wall_seconds, "p50_ms": traffic.latency_ms()["p50"],
                 "failed": len(traffic.failures), "seconds": traffic.wall_seconds,
                 "verdict_s": result.wall_seconds}
            )  # fmt: skip
    medians = {
        name: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for name, runs in found.items()
    }
    return {
        "workers": workers,
        "requests": requests,
        "concurrency": concurrency,
        "turns": turns,
        "medians": medians,
        "runs": found,
        "machine": machine_info(),
        "load_1m": round(os.getloadavg()[0], 2),
        "sender_share_of_hey": medians["sender, hey's body"]["rps"] / medians["hey"]["rps"],
        "lanes_over_shared_pool": medians["sender, hey's body"]["rps"]
        / medians["sender, one shared pool"]["rps"],
    }


def one_pool(connections: int) -> Any:
    """An async client on one httpx pool of `connections`."""
    import httpx

    from embedlab.evidence import clients

    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    return clients.async_client(
        timeout=60.0, transport=httpx.AsyncHTTPTransport(retries=0, limits=limits, verify=clients.tls())
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--engines", default="hash,transformers")
    parser.add_argument("--stacks", default="embedded,dynamo,dynamo-etcd-3hosts")
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "time_to_verdict.json")
    add_load_options(parser)
    parser.add_argument(
        "--quiet-runs", type=int, default=10, help="bursts each way for the quiet windows' cost"
    )
    parser.add_argument("--quiet-only", action="store_true", help="measure the quiet windows' cost alone")
    parser.add_argument("--sender", action="store_true", help="the check's own sender against hey, alone")
    parser.add_argument("--sender-workers", type=int, default=8)
    parser.add_argument("--sender-requests", type=int, default=768)
    parser.add_argument("--sender-concurrency", type=int, default=32)
    parser.add_argument("--sender-turns", type=int, default=3)
    args = parser.parse_args()
    if args.sender:
        # Not waiting for a quiet machine: both senders share whatever load there is, in turns.
        found = sender_vs_hey(
            args.sender_workers, args.sender_requests, args.sender_concurrency, args.sender_turns
        )
        for name, m in found["medians"].items():
            cpu = f", {m['cpu_ms_per_request']:.2f} ms CPU a request" if "cpu_ms_per_request" in m else ""
            print(
                f"{name:<20} {m['rps']:8.0f} req/s  p50 {m['p50_ms']:7.1f} ms  failed {m['failed']:.0f}{cpu}"
            )
        print(f"the sender on hey's body reaches {found['sender_share_of_hey']:.0%} of hey's rate")
        print(f"lanes against one shared pool, same body: {found['lanes_over_shared_pool']:.2f}x the rate")
        out = REPO / "bench" / "results" / "time_to_verdict_sender.json"
        write_text_atomic(out, json.dumps(found, indent=2) + "\n")
        return 0
    load = wait_for_quiet(
        max_load=args.max_load, max_foreign_cores=args.max_foreign
    )  # other people's tests on these cores would be timed too
    if "transformers" in args.engines:
        # Not the public API: the tiny models are built ahead, so the timing is the verdict's alone.
        from embedlab.engines.tiny import cached_tiny_model

        cached_tiny_model("bert"), cached_tiny_model("qwen3")  # building models is not part of a verdict
    quiet = []
    for label in args.stacks.split(","):
        row = quiet_window_cost(label, args.quiet_runs)
        quiet.append(row)
        print(
            f"quiet windows on {label}: {row['with_windows_s']:.3f} s a burst with, {row['without_windows_s']:.3f} s "
            f"without: +{row['cost_s']:.3f} s ({row['verdicts']})",
            flush=True,
        )
    if args.quiet_only:
        earlier = json.loads(args.json.read_text()) if args.json.is_file() else {}
        earlier.update(quiet_windows=quiet, quiet_windows_machine=machine_info())
        write_text_atomic(args.json, json.dumps(earlier, indent=2) + "\n")
        return 0
    rows = []
    print(
        f"{'scenario':<12} {'stack':<19} {'engine':<13} {'wall s':>7} {'import':>7} {'launch+ready':>13} {'burst+check':>12} {'teardown':>9}"
    )
    for engine in args.engines.split(","):
        for stack in args.stacks.split(","):
            for scenario in ("same-model", "multi-model"):
                runs = [measure(scenario, stack, engine) for _ in range(args.repeat)]
                med = {
                    k: statistics.median(r[k] for r in runs)
                    for k in ("wall", "import", "launch_and_ready", "burst_and_check", "teardown")
                }
                row = {
                    "scenario": scenario,
                    "stack": stack,
                    "engine": engine,
                    "runs": args.repeat,
                    "passed": all(r["passed"] for r in runs),
                    **med,
                }
                rows.append(row)
                print(
                    f"{scenario:<12} {stack:<19} {engine:<13} {med['wall']:7.2f} {med['import']:7.2f} {med['launch_and_ready']:13.2f} "
                    f"{med['burst_and_check']:12.2f} {med['teardown']:9.2f}",
                    flush=True,
                )
    # Rows not measured this time (another stack or engine) are kept from the last run.
    measured = {(r["scenario"], r["stack"], r["engine"]) for r in rows}
    if args.json.is_file():
        earlier = json.loads(args.json.read_text()).get("rows", [])
        rows = [r for r in earlier if (r["scenario"], r["stack"], r["engine"]) not in measured] + rows
    both = sum(r["wall"] for r in rows if r["stack"] == "embedded" and r["engine"] == "hash")
    print(f"\nboth hash scenarios on the embedded stack, one after the other: {both:.2f} s (target < 5 s)")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": "time_to_verdict",
        "command": ".venv/bin/python bench/time_to_verdict.py",
        "machine": machine_info(),
        "load": {"start": load, "end": {"load_1m": round(os.getloadavg()[0], 2)}},
        "rows": rows,
        "both_hash_embedded_s": both,
        "quiet_windows": quiet,
    }
    write_text_atomic(args.json, json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
