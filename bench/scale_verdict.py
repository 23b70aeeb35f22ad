"""Time to verdict and scrape time against pool size, start-up excluded; each router's split over 16 replicas.

    .venv/bin/python bench/scale_verdict.py [--sizes 2,8,32,64] [--pools embedded,dynamo,dynamo-etcd,dynamo-etcd-4hosts]
        [--requests 768] [--repeat 3] [--split-stacks ...] [--no-split] [--mixed]

Part 1 (`rows`): one model x N hash workers per deployment. The deployments of one phase are
started one after the other and then kept up together (8 with 64, then 2 with 32), so that
the sizes compared take turns, in a rotated order, under the same load. Each verdict runs on
an already-started deployment, as `ScenarioPlan(scenario="same-model", ...).run_on(dep)`
does it: the quiet window, a snapshot of every worker, the burst, a snapshot, the closing
window, the judgement. Every size sends the same number of requests: 768 by default, the
smallest multiple of 64 at which a correct router leaves some one of 64 equal workers still
less often than the fairness alpha (0.001), so at every size the verdict asserts that every
worker moved. The check's own default burst (40 requests, chosen for its power against a
skewed split of two workers) is timed beside it. Scrape time is one concurrent snapshot of
every worker (`metrics.ascrape_all`), on connections kept alive as a verdict keeps them
(median of 9), and once on fresh ones. RSS: every worker process embedlab started, its
frontend, and this process (the harness that runs the checks), from /proc/<pid>/status.

Part 2 (`split16`): each router stack with 16 hash workers of one model, at its default
policy and at its round-robin policy (where it has one), 640 requests; the chi-square
p-value of the split against uniform.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from measure import machine_info, wait_for_quiet  # noqa: E402

from embedlab import Deployment, ScenarioPlan  # noqa: E402
from embedlab.cluster.hosts import can_make_namespaces  # noqa: E402
from embedlab.cluster.stack_registry import stack_class  # noqa: E402
from embedlab.errors import ConfigError, EmbedlabError  # noqa: E402
from embedlab.evidence.clients import scrape_client  # noqa: E402
from embedlab.evidence.counters import fairness_p_value  # noqa: E402
from embedlab.evidence.metrics import ascrape_all  # noqa: E402
from embedlab.jsonio import write_text_atomic  # noqa: E402

# A pool label -> the plan fields that make it.
POOLS: dict[str, dict[str, Any]] = {
    "embedded": {"stack": "embedded"},
    "dynamo": {"stack": "dynamo", "discovery": "file"},
    "dynamo-etcd": {"stack": "dynamo", "discovery": "etcd"},
    "dynamo-etcd-4hosts": {"stack": "dynamo", "discovery": "etcd", "hosts": 4},
}
SPLIT_STACKS = ("embedded", "dynamo", "litellm", "vllm-router", "sglang-router", "smg", "haproxy", "nginx")
MIB_PER_WORKER = 130  # a Dynamo worker's RSS with margin: a phase starts only where memory holds it
SCRAPES = 9


def rss_mib(pid: int | None, field: str = "VmRSS") -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return None


def mem_available_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return float("inf")


def plan_for(pool: str, workers: int, **params: Any) -> ScenarioPlan:
    return ScenarioPlan(scenario="same-model", workers=workers, params=params, **POOLS[pool])


async def scrape_times(dep: Deployment) -> tuple[float, float]:
    """(seconds of one snapshot on fresh connections, median on kept-alive ones) of every worker."""
    urls, metric = dep.system_urls, dep.target().metric
    async with scrape_client() as client:
        started = time.perf_counter()
        await ascrape_all(urls, metric=metric, client=client)
        cold = time.perf_counter() - started
        warm = []
        for _ in range(SCRAPES):
            started = time.perf_counter()
            await ascrape_all(urls, metric=metric, client=client)
            warm.append(time.perf_counter() - started)
    return cold, statistics.median(warm)


def verdict(plan: ScenarioPlan, dep: Deployment) -> dict[str, Any]:
    started = time.perf_counter()
    result = plan.run_on(dep)
    wall = time.perf_counter() - started
    burst = result.bursts[0]
    return {
        "s": wall,
        "passed": result.passed,
        "burst_s": burst.traffic.wall_seconds,
        "moved": len(burst.check.moved) if burst.check else 0,
        "reasons": result.reasons[:2],
    }


def pool_rss(dep: Deployment) -> dict[str, float | None]:
    workers = [r for r in (rss_mib(w.pid) for w in dep.workers) if r is not None]
    return {
        "worker_rss_mib_median": round(statistics.median(workers), 1) if workers else None,
        "worker_rss_mib_max": round(max(workers), 1) if workers else None,
        "pool_rss_mib": round(sum(workers), 1),
        "frontend_rss_mib": rss_mib(dep.frontend.pid if dep.frontend else None),
    }


def run_phase(pool: str, sizes: list[int], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Start a deployment of each size, then time verdicts and scrapes on them in turns."""
    rows: dict[int, dict[str, Any]] = {}
    deps: dict[int, Deployment] = {}
    with contextlib.ExitStack() as stack:
        for n in sizes:
            row: dict[str, Any] = {"pool": pool, "workers": n}
            rows[n] = row
            try:
                plan = plan_for(pool, n, requests=args.requests)
            except ConfigError as exc:  # the stack refuses it here (Dynamo's inotify limit, hosts)
                row["skipped"] = str(exc)
                continue
            if n * MIB_PER_WORKER > mem_available_mib() - 2048:
                row["skipped"] = (
                    f"{mem_available_mib():.0f} MiB available, {n} workers need about {n * MIB_PER_WORKER}"
                )
                continue
            dep = plan.deployment()
            started = time.perf_counter()
            try:
                stack.enter_context(dep)
            except EmbedlabError as exc:
                row["skipped"] = f"did not start: {' '.join(str(exc).split())[:300]}"
                continue
            row["startup_s"] = time.perf_counter() - started
            row.update(pool_rss(dep))
            deps[n] = dep
            stack.callback(_teardown, row, dep)  # timed, last in first out
            print(f"  {pool}: {n} workers up in {row['startup_s']:.1f} s", flush=True)
        if not deps:
            return list(rows.values())
        own = [p.pgid for d in deps.values() for p in d.processes if p.pgid is not None]
        load = wait_for_quiet(
            own, max_load=None, max_foreign_cores=args.max_foreign, max_wait_s=args.max_wait
        )
        runs: dict[int, list[dict[str, Any]]] = {n: [] for n in deps}
        for r in range(args.repeat):
            order = list(deps)[r % len(deps) :] + list(deps)[: r % len(deps)]
            for n in order:
                dep = deps[n]
                fixed = verdict(plan_for(pool, n, requests=args.requests), dep)
                default = verdict(plan_for(pool, n), dep)
                cold, warm = asyncio.run(scrape_times(dep))
                runs[n].append({"fixed": fixed, "default": default, "scrape_cold_s": cold, "scrape_s": warm})
        for n, found in runs.items():
            med = statistics.median
            rows[n].update(
                {
                    "verdict_s": med(x["fixed"]["s"] for x in found),
                    "verdict_runs_s": [round(x["fixed"]["s"], 3) for x in found],
                    "burst_s": med(x["fixed"]["burst_s"] for x in found),
                    "passed": all(x["fixed"]["passed"] for x in found),
                    "moved_min": min(x["fixed"]["moved"] for x in found),
                    "reasons": [r for x in found for r in x["fixed"]["reasons"]][:2],
                    "verdict_default_s": med(x["default"]["s"] for x in found),
                    "default_passed": all(x["default"]["passed"] for x in found),
                    "scrape_s": med(x["scrape_s"] for x in found),
                    "scrape_cold_s": med(x["scrape_cold_s"] for x in found),
                    "load": load,
                }
            )
        for n in deps:
            print_row(rows[n])
        harness = {"rss_mib": rss_mib(os.getpid()), "peak_rss_mib": rss_mib(os.getpid(), "VmHWM")}
        for n in deps:
            rows[n]["harness_rss_mib"] = harness["rss_mib"]
    return list(rows.values())


def _teardown(row: dict[str, Any], dep: Deployment) -> None:
    started = time.perf_counter()
    dep.stop()
    row["teardown_s"] = time.perf_counter() - started


def print_row(r: dict[str, Any]) -> None:
    print(
        f"  {r['pool']:<19} {r['workers']:>3} workers: verdict {r['verdict_s']:6.2f} s "
        f"({'passed' if r['passed'] else 'FAILED'}, burst {r['burst_s']:.2f} s), default burst "
        f"{r['verdict_default_s']:5.2f} s, scrape {r['scrape_s'] * 1000:6.1f} ms (fresh {r['scrape_cold_s'] * 1000:6.1f}), "
        f"worker RSS {r['worker_rss_mib_median']:.0f} MiB",
        flush=True,
    )


def ratios(rows: list[dict[str, Any]], small: int, large: int) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for pool in dict.fromkeys(r["pool"] for r in rows):
        by = {r["workers"]: r for r in rows if r["pool"] == pool and "verdict_s" in r}
        if small in by and large in by:
            v = by[large]["verdict_s"] / by[small]["verdict_s"]
            found[pool] = {
                "verdict": round(v, 3),
                "verdict_default": round(by[large]["verdict_default_s"] / by[small]["verdict_default_s"], 3),
                "scrape": round(by[large]["scrape_s"] / by[small]["scrape_s"], 3),
                "met": v <= 2.0,
            }
    return found


def round_robin_policy(stack: str) -> str | None:
    cls = stack_class(stack)
    return next((p for p in cls.policies if p.replace("-", "").replace("_", "") == "roundrobin"), None)


def split16(stacks: list[str], *, requests: int) -> list[dict[str, Any]]:
    """Each stack's split of `requests` over 16 workers of one model, at its default and at round-robin."""
    out: list[dict[str, Any]] = []
    for stack in stacks:
        cls = stack_class(stack)
        rr = round_robin_policy(stack)
        default = cls.default_policy
        venv = cls().venv_dir()
        if venv is not None and not venv.exists():
            out.append({"stack": stack, "absent": f"not installed: {venv} (make routers)"})
            continue
        modes: list[tuple[str | None, str]] = [(None, "default")]
        if rr is not None and rr != default:
            modes.append((rr, "round-robin"))
        for mode, role in modes:
            row: dict[str, Any] = {
                "stack": stack,
                "role": role,
                "policy": mode or default or "none given (its own default)",
                "is_round_robin": (mode or default) == rr,
            }
            try:
                plan = ScenarioPlan(
                    scenario="same-model",
                    stack=stack,
                    workers=16,
                    router_mode=mode,
                    params={"requests": requests},
                )
                with plan.deployment() as dep:
                    result = plan.run_on(dep)
            except EmbedlabError as exc:
                row["error"] = " ".join(str(exc).split())[:300]
                out.append(row)
                continue
            deltas = [r.delta for r in result.bursts[0].check.rows] if result.bursts[0].check else []
            row.update(
                {
                    "requests": requests,
                    "deltas": deltas,
                    "p_value": fairness_p_value(deltas, [1.0] * len(deltas)),
                    "verdict": str(result.verdict),
                    "judged": str(cls().split_for(mode)),
                }
            )
            out.append(row)
            print(
                f"  {stack:<14} {row['policy']:<16} p={row['p_value']:.3g} {row['verdict']:<9} "
                f"{'/'.join(f'{d:.0f}' for d in deltas)}",
                flush=True,
            )
        if rr is None:
            out.append(
                {
                    "stack": stack,
                    "role": "round-robin",
                    "absent": f"no round-robin policy ({', '.join(cls.policies)})",
                }
            )
    return out


def mixed(pools: list[str]) -> list[dict[str, Any]]:
    """The mixed scenario (interleaved send orders, judged per model) on 8 models x 8 replicas."""
    out = []
    models = tuple(f"model-{i}" for i in range(8))
    for pool in pools:
        row: dict[str, Any] = {"pool": pool, "models": 8, "replicas": 8}
        try:
            plan = ScenarioPlan(scenario="mixed", models=models, workers=8, **POOLS[pool])
            with plan.deployment() as dep:
                started = time.perf_counter()
                result = plan.run_on(dep)
                row.update({"verdict_s": time.perf_counter() - started, "passed": result.passed})
        except EmbedlabError as exc:
            row["skipped"] = " ".join(str(exc).split())[:300]
        out.append(row)
        print(f"  mixed 8x8 on {pool}: {row}", flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2,8,32,64")
    parser.add_argument("--phases", default="8,64/2,32", help="sizes kept up together, phase by phase")
    parser.add_argument("--pools", default="embedded,dynamo,dynamo-etcd,dynamo-etcd-4hosts")
    parser.add_argument(
        "--requests", type=int, default=768, help="requests per verdict, the same at every size"
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--split-stacks", default=",".join(SPLIT_STACKS))
    parser.add_argument("--split-requests", type=int, default=640)
    parser.add_argument("--no-split", action="store_true")
    parser.add_argument(
        "--mixed", action="store_true", help="also the mixed scenario on 8 models x 8 replicas"
    )
    parser.add_argument(
        "--max-foreign", type=float, default=0.5, help="wait until others use at most this many cores"
    )
    parser.add_argument("--max-wait", type=float, default=60.0, help="seconds to wait for that, at most")
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "scale_verdict.json")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    phases = [[int(s) for s in p.split(",") if int(s) in sizes] for p in args.phases.split("/")]
    phases += [[s] for s in sizes if not any(s in p for p in phases)]
    t0 = time.monotonic()
    rows: list[dict[str, Any]] = []
    for pool in args.pools.split(","):
        if POOLS[pool].get("hosts", 1) > 1 and not can_make_namespaces():
            rows += [
                {"pool": pool, "workers": n, "skipped": "needs root for network namespaces"} for n in sizes
            ]
            continue
        print(f"{pool}:", flush=True)
        for phase in phases:
            rows += run_phase(pool, [n for n in phase if n], args)
    rows.sort(key=lambda r: (list(POOLS).index(r["pool"]), r["workers"]))
    found = ratios(rows, 8, 64)
    for pool, r in found.items():
        print(
            f"{pool}: verdict at 64 / at 8 = {r['verdict']:.2f} (target <= 2: {'met' if r['met'] else 'MISSED'}), scrape {r['scrape']:.2f}"
        )
    split = [] if args.no_split else split16(args.split_stacks.split(","), requests=args.split_requests)
    mixed_rows = mixed(["embedded", "dynamo-etcd"]) if args.mixed else []
    report = {
        "benchmark": "scale_verdict",
        "command": ".venv/bin/python " + " ".join(["bench/scale_verdict.py", *sys.argv[1:]]),
        "machine": machine_info(),
        "setup": {
            "sizes": sizes,
            "phases": phases,
            "requests": args.requests,
            "default_requests": 40,
            "repeat": args.repeat,
            "scrapes": SCRAPES,
            "split_requests": args.split_requests,
        },
        "rows": rows,
        "ratios_64_over_8": found,
        "split16": split,
        "mixed": mixed_rows,
        "harness": {"rss_mib": rss_mib(os.getpid()), "peak_rss_mib": rss_mib(os.getpid(), "VmHWM")},
        "wall_s": round(time.monotonic() - t0, 1),
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.json, json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.json} in {report['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
