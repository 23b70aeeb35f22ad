"""Lease TTL against the time a SIGKILLed worker stays in dispatch, on Dynamo with etcd.

Runs the `lease-ttl-sweep` scenario (a fresh deployment per TTL, steady traffic at 20
requests/s, one worker SIGKILLed after 2 s) `--repeat` times, and writes each run's
points: the time from the kill until the frontend stopped listing the worker, and the
requests that failed meanwhile.

    .venv/bin/python bench/ttl_sweep.py [--repeat 3] [--hosts 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from measure import machine_info, wait_for_quiet  # noqa: E402

from embedlab import ScenarioPlan, run_scenario  # noqa: E402
from embedlab.jsonio import write_text_atomic  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--hosts", type=int, default=3, help="workers on other hosts (network namespaces; root)"
    )
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "ttl_sweep.json")
    args = parser.parse_args()
    load = wait_for_quiet(max_load=1.5, max_foreign_cores=0.3)
    runs = []
    started = time.monotonic()
    for run in range(args.repeat):
        result = run_scenario(
            ScenarioPlan(scenario="lease-ttl-sweep", stack="dynamo", discovery="etcd", hosts=args.hosts)
        )
        points = [
            {
                "ttl_s": p.lease_ttl_s,
                "out_of_dispatch_s": p.left_dispatch_after_s,
                "failed": p.failed_requests,
                "status_codes": p.status_codes,
            }
            for p in result.figures.points
        ]
        runs.append(points)
        print(
            f"run {run + 1}: "
            + "; ".join(
                f"TTL {p['ttl_s']:g} s: {p['out_of_dispatch_s']} s, {p['failed']} failed" for p in points
            ),
            flush=True,
        )
    ttls = [p["ttl_s"] for p in runs[0]]
    summary = []
    for k, ttl in enumerate(ttls):
        left = [r[k]["out_of_dispatch_s"] for r in runs if r[k]["out_of_dispatch_s"] is not None]
        summary.append(
            {
                "ttl_s": ttl,
                "out_of_dispatch_s_median": statistics.median(left) if left else None,
                "out_of_dispatch_s_range": [min(left), max(left)] if left else None,
                "failed_median": statistics.median(r[k]["failed"] for r in runs),
                "never_left": len(runs) - len(left),
            }
        )
        print(
            f"TTL {ttl:g} s: out of dispatch after {summary[-1]['out_of_dispatch_s_median']} s (median of {len(left)}), "
            f"{summary[-1]['failed_median']} failed (median)"
        )
    report = {
        "benchmark": "ttl_sweep",
        "command": f".venv/bin/python bench/ttl_sweep.py --repeat {args.repeat} --hosts {args.hosts}",
        "machine": machine_info(),
        "load": {"start": load, "end": {"load_1m": round(os.getloadavg()[0], 2)}},
        "hosts": args.hosts,
        "rate_per_s": 20,
        "runs": runs,
        "summary": summary,
        "wall_s": round(time.monotonic() - started, 1),
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.json, json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
