"""`embedlab watch`'s counters on simulated pools: false alarms per watch-hour, time to a fault.

Each simulated test is what the watch runs (embedlab.watch.judge: a BlockEngine fed every
block of its life, at the watch's defaults: 8 requests per model in 0.25 s windows, one
block every 1 s under the 16 req/s cap, a test living 300 s, a new one every 60 s), on a
2 x 2 pool with another client sending Poisson traffic over both models. A correct router's
false alarms: tests whose units ever rule it out, over their whole life; each test started
carries them, so alarms per watch-hour = that share x 60 tests an hour. A fault's detection:
a test that meets the fault after `--prefix` blocks of correct routing (0: a test started with
the fault; 30: the oldest a watch's newest test can be, a stagger of 60 s), blocks to its first
conviction. Counters only: the misplaced responses that name their worker (runner.py) find a
leak far sooner where the router sets the header.

    .venv/bin/python bench/watch_power.py [--tests 2000] [--background 4] [--alpha A]

Prints Markdown.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time

import numpy as np
from scipy import stats

from embedlab.evidence.busy.engine import BlockEngine
from embedlab.evidence.busy.schedule import Schedule
from embedlab.evidence.busy.sequential import orders
from embedlab.evidence.busy.simulate import Pool
from embedlab.watch import names

BLOCK_S = 2 * names.WINDOW_REQUESTS / names.MAX_RATE  # 1 s: two windows of 8 requests at 16 req/s
LIFE = int(names.HORIZON_S / BLOCK_S)


def run(
    tests: int, background: float, fault: str, prefix: int, blocks: int, seed: int, alpha: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per test: the block (after the prefix) of its first conviction, or -1; and of its first
    pass (every unit moved, the faults a pass rules out ruled out), or -1."""
    pool = Pool.multi_model(2, 2, fault="")
    faulty = Pool.multi_model(2, 2, fault=fault)
    served = pool.served
    schedule = Schedule.per_model(served, requests=names.WINDOW_REQUESTS, seed=0)
    doses = np.array([schedule.doses(m) for m in served])
    engine = BlockEngine(
        {m: schedule.doses(m) for m in served},
        pool.models,
        None,
        alpha=alpha,
        batch=(tests,),
        resolution="decisions",
    )
    even = pool.routing().mean(axis=0)
    rng = np.random.default_rng(seed)
    table = orders(2)
    first = np.full(tests, -1)
    passed = np.full(tests, -1)
    for b in range(prefix + blocks):
        routing = (faulty if fault and b >= prefix else pool).routing()
        observed = rng.integers(len(table), size=tests)
        sent = doses[:, table[observed]].transpose(1, 0, 2)
        deltas = np.zeros((tests, len(pool.models), 2))
        for t in range(2):
            for m in range(len(served)):
                deltas[:, :, t] += rng.multinomial(sent[:, m, t], routing[m])
            deltas[:, :, t] += rng.poisson(background * 0.25 * even, size=(tests, len(pool.models)))
        engine.add_block(deltas, sent.astype(float), observed)
        decision = engine.decide()
        convicted = decision.misfit.any(axis=-1)
        first[(first < 0) & convicted] = b - prefix + 1
        passed[(passed < 0) & decision.passed] = b - prefix + 1
    return first, passed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=2000)
    parser.add_argument(
        "--background", type=float, default=4.0, help="the other client's req/s over the pool"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--alpha",
        type=float,
        default=names.WATCH_TEST_ALPHA,
        help="a test's level (the watch's default: names.WATCH_TEST_ALPHA)",
    )
    args = parser.parse_args()
    started = time.time()
    print(
        f"`bench/watch_power.py --tests {args.tests} --background {args.background:g}` "
        f"({platform.machine()}, Python {platform.python_version()}): 2 x 2 pool, another client at "
        f"{args.background:g} req/s, the watch at its defaults ({BLOCK_S:g} s a block, tests of {LIFE} blocks)\n"
    )
    clean, ok = run(args.tests, args.background, "", 0, LIFE, args.seed, args.alpha)
    false = int((clean > 0).sum())
    hours = args.tests * names.STAGGER_S / 3600  # each test stands for a stagger of watching
    # Clopper-Pearson's one-sided 95 % upper bound on a test's false-alarm probability.
    upper = float(stats.beta.ppf(0.95, false + 1, args.tests - false))
    print(
        f"- correct router: {false} of {args.tests} tests ever ruled it out over their {LIFE} blocks "
        f"({100 * false / args.tests:.3g} %; 95 % upper bound {100 * upper:.3g} %, nominal at most "
        f"{100 * args.alpha:g} %): {false / hours:.3g} false alarms per watch-hour over {hours:.0f} simulated "
        f"watch-hours, at most {upper * 3600 / names.STAGGER_S:.2g} an hour (95 %); the bound before any "
        f"measurement {args.alpha * 3600 / names.STAGGER_S:.2g} an hour"
    )
    done = ok[ok > 0]
    print(
        f"- a test's first pass (every check ok): {100 * len(done) / len(ok):.1f} % within its life, "
        f"median {np.median(done) * BLOCK_S:.0f} s, p95 {np.quantile(done, 0.95) * BLOCK_S:.0f} s"
    )
    print(
        "\n| fault | meets a test after | caught within its life | blocks to conviction, median / p90 | seconds |"
    )
    print("|---|---|---|---|---|")
    for fault in ("leak:0.1", "leak:0.05", "leak:0.01", "skew:0.9", "idle"):
        for prefix in (0, int(names.STAGGER_S / BLOCK_S)):
            found, _ = run(
                max(200, args.tests // 10), args.background, fault, prefix, LIFE, args.seed + 7, args.alpha
            )
            hit = found[found > 0]
            share = len(hit) / len(found)
            blocks = f"{np.median(hit):.0f} / {np.quantile(hit, 0.9):.0f}" if len(hit) else "-"
            secs = (
                f"{np.median(hit) * BLOCK_S:.0f} / {np.quantile(hit, 0.9) * BLOCK_S:.0f}" if len(hit) else "-"
            )
            print(f"| `{fault}` | {prefix} blocks | {100 * share:.1f} % | {blocks} | {secs} |")
    print(f"\n({time.time() - started:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
