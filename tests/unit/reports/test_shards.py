"""`--shard I/N` and `regress merge`, on run folders written here by the real writer (`RunFiles`)
from fabricated outcomes: the split, the shard's record, and each way a merge is refused or marked.
Pure file logic: no kernel, no notebook runs."""

from __future__ import annotations

import json
import random
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_notebook

from embedlab import ConfigError, ShardMergeError
from embedlab.reports.matrix import Job
from embedlab.reports.merge import merge_runs
from embedlab.reports.regress import Outcome
from embedlab.reports.runfiles import RunFiles, history, new_run_dir
from embedlab.reports.shards import (
    Shard,
    job_weights,
    load_durations,
    matrix_hash,
    save_durations,
    shard_record,
    split,
)
from embedlab.verdicts import RunStatus, Verdict

VERDICTS = {"a": "passed", "b": "reported", "c": "failed", "d": "passed", "e": "passed"}
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def jobs_of(verdicts: dict[str, str] = VERDICTS) -> tuple[Job, ...]:
    return tuple(
        Job(notebook=Path("/m/quick.ipynb"), slug=slug, params={"verdict": v}, label="quick")
        for slug, v in verdicts.items()
    )


def outcome(job: Job, run_dir: Path, seconds: float = 1.5) -> Outcome:
    """What `run_job` leaves for one job: its notebook, report, result and a log."""
    verdict = Verdict(job.params["verdict"])
    notebook_out = run_dir / f"{job.name}.ipynb"
    nbformat.write(new_notebook(), notebook_out)
    html = run_dir / f"{job.name}.html"
    html.write_text(f"<html>{job.name}</html>")
    result_json = run_dir / "results" / f"{job.name}.json"
    result_json.parent.mkdir(parents=True, exist_ok=True)
    result = {"verdict": str(verdict), "reasons": [] if verdict == "passed" else [f"said {verdict}"]}
    result_json.write_text(json.dumps(result))
    logs = run_dir / "logs" / job.name
    logs.mkdir(parents=True)
    (logs / "frontend.log").write_text("up\n")
    return Outcome(
        job=job,
        verdict=verdict,
        seconds=seconds,
        notebook_out=notebook_out,
        html=html,
        result_json=result_json,
        logs=logs,
        result=result,
    )


def write_run(
    out: Path,
    jobs: Sequence[Job],
    *,
    shard: Shard | None = None,
    parts: Sequence[Sequence[Job]] = (),
    commit: str = COMMIT,
    finished: int | None = None,
    status: RunStatus = RunStatus.COMPLETE,
    interrupted_by: str | None = None,
    balanced_by: str = "the job count (no durations recorded)",
) -> Path:
    """A run folder as `regress` writes it: the whole of `jobs`, or the `shard` of `parts`."""
    mine = parts[shard.index - 1] if shard else jobs
    run_id, run_dir = new_run_dir(out, suffix=shard.suffix if shard else "")
    run = RunFiles(
        run_id=run_id,
        run_dir=run_dir,
        matrix="m.toml",
        jobs=mine,
        previous=None,
        not_compared=[],
        matrix_hash=matrix_hash(jobs),
        commit=commit,
        shard=shard_record(shard, parts, all_jobs=jobs, balanced_by=balanced_by) if shard else None,
    )
    for job in mine[:finished]:
        run.finished(outcome(job, run_dir))
    run.write(status, interrupted_by=interrupted_by)
    return run_dir


def shards(out: Path, jobs: Sequence[Job] = jobs_of(), count: int = 3, **kw: object) -> list[Path]:
    parts = split(jobs, count)
    return [write_run(out, jobs, shard=Shard(i, count), parts=parts, **kw) for i in range(1, count + 1)]  # type: ignore[arg-type]


def results(run_dir: Path) -> dict[str, object]:
    return json.loads((run_dir / "results.json").read_text())


def junit_cases(run_dir: Path) -> dict[str, str]:
    """testcase -> its outcome in the JUnit file: passed, failure, error or skipped (its message)."""
    suite = ET.parse(run_dir / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    found = {}
    for case in suite.iter("testcase"):
        kinds = [c for c in case if c.tag in ("failure", "error", "skipped")]
        found[f"{case.get('classname')}:{case.get('name')}"] = (
            f"{kinds[0].tag}: {kinds[0].get('message')}" if kinds else "passed"
        )
    return found


# -- the split ------------------------------------------------------------------------------------


def test_a_shard_is_i_of_n() -> None:
    assert Shard.parse("2/3") == Shard(2, 3) and str(Shard(2, 3)) == "2/3"
    assert Shard(2, 3).suffix == "-shard2of3"
    for bad in ("0/3", "4/3", "two/3", "2", "1/0"):
        with pytest.raises(ConfigError, match="shard"):
            Shard.parse(bad)


def test_every_job_is_in_exactly_one_part_and_the_split_ignores_the_matrix_order() -> None:
    jobs = jobs_of({f"j{i:02}": "passed" for i in range(11)})
    durations = {job.name: float(1 + (7 * i) % 13) for i, job in enumerate(jobs)}
    for given in (None, durations):
        parts = split(jobs, 3, durations=given)
        names = [job.name for part in parts for job in part]
        assert sorted(names) == sorted(job.name for job in jobs) and len(names) == len(set(names))
        shuffled = list(jobs)
        random.Random(7).shuffle(shuffled)
        again = split(shuffled, 3, durations=given)
        assert [{j.name for j in p} for p in again] == [{j.name for j in p} for p in parts]
        # Each part keeps the order the jobs were given in.
        assert all(list(p) == [j for j in jobs if j in p] for p in parts)


def test_by_count_where_nothing_is_recorded_else_longest_first_onto_the_least_loaded_part() -> None:
    jobs = jobs_of({f"j{i}": "passed" for i in range(7)})
    assert sorted(len(p) for p in split(jobs, 3)) == [2, 2, 3]
    # By count the long jobs pile up in one part; by durations every part does 50 s.
    seconds = [40.0, 30.0, 30.0, 20.0, 10.0, 10.0, 10.0]
    durations = {job.name: s for job, s in zip(jobs, seconds)}
    by_time = split(jobs, 3, durations=durations)
    loads = sorted(sum(durations[j.name] for j in p) for p in by_time)
    assert loads == [50.0, 50.0, 50.0]
    by_count = split(jobs, 3)
    assert max(sum(durations[j.name] for j in p) for p in by_count) > 50.0
    # A job with no recorded duration counts as the mean of those recorded.
    assert job_weights(["x", "y", "z"], {"x": 10.0, "y": 20.0}) == {"x": 10.0, "y": 20.0, "z": 15.0}
    with pytest.raises(ConfigError, match="every shard needs a job"):
        split(jobs, 8)


def test_the_matrix_hash_is_of_the_jobs_not_their_order_or_path() -> None:
    jobs = jobs_of()
    moved = tuple(
        Job(notebook=Path("/elsewhere/quick.ipynb"), slug=j.slug, params=j.params, label=j.label)
        for j in jobs
    )
    assert matrix_hash(jobs) == matrix_hash(tuple(reversed(moved)))
    changed = jobs_of({**VERDICTS, "a": "failed"})
    assert matrix_hash(changed) != matrix_hash(jobs)


def test_durations_come_from_a_results_json_or_a_durations_file(tmp_path: Path) -> None:
    run = write_run(tmp_path / "out", jobs_of())
    recorded = results(run)["durations"]
    assert recorded == {job.name: 1.5 for job in jobs_of()}, "every run records each job's seconds"
    assert load_durations(run) == recorded == load_durations(run / "results.json")
    saved = save_durations([run], tmp_path / "m.durations.json")
    assert load_durations(tmp_path / "m.durations.json") == saved["durations"] == recorded
    (tmp_path / "empty.json").write_text("{}")
    with pytest.raises(ConfigError, match="records no durations"):
        load_durations(tmp_path / "empty.json")


# -- the merge ------------------------------------------------------------------------------------


def test_three_shards_merge_into_one_run_equal_to_a_whole_one(tmp_path: Path) -> None:
    out = tmp_path / "out"
    whole = write_run(out, jobs_of())
    parts = shards(tmp_path / "shards")
    record = results(parts[1])["shard"]
    assert (record["index"], record["count"]) == (2, 3) and parts[1].name.endswith("-shard2of3")
    assert results(parts[1])["commit"] == COMMIT

    merged = merge_runs(list(reversed(parts)), out=out, command="embedlab regress merge ...")
    assert merged.complete and not merged.passed and merged.problems == ()
    got, want = results(merged.run_dir), results(whole)
    key = [(s["name"], s["verdict"]) for s in want["scenarios"]]
    assert [(s["name"], s["verdict"]) for s in got["scenarios"]] == key, (
        "every job once, in the matrix's order"
    )
    assert got["status"] == "complete" and got["counts"] == want["counts"] and got["unfinished"] == []
    assert got["durations"] == want["durations"] and got["matrix_hash"] == want["matrix_hash"]
    assert junit_cases(merged.run_dir) == junit_cases(whole)
    page = merged.index_html.read_text()
    assert "merged from 3 shards of 3" in page and "FAILED" in page
    for href in re.findall(r'href="([^"#]+)"', page):
        assert (merged.run_dir / href).exists(), href
    assert (merged.run_dir / "logs" / "quick--a" / "frontend.log").read_text() == "up\n", "copied"
    # History: the merged run is compared with the whole run before it, and the next run with it;
    # a shard on its own is neither.
    assert got["previous_run"] == whole.name and f"Changes since run <code>{whole.name}</code>" in page
    for part in parts:
        (tmp_path / "shards" / part.name).rename(out / part.name)
    assert history(out) == (merged.results_json, [])


def test_linked_instead_of_copied(tmp_path: Path) -> None:
    merged = merge_runs(shards(tmp_path / "shards"), out=tmp_path / "out", link=True)
    logs = merged.run_dir / "logs" / "quick--a"
    assert logs.is_symlink() and (logs / "frontend.log").read_text() == "up\n"


def test_a_missing_shard_makes_an_incomplete_run_that_names_what_did_not_run(tmp_path: Path) -> None:
    first, second, third = shards(tmp_path / "shards")
    missing = [j["name"] for j in results(second)["shard"]["plan"] if j["shard"] == 2]
    merged = merge_runs([first, third], out=tmp_path / "out")
    assert not merged.complete and not merged.passed
    assert merged.problems == (f"shard 2 of 3 is missing: not run: {', '.join(missing)}",)
    got = results(merged.run_dir)
    assert got["status"] == "incomplete" and got["planned"] == 5
    assert [j["name"] for j in got["unfinished"]] == missing
    page = merged.index_html.read_text()
    assert "INCOMPLETE &middot; 3 OF 5 FINISHED" in page and "merged from 2 shards of 3" in page
    assert f'<p class="meta flag">{merged.problems[0]}</p>' in page
    assert '<span class="verdict missing">MISSING</span>' in page
    cases = junit_cases(merged.run_dir)
    assert [v for v in cases.values() if v.startswith("skipped")] == [
        "skipped: not run: shard 2 of 3 is missing"
    ] * 2
    # Not history: the next run compares with the last complete one.
    assert history(tmp_path / "out") == (None, [merged.run_id])


def test_an_interrupted_shard_is_marked_and_keeps_what_finished(tmp_path: Path) -> None:
    jobs = jobs_of()
    parts = split(jobs, 2)
    done = write_run(tmp_path / "s", jobs, shard=Shard(1, 2), parts=parts)
    stopped = write_run(
        tmp_path / "s",
        jobs,
        shard=Shard(2, 2),
        parts=parts,
        finished=1,
        status=RunStatus.INTERRUPTED,
        interrupted_by="SIGTERM",
    )
    merged = merge_runs([done, stopped], out=tmp_path / "out")
    (line,) = merged.problems
    lost = parts[1][1].name
    assert line == f"shard 2 of 2 ({stopped}) was interrupted by SIGTERM: not run: {lost}"
    got = results(merged.run_dir)
    assert got["status"] == "incomplete" and len(got["scenarios"]) == 4 and got["passed"] is False
    assert [j["name"] for j in got["unfinished"]] == [lost]


def test_a_shard_that_still_says_running_on_another_host_is_marked(tmp_path: Path) -> None:
    """A CI runner killed hard leaves "running" in a results.json from a machine merge cannot ask."""
    first, second = shards(tmp_path / "s", count=2)
    data = results(second)
    data.update(status="running", process={"host": "runner-7", "pid": 4242, "started": 1})
    (second / "results.json").write_text(json.dumps(data))
    merged = merge_runs([first, second], out=tmp_path / "out")
    (line,) = merged.problems
    assert line.startswith(f"shard 2 of 2 ({second}) is still running, or was killed on runner-7 before")
    assert not merged.complete and results(merged.run_dir)["status"] == "incomplete"


@pytest.mark.parametrize(
    "case", ["doubled shard", "a job twice", "mixed matrices", "mixed commits", "mixed splits", "a whole run"]
)
def test_shards_that_cannot_make_one_run_are_refused_in_one_line_and_nothing_is_written(
    case: str, tmp_path: Path
) -> None:
    jobs = jobs_of()
    given = shards(tmp_path / "a")
    if case == "doubled shard":
        given.append(shards(tmp_path / "b")[0])
        message = r"shard 1 of 3 is given twice: "
    elif case == "a job twice":
        # Another split of the same jobs in the same number of parts, its record made to agree.
        other = (jobs[:1], jobs[1:3], jobs[3:])
        rogue = write_run(tmp_path / "b", jobs, shard=Shard(1, 3), parts=other)
        data = results(rogue)
        data["shard"] = {**data["shard"], "split": results(given[0])["shard"]["split"], "index": 2}
        (rogue / "results.json").write_text(json.dumps(data))
        given = [given[0], rogue, given[2]]
        message = r"job quick--\w is in two shards: shard \d of 3 \(.*\) and shard 2 of 3"
    elif case == "mixed matrices":
        given[2] = shards(tmp_path / "b", jobs_of({**VERDICTS, "e": "failed"}))[2]
        message = (
            r"shards of different matrices: shard 1 of 3 .* is of matrix \w{12} \(m.toml\), shard 3 of 3"
        )
    elif case == "mixed commits":
        given[1] = shards(tmp_path / "b", commit="unknown")[1]
        message = (
            rf"shards of different commits: shard 1 of 3 \(.*\) ran {COMMIT}, shard 2 of 3 \(.*\) ran unknown"
        )
    elif case == "mixed splits":
        given[1] = shards(tmp_path / "b", count=4)[1]
        message = r"shards of different splits of one matrix: .*run every shard with the same N and the same --durations"
    else:
        given[0] = write_run(tmp_path / "b", jobs)
        message = r"is not a shard: its results.json names no part of a matrix"
    with pytest.raises(ShardMergeError, match=message) as refused:
        merge_runs(given, out=tmp_path / "out")
    assert "\n" not in str(refused.value) and refused.value.runs
    assert not (tmp_path / "out").exists(), "a refused merge writes nothing"
