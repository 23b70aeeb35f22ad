"""`embedlab regress merge RUN_DIR... --out OUT`: one run made of the shards' run folders.

    run = merge_runs([shard1, shard2, shard3], out="outputs")
    run.complete, run.passed, run.problems, run.index_html

The merged run is a run like any other in OUT: `OUT/<run-id>-merged/` holds one index.html,
results.json and junit.xml, and each job's report, executed notebook, result and logs, copied
from its shard (or, with `link`, symbolic links to them). History compares it with the newest
complete run in OUT, merged or not, and the next run compares with it.

Refused, with one line and nothing written (`ShardMergeError`):

    a folder that is not a regress run, or a whole run rather than a shard
    shards of different matrices, commits or splits (N, or the durations they were balanced by)
    one shard given twice, or one job in two folders

Marked: the run is written, its status is "incomplete" (never a pass, not history), its index
and JUnit say which jobs did not run and why, and `problems` has one line for each:

    a shard that is missing, was interrupted, or is still running
    a job that its shard's results do not hold
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import ShardMergeError
from ..jsonio import load_json
from ..verdicts import RunStatus, Verdict
from ..wording import counted
from .run_report import RESULTS_JSON, ReportImage, notebook_figures
from .runfiles import RunFolder, history, new_run_dir, run_status, this_process, write_run

__all__ = ["MergedRun", "merge_runs", "summary"]

_FILES = ("report_html", "notebook_out", "result_json", "logs")  # a job's files, relative to its run


@dataclass(frozen=True, kw_only=True)
class MergedRun(RunFolder):
    """What `merge_runs` wrote: `results` is its results.json."""

    run_id: str
    run_dir: Path
    results: Mapping[str, Any]
    problems: tuple[str, ...]  # one line per missing, interrupted or running shard, or lost job

    @property
    def complete(self) -> bool:
        return self.results["status"] == RunStatus.COMPLETE

    @property
    def passed(self) -> bool:
        return bool(self.results["passed"])

    @property
    def failed(self) -> list[Mapping[str, Any]]:
        return [s for s in self.results["scenarios"] if not Verdict(s["verdict"]).ok]


@dataclass(frozen=True)
class _Part:
    path: Path
    results: Mapping[str, Any]

    @property
    def shard(self) -> Mapping[str, Any]:
        return self.results["shard"]

    @property
    def index(self) -> int:
        return int(self.shard["index"])

    @property
    def name(self) -> str:
        return f"shard {self.index} of {self.shard['count']} ({self.path})"


def merge_runs(
    run_dirs: Sequence[str | Path], *, out: str | Path, link: bool = False, command: str = ""
) -> MergedRun:
    """One run in a new folder under `out` from the shards in `run_dirs` (see the module's docstring).

    Raises `ShardMergeError` for shards that cannot be merged, before writing anything.
    """
    parts = [_read(Path(d)) for d in run_dirs]
    if not parts:
        raise ShardMergeError("nothing to merge: name the shards' run folders")
    _check_one_split(parts)
    _check_each_once(parts)
    first = parts[0]
    count, plan = int(first.shard["count"]), first.shard["plan"]
    present = {p.index: p for p in parts}
    found = {s["name"]: (s, p) for p in parts for s in p.results.get("scenarios", [])}

    problems, why = _problems(plan, count, present, found)
    status = RunStatus.INCOMPLETE if problems else RunStatus.COMPLETE
    out = Path(out)
    run_id, run_dir = new_run_dir(out, suffix="-merged")
    scenarios, figures = [], {}
    for job in plan:
        if job["name"] in found:
            scenario, part = found[job["name"]]
            scenarios.append(_bring(scenario, part.path, run_dir, link=link))
            figures[job["name"]] = _figures(run_dir, scenarios[-1])
    previous, passed_over = history(out, exclude=run_dir)
    starts = [float(p.results.get("started_ts", 0.0)) for p in parts]
    ends = [s + float(p.results.get("wall_seconds", 0.0)) for s, p in zip(starts, parts)]
    walls = [float(p.results.get("wall_seconds", 0.0)) for p in parts]
    results = {
        "run_id": run_id,
        "started_at": datetime.fromtimestamp(min(starts), UTC).isoformat(timespec="seconds"),
        "started_ts": min(starts),
        "wall_seconds": round(max(ends) - min(starts), 2),
        "matrix": first.results.get("matrix"),
        "command": command,
        "only": first.results.get("only", []),
        "matrix_jobs": first.results.get("matrix_jobs"),
        "status": status,
        "interrupted_by": None,
        "process": this_process(),
        "planned": len(plan),
        "unfinished": [
            {"name": j["name"], "notebook": j["notebook"], "slug": j["slug"], "why": why[j["name"]]}
            for j in plan
            if j["name"] in why
        ],
        "passed": status == RunStatus.COMPLETE and all(Verdict(s["verdict"]).ok for s in scenarios),
        "counts": {str(v): sum(s["verdict"] == v for s in scenarios) for v in Verdict},
        "previous_run": previous.parent.name if previous else None,
        "not_compared": passed_over,
        "commit": first.results.get("commit"),
        "matrix_hash": first.results.get("matrix_hash"),
        "shard": None,
        "merged": {
            "count": count,
            "split": first.shard.get("split"),
            "balanced_by": first.shard.get("balanced_by"),
            "problems": problems,
            "slowest_shard_s": round(max(walls), 2),
            "mean_shard_s": round(sum(walls) / len(walls), 2),
            "shards": [_part_row(present.get(i), i, plan) for i in range(1, count + 1)],
        },
        "durations": {s["name"]: s["seconds"] for s in scenarios},
        "scenarios": scenarios,
    }
    write_run(run_dir, results, previous=load_json(previous) if previous else None, figures=figures)
    return MergedRun(run_id=run_id, run_dir=run_dir, results=results, problems=tuple(problems))


def _read(path: Path) -> _Part:
    try:
        results = load_json(path / RESULTS_JSON)
    except (OSError, ValueError) as exc:
        raise ShardMergeError(
            f"{path} is not a regress run folder: cannot read its results.json ({exc.__class__.__name__})",
            runs=(path,),
        ) from None
    shard = results.get("shard") if isinstance(results, Mapping) else None
    if not isinstance(shard, Mapping) or not {"index", "count", "plan"} <= set(shard):
        raise ShardMergeError(
            f"{path} is not a shard: its results.json names no part of a matrix (run shards with --shard I/N)",
            runs=(path,),
        )
    return _Part(path=path, results=results)


def _check_one_split(parts: Sequence[_Part]) -> None:
    """Every part of one matrix, one commit and one split; else one line naming two that differ."""
    first = parts[0]
    for part in parts[1:]:
        pair = (first.path, part.path)
        a, b = first.results, part.results
        if a.get("matrix_hash") != b.get("matrix_hash"):
            raise ShardMergeError(
                f"shards of different matrices: {first.name} is of matrix {a.get('matrix_hash')} "
                f"({a.get('matrix')}), {part.name} of matrix {b.get('matrix_hash')} ({b.get('matrix')})",
                runs=pair,
            )
        if a.get("commit", "unknown") != b.get("commit", "unknown"):
            raise ShardMergeError(
                f"shards of different commits: {first.name} ran {a.get('commit')}, {part.name} ran {b.get('commit')}",
                runs=pair,
            )
        if (first.shard["count"], first.shard.get("split")) != (part.shard["count"], part.shard.get("split")):
            raise ShardMergeError(
                f"shards of different splits of one matrix: {first.name} balanced by "
                f"{first.shard.get('balanced_by')}, {part.name} by {part.shard.get('balanced_by')}; "
                "run every shard with the same N and the same --durations",
                runs=pair,
            )


def _check_each_once(parts: Sequence[_Part]) -> None:
    """No shard given twice, no job in two folders: which of the two would count is anyone's guess."""
    seen: dict[int, _Part] = {}
    for part in parts:
        if part.index in seen:
            raise ShardMergeError(
                f"shard {part.index} of {part.shard['count']} is given twice: {seen[part.index].path} and {part.path}",
                runs=(seen[part.index].path, part.path),
            )
        seen[part.index] = part
    owner: dict[str, _Part] = {}
    for part in parts:
        for scenario in part.results.get("scenarios", []):
            other = owner.setdefault(scenario["name"], part)
            if other is not part:
                raise ShardMergeError(
                    f"job {scenario['name']} is in two shards: {other.name} and {part.name}",
                    runs=(other.path, part.path),
                )


def _problems(
    plan: Sequence[Mapping[str, Any]],
    count: int,
    present: Mapping[int, _Part],
    found: Mapping[str, Any],
) -> tuple[list[str], dict[str, str]]:
    """One line per part that is missing or unfinished, and why each job that did not run did not."""
    problems: list[str] = []
    why: dict[str, str] = {}
    for index in range(1, count + 1):
        jobs = [j["name"] for j in plan if j["shard"] == index and j["name"] not in found]
        part = present.get(index)
        if part is None:
            reason = f"shard {index} of {count} is missing"
        else:
            status = run_status(part.results)
            if status == RunStatus.INTERRUPTED:
                by = part.results.get("interrupted_by")
                reason = f"{part.name} was interrupted{f' by {by}' if by else ''}"
            elif status == RunStatus.RUNNING:
                # Its process lives, or ran on another host: a CI runner killed there leaves this too.
                host = (part.results.get("process") or {}).get("host")
                reason = f"{part.name} is still running, or was killed on {host} before it could say so"
            elif jobs:
                reason = f"{part.name} does not hold these jobs in its results"
            else:
                continue
        problems.append(f"{reason}: not run: {', '.join(jobs) or 'none'}")
        why.update(dict.fromkeys(jobs, reason))
    return problems, why


def _part_row(part: _Part | None, index: int, plan: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    planned = sum(j["shard"] == index for j in plan)
    if part is None:
        return {"index": index, "status": "missing", "run_id": None, "planned": planned, "finished": 0}
    results = part.results
    return {
        "index": index,
        "status": run_status(results),
        "run_id": results.get("run_id"),
        "path": str(part.path.resolve()),
        "host": (results.get("process") or {}).get("host"),
        "wall_seconds": results.get("wall_seconds"),
        "planned": planned,
        "finished": len(results.get("scenarios", [])),
    }


def _bring(scenario: Mapping[str, Any], source: Path, run_dir: Path, *, link: bool) -> dict[str, Any]:
    """The job's files into the merged run, at the paths its shard gave them (copied or linked)."""
    brought = dict(scenario)
    for key in _FILES:
        rel = scenario.get(key)
        if not rel:
            continue
        inside = not Path(rel).is_absolute() and ".." not in Path(rel).parts
        src, dst = source / rel, run_dir / rel
        if not inside or not (src.exists() or src.is_symlink()):
            brought[key] = None  # the index links nothing that is not there
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        if link:
            dst.symlink_to(src.resolve(), target_is_directory=src.is_dir())
        elif src.is_dir():
            shutil.copytree(src, dst, symlinks=True, copy_function=_copy_regular, dirs_exist_ok=True)
        else:
            _copy_regular(src, dst)
    return brought


def _copy_regular(src: str | Path, dst: str | Path) -> None:
    """Files are copied; a socket or a pipe a server left in its log folder is not."""
    if os.path.isfile(src):
        shutil.copy2(src, dst)


def _figures(run_dir: Path, scenario: Mapping[str, Any]) -> list[ReportImage]:
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        if scenario.get("notebook_out"):
            return notebook_figures(run_dir / scenario["notebook_out"])
    return []


def summary(run: MergedRun) -> str:
    """The merge's line for a terminal: how many jobs, with which verdicts, of how many shards."""
    merged = run.results["merged"]
    counts = ", ".join(f"{n} {v}" for v, n in run.results["counts"].items() if n) or "nothing ran"
    return (
        f"{counted(len(run.results['scenarios']), 'notebook run')} of {run.results['planned']} "
        f"from {counted(sum(s['status'] != 'missing' for s in merged['shards']), 'shard')} of "
        f"{merged['count']}: {counts}; {run.results['status']}"
    )
