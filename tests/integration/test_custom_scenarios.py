"""Scenarios of one's own: the README's guide, run exactly as written, and the entry-point route."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from embedlab import (
    ConfigError,
    ScenarioPlan,
    ScenarioResult,
    register_scenario,
    run_scenario,
    scenario_names,
)
from embedlab.scenarios.registry import SCENARIOS

REPO = Path(__file__).resolve().parents[2]


def readme_guide() -> str:
    """The README's custom-scenario example: the first python block under its heading."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("### Scenarios of your own") :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "the README's guide has no python block"
    return match.group(1)


def run(args: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=180)


def test_the_readme_guide_runs_as_written_from_a_file_outside_the_package(tmp_path: Path) -> None:
    code = readme_guide()
    assert 15 <= len(code.strip().splitlines()) <= 25, "about 20 lines"
    (tmp_path / "my_scenarios.py").write_text(code)
    proc = run([sys.executable, "my_scenarios.py"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "one-hot-query on embedded: PASSED"


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
        "one-hot-query: The same query over and over: a cache-aware router must still use every worker."
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
            "20",
            "--json",
            str(out),
            "--run-dir",
            str(tmp_path / "run"),
        ],
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "one-hot-query on embedded: PASSED"
    # The burst the command line asked for, not the module's default of 40.
    assert json.loads(out.read_text())["bursts"][0]["traffic"]["n"] == 20


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
        match="unknown scenario 'nope'; choose from same-model, multi-model, failover, failover-no-retries, drain",
    ):
        ScenarioPlan(scenario="nope")
    registered.append("bad-defaults")
    register_scenario("bad-defaults", lambda target, plan: None, defaults={"request": 5})
    with pytest.raises(ConfigError, match="has defaults for no plan field: request"):
        ScenarioPlan(scenario="bad-defaults").resolved()
    assert "bad-defaults" in scenario_names()


def test_a_scenario_that_returns_no_result_is_a_clear_error(registered: list[str], tmp_path: Path) -> None:
    registered.append("returns-nothing")
    register_scenario("returns-nothing", lambda target, plan: "done")
    with pytest.raises(ConfigError, match="returned str, not a ScenarioResult"):
        run_scenario(ScenarioPlan(scenario="returns-nothing", run_dir=str(tmp_path)))


def test_a_per_model_scenario_gets_one_worker_per_model(registered: list[str], tmp_path: Path) -> None:
    seen: list[list[str]] = []

    def record(target, plan) -> ScenarioResult:  # type: ignore[no-untyped-def]
        from embedlab import multi_model_dispatch

        seen.append(list(target.models))
        return multi_model_dispatch(target, requests_per_burst=plan.requests)

    registered.append("by-model")
    register_scenario("by-model", record, layout="per-model", defaults={"requests": 6})
    result = run_scenario(ScenarioPlan(scenario="by-model", models=["x", "y", "z"], run_dir=str(tmp_path)))
    assert seen == [["x", "y", "z"]] and result.scenario == "by-model" and result.passed, result.summary()
    assert [b.traffic.n for b in result.bursts] == [6, 6, 6]
