"""docs/sharding.md's CI recipes hang together: the fan-out, the artifact names, the merge job.
tests/notebooks/test_regress_shards.py runs their `embedlab` steps."""

from __future__ import annotations

from fnmatch import fnmatch
from pathlib import Path

from ...ci_recipes import GITHUB, GITLAB, commands, github_runs, here, recipe, step_using
from ...conftest import REPO

BIN = Path("/venv/bin")


def test_github_fans_out_on_the_job_matrix_and_merges_every_shard_s_artifact() -> None:
    jobs = recipe(GITHUB)["jobs"]
    regress, merge = jobs["regress"], jobs["merge"]
    shards = regress["strategy"]["matrix"]["shard"]
    assert shards == [1, 2, 3] and regress["strategy"]["fail-fast"] is False
    (run,) = commands(github_runs(regress), "--shard")
    upload = step_using(regress, "actions/upload-artifact")
    assert upload["if"] == "always()", "a shard with a failed job still hands over its reports"
    out = run.split("--out ")[1].split()[0]
    assert upload["with"]["path"].rstrip("/") == out
    for i in shards:
        line = here(run, BIN, **{"matrix.shard": str(i), "strategy.job-total": str(len(shards))})
        assert f"embedlab regress --shard {i}/{len(shards)} " in line
        name = here(upload["with"]["name"], BIN, **{"matrix.shard": str(i)})
        assert fnmatch(name, step_using(merge, "actions/download-artifact")["with"]["pattern"])
    assert merge["needs"] == "regress" and merge["if"] == "always()", "a failed shard is merged, and said"
    download = step_using(merge, "actions/download-artifact")["with"]
    assert "merge-multiple" not in download, "each artifact in a folder of its own"
    (merging,) = commands(github_runs(merge), "merge")
    # download-artifact puts each artifact in <path>/<name>/: the run folders are one level down.
    assert f" merge {download['path']}/*/*/ --out " in merging
    assert (
        step_using(merge, "actions/upload-artifact")["with"]["path"].rstrip("/")
        == merging.split("--out ")[1].split()[0]
    )


def test_gitlab_runs_the_job_in_parallel_and_the_merge_takes_every_part() -> None:
    pipeline = recipe(GITLAB)
    regress, merge = pipeline["regress"], pipeline["merge"]
    assert pipeline["stages"] == [regress["stage"], merge["stage"]]
    (run,) = commands(regress["script"], "--shard")
    assert "--shard $CI_NODE_INDEX/$CI_NODE_TOTAL " in run
    assert here(run, BIN, CI_NODE_INDEX="2", CI_NODE_TOTAL=str(regress["parallel"])).startswith(
        f"{BIN}/embedlab regress --shard 2/3 "
    )
    out = run.split("--out ")[1].split()[0]
    assert regress["artifacts"]["paths"] == [f"{out}/"] and regress["artifacts"]["when"] == "always"
    assert merge["needs"] == [{"job": "regress", "artifacts": True}] and merge["when"] == "always"
    (merging,) = commands(merge["script"], "merge")
    assert f" merge {out}/*/ --out outputs" in merging
    assert merge["artifacts"]["reports"]["junit"] == "outputs/*/junit.xml"


def test_the_readme_and_changelog_point_to_the_recipes() -> None:
    assert "docs/sharding.md" in (REPO / "README.md").read_text()
    assert "--shard" in (REPO / "CHANGELOG.md").read_text()
