"""How even `embedlab regress --shard`'s parts are: split by recorded durations against split by count.

Reads the job durations a run recorded (a results.json, a run folder, or a durations file),
splits the jobs into N parts both ways (`embedlab.reports.shards.split`, with and without the
durations), and prints each split's slowest part against the mean part, in the recorded
seconds: 1.00 is perfectly even, and the slowest part is the sharded run's wall time. `--widen
K` stands in for a wider matrix: K copies of every job, each copy's duration scaled by a fixed
factor from 0.8 to 1.2 (the same numbers on every run of this script).

    .venv/bin/python bench/shard_balance.py embedlab/reports/matrices/default.durations.json [--widen 4]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from embedlab.reports.matrix import Job
from embedlab.reports.shards import load_durations, split


def spread(durations: dict[str, float], count: int, *, by_time: bool) -> tuple[float, float]:
    """(slowest part, mean part) in seconds, for the split by durations or by count."""
    jobs = [Job(notebook=Path(f"{name}.ipynb"), slug="x", params={}, label=name) for name in durations]
    seconds = {job.name: durations[job.label] for job in jobs}
    parts = split(jobs, count, durations=seconds if by_time else None)
    loads = [sum(seconds[job.name] for job in part) for part in parts]
    return max(loads), sum(loads) / len(loads)


def widened(durations: dict[str, float], copies: int) -> dict[str, float]:
    factors = [0.8 + 0.4 * ((7 * i) % 11) / 10 for i in range(copies * len(durations))]
    return {
        f"{name}#{copy}": seconds * factors[copy * len(durations) + i]
        for copy in range(copies)
        for i, (name, seconds) in enumerate(sorted(durations.items()))
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("durations", type=Path, help="a results.json, a run folder or a durations file")
    parser.add_argument("--widen", type=int, default=1, help="copies of each job (a wider matrix)")
    parser.add_argument("--shards", type=int, nargs="+", default=[2, 3, 4, 6])
    args = parser.parse_args()
    durations = load_durations(args.durations)
    if args.widen > 1:
        durations = widened(durations, args.widen)
    total = sum(durations.values())
    print(f"{len(durations)} jobs, {total:.0f} s in all, longest {max(durations.values()):.0f} s")
    print(
        "| N | by durations: slowest / mean | by count: slowest / mean | slowest part, durations vs count |"
    )
    print("|---|---|---|---|")
    for count in args.shards:
        if count > len(durations):
            continue
        time_max, mean = spread(durations, count, by_time=True)
        count_max, _ = spread(durations, count, by_time=False)
        print(
            f"| {count} | {time_max:.0f} s / {mean:.0f} s = {time_max / mean:.2f} "
            f"| {count_max:.0f} s / {mean:.0f} s = {count_max / mean:.2f} | {time_max / count_max:.2f}x |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
