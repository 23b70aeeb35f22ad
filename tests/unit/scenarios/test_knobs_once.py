"""Each knob is written once: a plan field or a scenario's knob is an option, a keyword and a
result's parameter under its one name, from its one declaration."""

from __future__ import annotations

import dataclasses

import pytest

from embedlab import ConfigError, ScenarioPlan
from embedlab.cli.entry import build_parser
from embedlab.cli.scenario import plan_from_args
from embedlab.scenarios.builtin.dispatch import MultiModelParams, SameModelParams
from embedlab.scenarios.builtin.mixed import MixedParams
from embedlab.scenarios.params import knobs, with_knobs


def plan(*argv: str) -> ScenarioPlan:
    return plan_from_args(build_parser().parse_args(["scenario", *argv]))  # type: ignore[no-any-return]


def test_every_plan_field_with_help_is_an_option_of_its_own_name() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices["scenario"]  # type: ignore[union-attr]
    same = next(a for a in sub._actions if a.dest == "scenario").choices["same-model"]  # type: ignore[union-attr]
    dests = {a.dest: a.option_strings for a in same._actions}
    shared = [k for k in knobs(ScenarioPlan) if k.help]
    assert {"stack", "model_paths", "system_urls", "worker_args", "lease_ttl"} <= {k.name for k in shared}
    for k in shared:
        assert k.option in dests[k.name], (k.name, dests.get(k.name))
    assert {f.name for f in dataclasses.fields(ScenarioPlan)} - {k.name for k in shared} == {
        "scenario",
        "params",
        "progress",
    }


def test_options_reach_the_plan_under_the_fields_names() -> None:
    argv = (
        "mixed --models a,b --model-paths a --model-path b --worker-arg=--x=1,2 --worker-args=-v "
        "--replicas 1,1 --weights 1,3 --lease-ttl 4 --restart on-exit --no-canaries "
        "--requests 12 --concurrency 3 --patterns random"
    )
    got = plan(*argv.split())
    assert got.model_paths == ("a", "b")
    assert got.worker_args == ("--x=1,2", "-v")  # one item per option: a comma stays inside it
    assert (got.replicas, got.weights, got.lease_ttl, got.restart) == ((1, 1), (1.0, 3.0), 4.0, "on-exit")
    assert got.params == MixedParams(requests=12, concurrency=3, patterns=("random",))
    assert plan("same-model").params == SameModelParams() and plan("same-model").seed == 0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--hosts", "0"], "argument --hosts: hosts must be at least 1, got 0"),
        (["--lease-ttl", "0"], "argument --lease-ttl: lease_ttl must be positive, got 0.0"),
        (["--workers", "two"], "argument --workers: invalid int value: 'two'"),
        (["--concurrency", "0"], "argument --concurrency: concurrency must be at least 1, got 0"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_option(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit:
        build_parser().parse_args(["scenario", "same-model", *argv])
    assert exit.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(message)


def test_a_scenario_function_takes_its_params_or_its_knobs_by_name() -> None:
    base = SameModelParams(requests=10)
    assert with_knobs(SameModelParams, base, {}, scenario="same-model") is base
    assert with_knobs(SameModelParams, base, {"concurrency": 2}, scenario="same-model") == SameModelParams(
        requests=10, concurrency=2
    )
    assert with_knobs(SameModelParams, None, {}, scenario="same-model") == SameModelParams()
    with pytest.raises(ConfigError, match="same-model has no knob requets; its knobs: requests, concurrency"):
        with_knobs(SameModelParams, None, {"requets": 5}, scenario="same-model")
    with pytest.raises(ConfigError, match="same-model takes SameModelParams as params"):
        with_knobs(SameModelParams, MultiModelParams(), {}, scenario="same-model")  # type: ignore[arg-type]


def test_a_new_knob_reaches_the_notebooks_cell_and_plan_call_by_its_name() -> None:
    from embedlab.notebook.parameters import parameters_source, plan_source
    from embedlab.scenarios.params import knob
    from embedlab.scenarios.registry import SCENARIOS, register_scenario

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class RoundsParams:
        rounds: int = knob(3, "bursts to send", min=1)

    register_scenario("rounds-once", lambda target, plan: None, params=RoundsParams)
    try:
        meta = {"scenario": "rounds-once", "parameters": ["stack", "workers", "knobs"]}
        assert parameters_source(meta).splitlines() == [
            'stack = "embedded"  # the stack: embedlab\'s own frontend, dynamo, or a router',
            "workers = None  # replicas of each model; None: 2",
            "rounds = 3  # bursts to send",
            'result_json = ""  # where to save the result as JSON; empty: not saved',
        ]
        assert plan_source(meta) == (
            "plan = ScenarioPlan.from_params(\n"
            '    scenario="rounds-once", stack=stack, workers=workers, rounds=rounds,\n)'
        )
        with pytest.raises(ConfigError, match=r"notebook parameters \['round'\] are neither plan fields"):
            parameters_source({"scenario": "rounds-once", "parameters": ["round"]})
    finally:
        SCENARIOS.unregister("rounds-once")


def test_a_knob_whose_help_papermill_cannot_parse_is_refused_when_its_cell_is_written() -> None:
    """papermill reads `name = value  # help` only where the help holds no '=': it would warn on
    every run and lose the parameter's help."""
    from papermill.translators import PythonTranslator

    from embedlab.notebook.parameters import parameters_source
    from embedlab.scenarios.params import knob
    from embedlab.scenarios.registry import SCENARIOS, register_scenario

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class SelectorParams:
        selector: str = knob("", 'label matchers, e.g. job="workers"')

    register_scenario("selector-once", lambda target, plan: None, params=SelectorParams)
    try:
        with pytest.raises(ConfigError, match="selector's help holds '='"):
            parameters_source({"scenario": "selector-once", "parameters": ["knobs"]})
    finally:
        SCENARIOS.unregister("selector-once")
    cell = {"cell_type": "code", "source": 'selector = ""  # label matchers, e.g. job="workers"'}
    assert PythonTranslator.inspect(cell) == []  # the reason: papermill drops the line


def test_a_knobs_choices_hold_from_python_and_matrices_as_on_the_command_line() -> None:
    from embedlab.scenarios.builtin.dispatch import MultiModelParams
    from embedlab.scenarios.params import params_of, with_knobs

    assert with_knobs(MultiModelParams, None, {"kind": "chat"}, scenario="multi-model").kind == "chat"
    with pytest.raises(ConfigError, match="kind must be one of embeddings, completions, chat, got 'chta'"):
        with_knobs(MultiModelParams, None, {"kind": "chta"}, scenario="multi-model")
    with pytest.raises(ConfigError, match="kind must be one of"):
        params_of(MultiModelParams, {"kind": "embedding"}, scenario="multi-model")
