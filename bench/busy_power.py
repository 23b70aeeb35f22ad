"""The busy-pool check on simulated pools: the table of docs/busy-method.md.

Another client sends 0.5x, 1x or 4x the check's rate, steady, bursty (1 s at 3x, 2 s silent)
or ramping (0 to 2x over the budget), through the same router; the check sends 40 req/s
in 0.25 s windows (the defaults) and stops at its first decision or its 60 s budget. Each
cell runs `--runs` simulated checks with the real decision code (embedlab.evidence.busy.engine).

    .venv/bin/python bench/busy_power.py [--runs 1000] [--quiet-sizes]

Prints Markdown: false alarms and passes of a correct router, detection of each fault at
every background, time to verdict (median / p95 simulated seconds), and the quiet-pool burst
sizes `required_requests` names for pools of 2 to 64 replicas.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time

from scipy import stats

from embedlab.evidence.busy.power import leak_power, required_requests
from embedlab.evidence.busy.simulate import Background, Pool, simulate
from embedlab.verdicts import Verdict

SHAPES = ("steady", "bursty", "ramp")
MULTIPLES = (0.5, 1.0, 4.0)
POOLS = {
    "same-model, 2 replicas": Pool.same_model(2),
    "same-model, 4 replicas": Pool.same_model(4),
    "multi-model, 2 models x 1": Pool.multi_model(2),
    "mixed, 2 models x 2": Pool.multi_model(2, 2),
}
FAULTS = {
    "same-model, 2 replicas": ("stick", "skew:0.9", "idle"),
    "same-model, 4 replicas": ("skew:0.9", "idle"),
    "multi-model, 2 models x 1": ("leak:0.1",),
    "mixed, 2 models x 2": ("leak:0.1", "stick", "skew:0.9"),
}


def _upper(k: int, n: int) -> float:
    return 1.0 if k == n else float(stats.beta.ppf(0.95, k + 1, n - k))


def _lower(k: int, n: int) -> float:
    return 0.0 if k == 0 else float(stats.beta.ppf(0.05, k, n - k + 1))


def _time(sim, verdict: Verdict | None) -> str:
    median, p95 = sim.seconds_to(verdict), sim.seconds_to(verdict, q=0.95)
    return "–" if median != median else f"{median:.1f} / {p95:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument(
        "--rate", type=float, default=40.0, help="the check's requests per second while it sends"
    )
    parser.add_argument("--pools", nargs="*", default=list(POOLS), help="which pools (default: all)")
    parser.add_argument("--quiet-sizes", action="store_true", help="also tabulate the quiet-pool burst sizes")
    args = parser.parse_args()
    started = time.time()
    backgrounds = [Background(shape, m) for shape in SHAPES for m in MULTIPLES]
    print(
        f"{args.runs} simulated checks per cell, {args.rate:g} req/s, 0.25 s windows, 60 s budget "
        f"(python {platform.python_version()}). Cells: false alarms of a correct router (FAILED) and its"
        " passes; each fault's detection (FAILED; none of the faulty checks passed unless said); time to"
        " that verdict, median / p95 simulated seconds.\n"
    )
    total_k = total_n = faulty_passed = 0
    for name in args.pools:
        pool = POOLS[name]
        clean = simulate(pool, backgrounds=backgrounds, runs=args.runs, seed=1, rate_per_s=args.rate)
        faults = {
            f: simulate(
                Pool(pool.models, pool.weights, f),
                backgrounds=backgrounds,
                runs=args.runs,
                seed=2,
                rate_per_s=args.rate,
            )
            for f in FAULTS[name]
        }
        print(f"### {name}\n")
        head = "| background | false alarms | passed | to PASSED |" + "".join(
            f" `{f}` caught | to FAILED |" for f in faults
        )
        print(head)
        print("|" + "---|" * (head.count("|") - 1))
        for i, background in enumerate(backgrounds):
            sim = clean[i]
            k = sim.count(Verdict.FAILED)
            total_k, total_n = total_k + k, total_n + sim.runs
            row = f"| {background.shape} {background.multiple:g}x | {k} | {100 * sim.rate(Verdict.PASSED):.1f} % | {_time(sim, Verdict.PASSED)} |"
            for sims in faults.values():
                bad = sims[i]
                faulty_passed += bad.count(Verdict.PASSED)
                passed = f" ({bad.count(Verdict.PASSED)} passed)" if bad.count(Verdict.PASSED) else ""
                row += f" {100 * bad.rate(Verdict.FAILED):.1f} %{passed} | {_time(bad, Verdict.FAILED)} |"
            print(row)
        print()
    print(
        f"All clean cells: {total_k} false alarms in {total_n} checks (95 % Clopper-Pearson upper bound "
        f"{100 * _upper(total_k, total_n):.3f} %). Faulty checks that passed: {faulty_passed}."
    )
    if args.quiet_sizes:
        print("\n### Quiet pool: the burst `required_requests` names (equal weights)\n")
        print(
            "| replicas | requests | a correct router leaves one still | idle caught | 0.9/0.1 skew caught |"
        )
        print("|---|---|---|---|---|")
        for k in (2, 3, 4, 8, 16, 32, 64):
            plan = required_requests([1] * k)
            print(
                f"| {k} | {plan.requests} | {plan.still:.2g} | {100 * plan.idle:.2f} % | {100 * plan.skew:.2f} % |"
            )
        print(f"\n{leak_power(10).sentence}; {leak_power(919).sentence}.")
    print(f"\n({time.time() - started:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
