"""`embedlab watch` on a real pool for a long while: false alarms per hour, time to ok, its cost.

Launches a 2 x 2 pool of hash workers behind the embedded frontend (optionally with a fault,
e.g. `--fault leak:0.001@600s`), another client (`hey`, one per model at `--other-rate` req/s),
and runs the watch in this process at its defaults for `--minutes`. Prints one Markdown line:
alarms and their times, when every check first turned ok, the pool's and the watch's own rates,
and this process's CPU seconds and peak memory (the watch is all it runs). Several side by
side, or in turn, add up to the hours docs/verification.md asks for.

    .venv/bin/python bench/watch_soak.py [--minutes 30] [--fault SPEC] [--other-rate 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from embedlab import Deployment, DeploymentSpec
from embedlab.watch.names import OK
from embedlab.watch.runner import Watch, WatchConfig

MODELS = ["model-a", "model-b"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--fault", default="")
    parser.add_argument("--other-rate", type=float, default=2.0)
    parser.add_argument(
        "--record", type=Path, help="save every kept block (.npz) and print each unit's pooled share"
    )
    args = parser.parse_args()
    hey = shutil.which("hey")
    if hey is None:
        print("needs hey (apt-get install hey)", file=sys.stderr)
        return 2
    spec = DeploymentSpec.pool(
        MODELS, replicas=2, frontend_args=("--fault", args.fault) if args.fault else ()
    )
    with tempfile.TemporaryDirectory() as tmp, Deployment(spec, run_dir=Path(tmp) / "run") as dep:
        others = []
        try:
            for model in MODELS:
                body = json.dumps({"model": model, "input": "someone else's request"})
                bounded = str(int(args.other_rate * args.minutes * 60 + 100))
                others.append(
                    subprocess.Popen(
                        [hey, "-n", bounded, "-c", "1", "-q", str(args.other_rate), "-m", "POST",
                         "-T", "application/json", "-d", body, f"{dep.frontend_url}/v1/embeddings"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                    )
                )  # fmt: skip
            watch = Watch(dep.target(), WatchConfig(duration_s=args.minutes * 60))
            blocks = _recording(watch) if args.record else None
            cpu0 = resource.getrusage(resource.RUSAGE_SELF)
            asyncio.run(watch.run())
            cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        finally:
            for proc in others:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=10)
    alarms = [t for t in watch.transitions if t.alarm]
    first_ok = {}
    for t in watch.transitions:
        if t.new == OK:
            first_ok.setdefault(str(t.key), t.at)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    hours = watch.now / 3600
    print(
        f"- {args.minutes:g} min, fault {args.fault or 'none'}, other client {args.other_rate:g} req/s per model: "
        f"{len(alarms)} alarms ({len(alarms) / hours:.2g} an hour) at "
        f"{[f'{t.at:.0f} s {t.key}' for t in alarms]}; every check first ok by "
        f"{max(first_ok.values()) if len(first_ok) == len(watch.pool.keys) else float('nan'):.0f} s; "
        f"own {sum(watch.requests.values()) / watch.now:.2f} req/s, pool {watch.pool_rate.per_s():.1f} req/s; "
        f"blocks {watch.blocks}; CPU {cpu:.0f} s ({100 * cpu / watch.now:.1f} % of a core), "
        f"peak RSS {cpu1.ru_maxrss / 1024:.0f} MiB; events {watch.event_counts}"
    )
    if blocks is not None:
        np.savez(args.record, **{k: np.array(v) for k, v in blocks.items()})
        print(_pooled(watch, blocks))
    return 0


def _recording(watch: Watch) -> dict[str, list]:
    """Every block the judge takes, as it takes it."""
    blocks: dict[str, list] = {"deltas": [], "sent": [], "observed": [], "at": []}
    add = watch.judge.add_block

    def recorded(deltas, sent, observed, *, now):
        for name, value in zip(blocks, (deltas, sent, observed, now)):
            blocks[name].append(np.asarray(value))
        return add(deltas, sent, observed, now=now)

    watch.judge.add_block = recorded
    return blocks


def _pooled(watch: Watch, blocks: dict[str, list]) -> str:
    """Each unit's share pooled over every block (the randomization estimator: sum of the
    contrast times the counts over the sum of the contrast times the doses), against what a
    correct router gives, in standard errors. A bias that no single test can see, over hours."""
    engine = watch.judge._engine()
    deltas, sent = np.array(blocks["deltas"]), np.array(blocks["sent"])
    weight = engine._contrast[:, np.array(blocks["observed"])]  # units, blocks, arms
    counts = np.einsum("uw,bwt->ubt", engine._member, deltas)
    doses = np.einsum("um,bmt->ubt", engine._dose, sent)
    a, b = (weight * counts).sum(-1), (weight * doses).sum(-1)
    lines = [f"pooled over {len(deltas)} blocks:"]
    for u, unit in enumerate(engine.units):
        theta = a[u].sum() / b[u].sum()
        se = np.sqrt(((a[u] - theta * b[u]) ** 2).sum()) / b[u].sum()
        lines.append(
            f"  {unit.name} ({unit.model}): {theta:.4f} (se {se:.4f}), expected {unit.expected:.4f}, "
            f"z {(theta - unit.expected) / se:+.2f}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
