"""A matrix in parts: `embedlab regress --shard I/N` runs the I-th of N, on as many machines.

    shard = Shard.parse("2/3")
    parts = split(matrix.jobs, 3, durations=load_durations(path))   # the same on every machine
    parts[shard.index - 1]                                            # what shard 2 runs

The split is a function of its inputs alone, never of the machine: the jobs sorted by name,
then placed longest first (greedy longest-processing-time) on the part that has the least
work so far, ties to the lower part. A job's work is its duration as an earlier run recorded
it (`load_durations`: a results.json, or a durations file such as
`matrices/default.durations.json`, which `embedlab regress save-durations` writes); a job with
none counts as the mean of those that have one; with no durations at all every job counts 1,
which splits by count. Durations are read from a file the command names, or the one beside
the matrix, never from a machine's own earlier runs: two CI machines hold different ones.

Each shard's results.json says which part it is (`shard_record`): of how many, of which
matrix (`matrix_hash`, of the jobs themselves, so a reordered matrix or a moved checkout
is the same one), of which split (`split_hash`) and of which commit (`current_commit`), and
lists the whole plan with each job's part, so that `embedlab.reports.merge` can tell what a
missing part held.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..jsonio import load_json, write_json
from .matrix import Job
from .run_report import RESULTS_JSON

__all__ = [
    "COMMIT_ENV",
    "Shard",
    "current_commit",
    "default_durations_path",
    "durations_of",
    "load_durations",
    "matrix_hash",
    "save_durations",
    "shard_record",
    "split",
    "split_hash",
]

# Where CI says which commit it checked out (GitHub Actions, GitLab CI); else `git rev-parse HEAD`.
COMMIT_ENV = ("GITHUB_SHA", "CI_COMMIT_SHA")
UNKNOWN_COMMIT = "unknown"
_HASH_CHARS = 12


@dataclass(frozen=True)
class Shard:
    """The `index`-th (from 1) of `count` parts of a matrix."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if not 1 <= self.index <= self.count:
            raise ConfigError(f"shard {self.index}/{self.count}: I of I/N runs from 1 to N")

    @classmethod
    def parse(cls, text: str) -> Shard:
        """`"2/3"`: the second of three parts."""
        found = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
        if not found:
            raise ConfigError(f"shard {text!r}: expected I/N, e.g. 2/3 (the second of three parts)")
        return cls(int(found.group(1)), int(found.group(2)))

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def suffix(self) -> str:
        """What ends the shard's run id: `-shard2of3`."""
        return f"-shard{self.index}of{self.count}"


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:_HASH_CHARS]


def matrix_hash(jobs: Sequence[Job]) -> str:
    """The jobs' content (name, notebook file, parameters), in name order: the same for a matrix
    on every machine, whatever its path or the order of its sets."""
    return _digest(
        sorted(([job.name, job.notebook.name, job.params] for job in jobs), key=lambda item: str(item[0]))
    )


def split(
    jobs: Sequence[Job], count: int, *, durations: Mapping[str, float] | None = None
) -> tuple[tuple[Job, ...], ...]:
    """`jobs` in `count` parts, each job in exactly one, balanced by `durations` (seconds by job
    name) where there are any, else by count. Each part keeps the jobs' matrix order."""
    if count < 1:
        raise ConfigError(f"a matrix splits into 1 or more parts, not {count}")
    if count > len(jobs):
        raise ConfigError(
            f"{count} shards of {len(jobs)} jobs: every shard needs a job; use at most {len(jobs)} shards"
        )
    weight = job_weights([job.name for job in jobs], durations)
    loads = [0.0] * count
    part_of: dict[str, int] = {}
    for name in sorted(weight, key=lambda n: (-weight[n], n)):
        part = min(range(count), key=lambda k: (loads[k], k))
        part_of[name] = part
        loads[part] += weight[name]
    return tuple(tuple(job for job in jobs if part_of[job.name] == k) for k in range(count))


def job_weights(names: Sequence[str], durations: Mapping[str, float] | None) -> dict[str, float]:
    """Each job's expected seconds: its recorded duration, else the mean of those recorded; all
    1.0 where none is (a split by count)."""
    known = {
        n: float(durations[n]) for n in names if durations and isinstance(durations.get(n), (int, float))
    }
    if not known:
        return dict.fromkeys(names, 1.0)
    mean = sum(known[n] for n in sorted(known)) / len(known)
    return {n: known.get(n, mean) for n in names}


def split_hash(parts: Sequence[Sequence[Job]]) -> str:
    """Which job went to which part: shards of one split agree on it."""
    return _digest(sorted([job.name, number] for number, part in enumerate(parts, 1) for job in part))


def shard_record(
    shard: Shard, parts: Sequence[Sequence[Job]], *, all_jobs: Sequence[Job], balanced_by: str
) -> dict[str, Any]:
    """What a shard's results.json says of it: which part, of what, and the whole plan."""
    part_of = {job.name: number for number, part in enumerate(parts, 1) for job in part}
    return {
        "index": shard.index,
        "count": shard.count,
        "split": split_hash(parts),
        "balanced_by": balanced_by,
        "plan": [
            {
                "name": job.name,
                "notebook": job.label or job.notebook.stem,
                "slug": job.slug,
                "shard": part_of[job.name],
            }
            for job in all_jobs
        ],
    }


def current_commit(root: Path | None = None) -> str:
    """The commit under test: CI's own variable (`COMMIT_ENV`), else `git rev-parse HEAD` in the
    source checkout (`root`), else "unknown"."""
    for name in COMMIT_ENV:
        if os.environ.get(name):
            return os.environ[name].strip()
    root = root or Path(__file__).resolve().parents[2]
    try:
        proc = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN_COMMIT
    sha = proc.stdout.strip()
    return sha if proc.returncode == 0 and re.fullmatch(r"[0-9a-f]{7,64}", sha) else UNKNOWN_COMMIT


# -- durations ------------------------------------------------------------------------------------


def default_durations_path(matrix: Path) -> Path:
    """The durations file kept beside a matrix: `default.toml` -> `default.durations.json`."""
    return matrix.with_name(f"{matrix.stem}.durations.json")


def durations_of(results: Mapping[str, Any]) -> dict[str, float]:
    """Seconds by job name from a results.json (its `durations`, else its runs' `seconds`) or a
    durations file (`durations`)."""
    recorded = results.get("durations")
    if isinstance(recorded, Mapping):
        return {str(k): float(v) for k, v in recorded.items() if isinstance(v, (int, float))}
    return {
        str(s["name"]): float(s["seconds"])
        for s in results.get("scenarios") or []
        if isinstance(s, Mapping) and "name" in s and isinstance(s.get("seconds"), (int, float))
    }


def load_durations(path: Path) -> dict[str, float]:
    """`durations_of` a file: a run's results.json (or its folder), or a durations file."""
    path = path / RESULTS_JSON if path.is_dir() else path
    try:
        data = load_json(path)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read durations from {path}: {exc}") from exc
    if not isinstance(data, Mapping):
        raise ConfigError(f"durations file {path} holds no JSON object")
    found = durations_of(data)
    if not found:
        raise ConfigError(f"{path} records no durations (neither `durations` nor runs with `seconds`)")
    return found


def save_durations(runs: Sequence[Path], to: Path) -> dict[str, Any]:
    """Write `to`: each job's mean duration over the runs (folders or results.json files) that
    recorded one, for the next split. Returns what it wrote."""
    per_job: dict[str, list[float]] = {}
    sources = []
    for run in runs:
        for name, seconds in load_durations(run).items():
            per_job.setdefault(name, []).append(seconds)
        sources.append((run if run.is_dir() else run.parent).name)
    data = {
        "about": "seconds per job, for `embedlab regress --shard`'s split; `embedlab regress save-durations` writes it",
        "from_runs": sources,
        "durations": {name: round(sum(s) / len(s), 1) for name, s in sorted(per_job.items())},
    }
    write_json(to, data)
    return data
