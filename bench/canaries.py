"""Do Dynamo's canary health checks move the counters a dispatch check reads? Measured on idle workers.

Launches the dynamo stack with hash workers twice, canaries on and (the control) off,
leaves each idle for `--idle` seconds between two scrapes of every worker's system port,
and reports, per worker: the canaries it answered (`embedlab_canaries_total`) and the delta
of every `dynamo_*` series Dynamo exports there over the same window. `--requests` real
requests after the window show which of those series count real traffic, so a zero in
the window is a zero and not a dead series.

    .venv/bin/python bench/canaries.py [--idle 12] [--workers 2] [--requests 10] [--no-control]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from embedlab import Deployment, DeploymentSpec, send_burst
from embedlab.defaults import CANARY_METRIC, CANARY_WAIT_S, METRIC
from embedlab.evidence.clients import client
from embedlab.evidence.metrics import metrics_url
from embedlab.jsonio import write_text_atomic

REPO = Path(__file__).resolve().parents[1]
PREFIX = "dynamo_"
# Moves with the clock alone, canary or not; a histogram's buckets repeat its _count.
SKIPPED = ("dynamo_component_uptime_seconds", "_bucket", "_created")


def series(text: str) -> dict[str, float]:
    """`name{labels}` -> value for every dynamo_* sample and the canary counter."""
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            wanted = sample.name.startswith(PREFIX) or sample.name == CANARY_METRIC
            if not wanted or any(s in sample.name for s in SKIPPED):
                continue
            # Which worker it is says itself by index; labels that name the run only add noise.
            labels = {k: v for k, v in sample.labels.items() if k not in ("worker_id", "dynamo_namespace")}
            shown = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            found[f"{sample.name}{{{shown}}}"] = float(sample.value)
    return found


def scrape_all(urls: list[str]) -> list[dict[str, float]]:
    with client(timeout=5.0) as http:
        return [series(http.get(metrics_url(url)).text) for url in urls]


def deltas(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: after.get(name, 0.0) - value for name, value in before.items()}


def measure(*, canaries: bool, workers: int, idle_s: float, requests: int) -> dict[str, object]:
    spec = DeploymentSpec.same_model("canary-m", workers=workers, stack="dynamo", canaries=canaries)
    with Deployment(spec) as dep:
        urls = dep.system_urls
        before, start = scrape_all(urls), time.monotonic()
        time.sleep(idle_s)  # the measurement itself: a worker left idle this long
        after, window = scrape_all(urls), time.monotonic() - start
        sent = send_burst(dep.frontend_url, "canary-m", requests, concurrency=1)
        live = scrape_all(urls)
    rows = []
    for i in range(workers):
        idle = deltas(before[i], after[i])
        real = deltas(after[i], live[i])
        answered = sum(v for k, v in idle.items() if k.startswith(CANARY_METRIC))
        rows.append(
            {
                "worker": i,
                "canaries": answered,
                "canaries_per_s": round(answered / window, 3),
                "idle_deltas": {k: v for k, v in idle.items() if not k.startswith(CANARY_METRIC)},
                "real_request_deltas": {k: v for k, v in real.items() if not k.startswith(CANARY_METRIC)},
            }
        )
    return {
        "canaries": canaries,
        "idle_window_s": round(window, 2),
        "real_requests_sent": sent.n,
        "real_requests_ok": sent.ok,
        "workers": rows,
    }


def report(run: dict[str, Any]) -> None:
    print(
        f"canaries {'on' if run['canaries'] else 'off'}: {run['idle_window_s']} s idle, "
        f"then {run['real_requests_sent']} real requests"
    )
    for row in run["workers"]:
        idle = {k: v for k, v in row["idle_deltas"].items() if v}
        real = sum(v for k, v in row["real_request_deltas"].items() if k.startswith(METRIC))
        live = sum(1 for v in row["real_request_deltas"].values() if v)
        print(
            f"  worker {row['worker']}: {row['canaries']:g} canaries ({row['canaries_per_s']}/s); "
            f"series that moved while idle: {idle or 'none'} of {len(row['idle_deltas'])}; "
            f"real requests: {METRIC} +{real:g}, {live} series moved"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=float, default=12.0, help="seconds each deployment stays idle")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--requests", type=int, default=10, help="real requests after the idle window")
    parser.add_argument("--no-control", action="store_true", help="skip the run with canaries off")
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "canaries.json")
    args = parser.parse_args()
    started = time.monotonic()
    sizes = dict(workers=args.workers, idle_s=args.idle, requests=args.requests)
    runs = [measure(canaries=True, **sizes)]
    if not args.no_control:
        runs.append(measure(canaries=False, **sizes))
    for run in runs:
        report(run)
    command = f".venv/bin/python bench/canaries.py --idle {args.idle:g} --workers {args.workers} --requests {args.requests}"
    result = {
        "benchmark": "canaries",
        "command": command + (" --no-control" if args.no_control else ""),
        "canary_wait_s": CANARY_WAIT_S,
        "load_1m": round(os.getloadavg()[0], 2),
        "runs": runs,
        "wall_s": round(time.monotonic() - started, 1),
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.json, json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
