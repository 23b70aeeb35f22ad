"""What a router costs: seven paths to two hash workers, measured side by side in one run.

    (a) direct   straight to one worker's request plane (its `address` in the frontend's /health)
    (b) embedlab through the embedded frontend
    (c) dynamo   through the real `python -m dynamo.frontend` (embedlab workers on the Dynamo runtime)
    (d) litellm  through the LiteLLM proxy, both workers under one model_name, simple-shuffle
    (e) smg      through smg 1.13 (sglang-router's successor), round_robin, logging at warn
    (f) haproxy  through Debian's HAProxy 2.6, roundrobin, routed by the body's model
    (g) nginx    through Debian's nginx 1.22, round-robin, one worker process

(e) to (g) are the `smg`, `haproxy` and `nginx` stacks, each with two workers of its own
(the same hash workers as the others').

Load comes from `hey` (one short input per request, keep-alive). At each concurrency the
paths take turns, in a rotated order per repeat, so that a slow minute on a shared
machine lands on every path alike; each figure is the median of the repeats. The
frontends' CPU time per request comes from /proc (utime + stime of the process group).

    make bench                                     # .venv with Dynamo, the routers' venvs, hey, haproxy, nginx
    .venv/bin/python bench/router_overhead.py      # writes bench/results/router_overhead.json
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import statistics
import sys
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from measure import (  # noqa: E402
    ForeignCpu,
    HeyResult,
    add_load_options,
    group_cpu_seconds,
    hey,
    machine_info,
    median_result,
    require_hey,
    wait_for_quiet,
    worker_addresses,
)

from embedlab import Deployment, DeploymentSpec, ManagedProcess  # noqa: E402

# Not the public API: the LiteLLM proxy runs beside the deployment, as a process this
# benchmark starts itself, on ports reserved the way the harness reserves its own.
from embedlab.cluster.ports import release_port, reserve_port  # noqa: E402
from embedlab.jsonio import write_text_atomic  # noqa: E402

MODEL = "bench-model"
BODY = json.dumps({"model": MODEL, "input": "hello world"}).encode()
LITELLM = REPO / ".routers" / "litellm" / "bin" / "litellm"
PATHS = ("direct", "embedlab", "dynamo", "litellm", "smg", "haproxy", "nginx")
# The stacks that put a router or balancer in front of their own two workers, and how each runs
# here: round-robin everywhere, and smg without its two log lines per request (LiteLLM's are
# off too, see start_litellm).
STACK_PATHS: dict[str, dict[str, object]] = {
    "smg": {"router_mode": "round_robin", "frontend_args": ("--log-level", "warn")},
    "haproxy": {},
    "nginx": {},
}
HOST = "127.0.0.1"


def litellm_config(worker_urls: list[str], master_key: str) -> str:
    # JSON is YAML: no YAML writer needed. simple-shuffle is LiteLLM's weighted random.
    deployments = [
        {
            "model_name": MODEL,
            "litellm_params": {"model": f"openai/{MODEL}", "api_base": f"{url}/v1", "api_key": "unused"},
        }
        for url in worker_urls
    ]
    config = {
        "model_list": deployments,
        "router_settings": {"routing_strategy": "simple-shuffle"},
        "general_settings": {"master_key": master_key},
        "litellm_settings": {"telemetry": False},
    }
    return json.dumps(config, indent=2)


def start_litellm(stack: ExitStack, run_dir: Path, worker_urls: list[str]) -> tuple[str, ManagedProcess, str]:
    if not LITELLM.exists():
        raise SystemExit(
            f"{LITELLM} is missing: run `make bench` first (it builds .routers/litellm with LiteLLM)"
        )
    master_key = f"sk-bench-{secrets.token_hex(8)}"
    config = run_dir / "litellm.yaml"
    config.write_text(litellm_config(worker_urls, master_key))
    port = reserve_port(HOST)
    stack.callback(release_port, port)
    env = {
        **os.environ,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # else it downloads a price list at every start
        "LITELLM_LOG": "ERROR",  # a log line per request would be measured too
        "LITELLM_TELEMETRY": "False",
        "NO_DOCS": "True",
    }
    argv = [str(LITELLM), "--config", str(config), "--host", HOST, "--port", str(port), "--num_workers", "1"]
    proc = ManagedProcess("litellm", argv, log_path=run_dir / "litellm.log", env=env, cwd=run_dir).start()
    stack.callback(proc.stop)
    url = f"http://{HOST}:{port}"
    headers = {"Authorization": f"Bearer {master_key}"}

    def ready() -> bool:
        # Ready means it routes: an embeddings call through it to a worker answers 200.
        return (
            httpx.post(
                f"{url}/v1/embeddings",
                content=BODY,
                headers={**headers, "Content-Type": "application/json"},
                timeout=10,
            ).status_code
            == 200
        )

    proc.wait_ready(ready, timeout=180, what="an embeddings request through it answered 200")
    return url, proc, master_key


def interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--paths", default=",".join(PATHS), help="a subset of " + ",".join(PATHS))
    add_load_options(parser)
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "router_overhead.json")
    args = parser.parse_args()
    paths = [p for p in args.paths.split(",") if p]
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    require_hey()
    # SIGTERM unwinds like Ctrl-C, so every process started below is stopped by its group.
    signal.signal(signal.SIGTERM, interrupt)

    with ExitStack() as stack:
        embedded = stack.enter_context(Deployment(DeploymentSpec.same_model(MODEL, workers=2)))
        targets: dict[str, tuple[str, list[str]]] = {}
        cpu_groups: dict[str, int] = {}
        own_pgids = [p.pgid for p in embedded.processes if p.pgid]
        if "direct" in paths:
            # The first registered worker's request plane.
            targets["direct"] = (worker_addresses(embedded.frontend_url)[MODEL][0] + "/v1/embeddings", [])
        if "embedlab" in paths:
            targets["embedlab"] = (embedded.frontend_url + "/v1/embeddings", [])
            cpu_groups["embedlab"] = embedded.frontend.pgid  # type: ignore[union-attr,assignment]
        if "dynamo" in paths:
            dynamo = stack.enter_context(
                Deployment(DeploymentSpec.same_model(MODEL, workers=2, stack="dynamo"))
            )
            targets["dynamo"] = (dynamo.frontend_url + "/v1/embeddings", [])
            cpu_groups["dynamo"] = dynamo.frontend.pgid  # type: ignore[union-attr,assignment]
            own_pgids += [p.pgid for p in dynamo.processes if p.pgid]
        for name, options in STACK_PATHS.items():
            if name in paths:
                deployment = stack.enter_context(
                    Deployment(DeploymentSpec.same_model(MODEL, workers=2, stack=name, **options))
                )
                targets[name] = (deployment.frontend_url + "/v1/embeddings", [])
                cpu_groups[name] = deployment.frontend.pgid  # type: ignore[union-attr,assignment]
                own_pgids += [p.pgid for p in deployment.processes if p.pgid]
        if "litellm" in paths:
            worker_urls = worker_addresses(embedded.frontend_url)[MODEL]
            url, proc, key = start_litellm(stack, embedded.run_dir, worker_urls)
            targets["litellm"] = (url + "/v1/embeddings", [f"Authorization: Bearer {key}"])
            cpu_groups["litellm"] = proc.pgid  # type: ignore[assignment]
            own_pgids.append(proc.pgid)  # type: ignore[arg-type]
        print(f"run directory (logs): {embedded.run_dir}", flush=True)

        # Warm every path once: connections, lazy imports, LiteLLM's first-call set-up.
        for url, headers in targets.values():
            hey(url, BODY, requests=200, concurrency=8, headers=headers)

        rows: list[dict[str, object]] = []
        loads: dict[str, dict[str, float]] = {}
        for concurrency in concurrencies:
            # The load average is checked before the first block only: ours keeps it up afterwards.
            first = concurrency == concurrencies[0]
            loads[f"c={concurrency}"] = wait_for_quiet(
                own_pgids, max_load=args.max_load if first else None, max_foreign_cores=args.max_foreign
            )
            runs: dict[str, list[HeyResult]] = {p: [] for p in targets}
            foreign: dict[str, list[float]] = {p: [] for p in targets}
            quiet_start: dict[str, list[bool]] = {p: [] for p in targets}
            cpu: dict[str, list[float]] = {p: [] for p in cpu_groups}
            order = list(targets)
            for rep in range(args.repeat):
                for name in order[rep % len(order) :] + order[: rep % len(order)]:
                    url, headers = targets[name]
                    # Each run, not just each block, starts on quiet cores (bounded: 2 minutes):
                    # someone's test suite starting mid-block would otherwise land on one path.
                    gate = wait_for_quiet(
                        own_pgids,
                        max_load=None,
                        max_foreign_cores=args.max_foreign,
                        poll_s=10.0,
                        max_wait_s=120.0,
                        window_s=2.0,
                    )
                    before = group_cpu_seconds(cpu_groups[name]) if name in cpu_groups else 0.0
                    meter = ForeignCpu(own_pgids)
                    result = hey(url, BODY, requests=args.requests, concurrency=concurrency, headers=headers)
                    foreign[name].append(meter.cores())
                    quiet_start[name].append(bool(gate["quiet"]))
                    if name in cpu_groups:
                        cpu[name].append(
                            (group_cpu_seconds(cpu_groups[name]) - before) * 1e3 / max(1, result.requests)
                        )
                    runs[name].append(result)
                    print(
                        f"  c={concurrency:<3} run {rep + 1} {name:<9} {result.rps:9.1f} req/s  p50 {result.p50_ms:7.2f} ms  "
                        f"p99 {result.p99_ms:7.2f} ms  failed {result.failed}  others' CPU {foreign[name][-1]:.2f} cores",
                        flush=True,
                    )
            for name in targets:
                row: dict[str, object] = {
                    "path": name,
                    "concurrency": concurrency,
                    **median_result(runs[name]),
                }
                if name in cpu:
                    row["cpu_ms_per_request"] = statistics.median(cpu[name])
                row["all_rps"] = [round(r.rps, 1) for r in runs[name]]
                # Cores that processes not ours used during each run: the noise on the figure.
                row["foreign_cores"] = [round(f, 2) for f in foreign[name]]
                row["started_quiet"] = quiet_start[name]
                rows.append(row)
        loads["end"] = {"load_1m": round(os.getloadavg()[0], 2)}

    report = build_report(rows, concurrencies, args, loads)
    print_table(report)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.json, json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {args.json.relative_to(REPO) if args.json.is_relative_to(REPO) else args.json}")
    return 0 if report["targets"].get("met", False) else 1  # type: ignore[union-attr]


def build_report(
    rows: list[dict[str, object]],
    concurrencies: list[int],
    args: argparse.Namespace,
    loads: dict[str, dict[str, float]],
) -> dict[str, object]:
    def get(path: str, c: int) -> dict[str, object] | None:
        return next((r for r in rows if r["path"] == path and r["concurrency"] == c), None)

    ratios = []
    for c in concurrencies:
        b = get("embedlab", c)
        entry: dict[str, object] = {"concurrency": c}
        for other, key in (("direct", "b_over_a"), ("dynamo", "b_over_c"), ("litellm", "b_over_d")):
            o = get(other, c)
            if b and o:
                entry[key] = float(b["rps"]) / float(o["rps"])  # type: ignore[arg-type]
        a = get("direct", c)
        if b and a:
            entry["p50_added_ms"] = float(b["p50_ms"]) - float(a["p50_ms"])  # type: ignore[arg-type]
        # Every path against direct, the same run: what putting it in front of a worker costs.
        for path in PATHS[1:]:
            o = get(path, c)
            if o and a:
                entry.setdefault("over_direct", {})[path] = float(o["rps"]) / float(a["rps"])  # type: ignore
                entry.setdefault("p50_added_over_direct_ms", {})[path] = float(o["p50_ms"]) - float(
                    a["p50_ms"]
                )  # type: ignore
        ratios.append(entry)
    targets: dict[str, object] = {}
    top, low = max(concurrencies), min(concurrencies)
    by_c = {r["concurrency"]: r for r in ratios}
    if "b_over_c" in by_c.get(top, {}):
        targets["b_over_c_at_top"] = {
            "value": by_c[top]["b_over_c"],
            "target": ">= 0.5",
            "met": by_c[top]["b_over_c"] >= 0.5,
        }
    if "b_over_d" in by_c.get(top, {}):
        targets["b_over_d_at_top"] = {
            "value": by_c[top]["b_over_d"],
            "target": ">= 10",
            "met": by_c[top]["b_over_d"] >= 10,
        }
    if "p50_added_ms" in by_c.get(low, {}):
        targets["p50_added_ms_at_low"] = {
            "value": by_c[low]["p50_added_ms"],
            "target": "< 1 ms",
            "met": by_c[low]["p50_added_ms"] < 1,
        }
    targets["met"] = all(t["met"] for t in targets.values() if isinstance(t, dict))
    return {
        "benchmark": "router_overhead",
        "command": " ".join([".venv/bin/python", "bench/router_overhead.py", *sys.argv[1:]]),
        "machine": machine_info(),
        "load": loads,
        "setup": {
            "workers": 2,
            "engine": "hash",
            "requests": args.requests,
            "repeat": args.repeat,
            "body": BODY.decode(),
            "load_generator": "hey (keep-alive)",
            "concurrency": concurrencies,
        },
        "rows": rows,
        "ratios": ratios,
        "targets": targets,
    }


def print_table(report: dict[str, object]) -> None:
    rows = report["rows"]  # type: ignore[assignment]
    print(
        f"\n{'path':<10} {'c':>3} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'CPU ms/req':>11} {'failed':>7}"
    )
    for r in rows:  # type: ignore[attr-defined]
        cpu = f"{r['cpu_ms_per_request']:11.3f}" if "cpu_ms_per_request" in r else f"{'':>11}"
        print(
            f"{r['path']:<10} {r['concurrency']:>3} {r['rps']:9.1f} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f} {cpu} {r['failed']:>7}"
        )
    print(f"\n{'c':>3} {'b/a':>6} {'b/c':>6} {'b/d':>7} {'p50 added ms':>13}")
    fmt: Callable[[dict[str, object], str, str], str] = lambda d, k, f: format(d[k], f) if k in d else "-"  # noqa: E731
    for r in report["ratios"]:  # type: ignore[attr-defined]
        print(
            f"{r['concurrency']:>3} {fmt(r, 'b_over_a', '6.2f'):>6} {fmt(r, 'b_over_c', '6.2f'):>6} "
            f"{fmt(r, 'b_over_d', '7.1f'):>7} {fmt(r, 'p50_added_ms', '13.2f'):>13}"
        )
    print(
        f"\n{'path':<10} "
        + " ".join(f"{'c=' + str(r['concurrency']) + ' /direct':>14}" for r in report["ratios"])
    )  # type: ignore[attr-defined]
    for path in PATHS[1:]:
        cells = [r.get("over_direct", {}).get(path) for r in report["ratios"]]  # type: ignore[attr-defined]
        if any(c is not None for c in cells):
            print(f"{path:<10} " + " ".join(f"{c:14.2f}" if c is not None else f"{'-':>14}" for c in cells))
    print()
    for name, t in report["targets"].items():  # type: ignore[attr-defined]
        if isinstance(t, dict):
            print(f"target {name}: {t['value']:.2f} ({t['target']}) {'met' if t['met'] else 'MISSED'}")


if __name__ == "__main__":
    sys.exit(main())
