"""Scenarios of one's own: the README's guide, run exactly as written, and the entry-point route."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from embedlab import (
    ConfigError,
    ScenarioPlan,
    ScenarioResult,
    knob,
    register_scenario,
    run_scenario,
    scenario_names,
)
from embedlab.scenarios.registry import SCENARIOS

REPO = Path(__file__).resolve().parents[2]


def readme_guide(heading: str = "### Scenarios of your own") -> str:
    """A README example: the first python block under its heading."""
    text = (REPO / "README.md").read_text()
    section = text[text.index(heading) :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "the README's guide has no python block"
    return match.group(1)


def run(args: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=180)


def test_the_readme_guide_runs_as_written_from_a_file_outside_the_package(tmp_path: Path) -> None:
    code = readme_guide()
    assert len(code.strip().splitlines()) <= 45, "one short file"
    (tmp_path / "my_scenarios.py").write_text(code)
    proc = run([sys.executable, "my_scenarios.py"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "one-hot-query on embedded (hash): PASSED"


def test_the_readme_guide_to_a_scenario_of_its_own_bursts_runs_as_written(tmp_path: Path) -> None:
    """The exported toolkit (BurstSpec, burst_of, judge, workers_of, DataFigures), as the README shows it."""
    (tmp_path / "my_bursts.py").write_text(readme_guide("### A scenario that sends its own bursts"))
    proc = run([sys.executable, "my_bursts.py"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "single-and-batched on embedded (hash): PASSED", (
        proc.stdout
    )


def test_the_readme_commands_load_the_file_with_embedlab_plugins(tmp_path: Path) -> None:
    """The README's commands: its knobs in --help, a run with them set writes its figures into
    --json, and a badly typed knob is exit 2 with one line naming the option."""
    (tmp_path / "my_scenarios.py").write_text(readme_guide())
    env = {**os.environ, "EMBEDLAB_PLUGINS": "my_scenarios.py"}
    embedlab = [sys.executable, "-m", "embedlab", "scenario", "one-hot-query"]
    helped = run([*embedlab, "--help"], cwd=tmp_path, env=env)
    assert helped.returncode == 0, helped.stderr
    text = " ".join(helped.stdout.split())
    assert "one-hot-query's own knobs: --query QUERY the one query, sent over and over" in text, text
    assert "--requests REQUESTS requests in the burst (default: 40)" in text, text
    out = tmp_path / "out.json"
    ran = run(
        [
            *embedlab,
            "--query",
            "hello there",
            "--requests",
            "60",
            "--json",
            str(out),
            "--run-dir",
            str(tmp_path / "r"),
        ],
        cwd=tmp_path,
        env=env,
    )
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    saved = json.loads(out.read_text())
    assert saved["figures"]["query"] == "hello there" and saved["bursts"][0]["traffic"]["n"] == 60
    assert saved["key_figures"]["own"] == {"busiest share": round(saved["figures"]["busiest_share"], 3)}
    assert "busiest worker's share" in ran.stdout  # its rows, in the figures the CLI prints
    bad = run([*embedlab, "--requests", "many"], cwd=tmp_path, env=env)
    assert bad.returncode == 2 and bad.stdout == "", (bad.returncode, bad.stdout)
    assert bad.stderr.strip().splitlines() == [
        "embedlab scenario one-hot-query: error: argument --requests: invalid int value: 'many'"
    ], bad.stderr
    missing = run(
        [*embedlab, "--help"], cwd=tmp_path, env={**os.environ, "EMBEDLAB_PLUGINS": "no_such_plugin"}
    )
    assert missing.returncode == 2 and "cannot import plugin 'no_such_plugin'" in missing.stderr, (
        missing.stderr
    )


def test_an_installed_entry_point_makes_the_scenario_known_to_the_cli(tmp_path: Path) -> None:
    """A real distribution's metadata on the path, as `pip install` leaves it: no mock of importlib."""
    site = tmp_path / "site"
    dist = site / "my_scenarios_plugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-scenarios-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[embedlab.scenarios]\none-hot-query = my_scenarios:one_hot_query\n"
    )
    (site / "my_scenarios.py").write_text(readme_guide())
    env = {**os.environ, "PYTHONPATH": str(site)}
    listed = run([sys.executable, "-m", "embedlab", "scenario", "--help"], cwd=tmp_path, env=env)
    text = " ".join(listed.stdout.split())  # argparse wraps the listing
    assert (
        "one-hot-query The same query over and over: a cache-aware router must still use every worker."
        in text
    ), text
    out = tmp_path / "result.json"
    proc = run(
        [
            sys.executable,
            "-m",
            "embedlab",
            "scenario",
            "one-hot-query",
            "--requests",
            "60",
            "--json",
            str(out),
            "--run-dir",
            str(tmp_path / "run"),
        ],
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "one-hot-query on embedded (hash): PASSED"
    # The burst the command line asked for, not the module's default of 40.
    assert json.loads(out.read_text())["bursts"][0]["traffic"]["n"] == 60


@pytest.fixture
def registered() -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        SCENARIOS.unregister(name)


def test_registration_mistakes_are_config_errors(registered: list[str]) -> None:
    with pytest.raises(ConfigError, match="already registered"):
        register_scenario("same-model", lambda target, plan: None)
    with pytest.raises(
        ConfigError,
        match="unknown scenario 'nope'; choose from same-model, multi-model, mixed, failover, failover-no-retries, drain",
    ):
        ScenarioPlan(scenario="nope")

    @dataclass(kw_only=True)
    class Loose:
        rounds: int = knob(3, "rounds")

    @dataclass(frozen=True, kw_only=True)
    class Odd:
        where: list = knob((), "a list is no knob type")  # type: ignore[type-arg]

    # Checked when they join, with the scenario's name: not when they first run.
    with pytest.raises(ConfigError, match="scenario 'loose': params class Loose must be frozen"):
        register_scenario("loose", lambda target, plan: None, params=Loose)
    with pytest.raises(ConfigError, match="scenario 'odd': knob where is list"):
        register_scenario("odd", lambda target, plan: None, params=Odd)
    with pytest.raises(ConfigError, match=r"scenario 'one-arg': run must take \(target, plan\)"):
        register_scenario("one-arg", lambda target: None)
    with pytest.raises(ConfigError, match="scenario 'sets' sets \\['request'\\]"):
        register_scenario("sets", lambda target, plan: None, deployment={"request": 5})
    assert not {"loose", "odd", "one-arg", "sets"} & set(scenario_names())


def test_knobs_are_checked_by_type_and_named(registered: list[str]) -> None:
    @dataclass(frozen=True, kw_only=True)
    class Rounds:
        rounds: int = knob(3, "rounds", min=1)
        label: str = knob("x", "a label")
        ttls: tuple[float, ...] = knob((1.0,), "ttls")

    registered.append("rounds")
    register_scenario("rounds", lambda target, plan: None, params=Rounds)
    plan = ScenarioPlan.from_params(scenario="rounds", rounds=5, ttls=[2, 3.5])
    assert plan.params == Rounds(rounds=5, ttls=(2.0, 3.5))
    with pytest.raises(ConfigError, match="rounds: rounds must be a whole number, got 'five'"):
        ScenarioPlan.from_params(scenario="rounds", rounds="five")
    with pytest.raises(ConfigError, match="rounds: rounds must be at least 1, got 0"):
        ScenarioPlan(scenario="rounds", params={"rounds": 0})
    with pytest.raises(ConfigError, match="rounds has no knob round; its knobs: rounds, label, ttls"):
        ScenarioPlan(scenario="rounds", params={"round": 2})
    with pytest.raises(
        ConfigError, match=r"unknown scenario parameters: round \(rounds's own knobs: label, rounds, ttls\)"
    ):
        ScenarioPlan.from_params(scenario="rounds", round=2)


def test_a_scenario_that_returns_no_result_is_a_clear_error(registered: list[str], tmp_path: Path) -> None:
    registered.append("returns-nothing")
    register_scenario("returns-nothing", lambda target, plan: "done")
    with pytest.raises(ConfigError, match="returned str, not a ScenarioResult"):
        run_scenario(ScenarioPlan(scenario="returns-nothing", run_dir=str(tmp_path)))


def test_a_per_model_scenario_gets_one_worker_per_model(registered: list[str], tmp_path: Path) -> None:
    seen: list[list[str]] = []

    @dataclass(frozen=True, kw_only=True)
    class PerBurst:
        requests: int = knob(6, "requests per burst")

    def record(target, plan) -> ScenarioResult:  # type: ignore[no-untyped-def]
        from embedlab import multi_model_dispatch

        seen.append(list(target.models))
        return multi_model_dispatch(target, requests=plan.params.requests)

    registered.append("by-model")
    register_scenario("by-model", record, layout="per-model", params=PerBurst)
    result = run_scenario(ScenarioPlan(scenario="by-model", models=["x", "y", "z"], run_dir=str(tmp_path)))
    assert seen == [["x", "y", "z"]] and result.scenario == "by-model" and result.passed, result.summary()
    assert [b.traffic.n for b in result.bursts] == [6, 6, 6]


def test_a_knob_named_like_a_plan_field_is_refused_by_name(registered: list[str]) -> None:
    @dataclass(frozen=True, kw_only=True)
    class Seeded:
        seed: int = knob(1, "would shadow the plan's seed")

    registered.append("seeded")
    register_scenario("seeded", lambda target, plan: None, params=Seeded)
    with pytest.raises(ConfigError, match=r"scenario 'seeded': its knobs \['seed'\] are plan fields too"):
        ScenarioPlan(scenario="seeded")
