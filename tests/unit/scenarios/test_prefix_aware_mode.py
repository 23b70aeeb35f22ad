"""The KV checks ask for the stack's own prefix-aware policy (`PREFIX_AWARE`), each stack says
which of its modes that is (`BaseStack.prefix_aware_mode`), a router mode the caller gives wins,
and a stack without one is unsupported, with its reason, before anything launches."""

from __future__ import annotations

from typing import ClassVar

import pytest

from embedlab import ConfigError, ScenarioPlan, UnsupportedError, Verdict, run_scenario
from embedlab.cluster.stack import PREFIX_AWARE, prefix_aware
from embedlab.cluster.stack_check import check_stack_class
from embedlab.cluster.stack_registry import STACKS, get_stack, stack_class
from embedlab.evidence.split import Split

from ..stub_stacks import Minimal

OWN = {
    "embedded": "kv",
    "dynamo": "kv",
    "vllm-router": "cache_aware",
    "sglang-router": "cache_aware",
    "smg": "cache_aware",
    "litellm": None,
    "haproxy": None,
    "nginx": None,
}


def test_each_builtin_stack_names_its_own_prefix_aware_policy_among_its_modes() -> None:
    assert {name: stack_class(name).prefix_aware_mode for name in STACKS.names()} == OWN
    assert stack_class("dynamo").prefix_aware_workers == ("mocker", "model")  # KV events, one endpoint
    assert stack_class("smg").prefix_aware_workers == ("embedlab", "worker")
    assert get_stack("smg").capabilities()["prefix_aware_mode"] == "cache_aware"


@pytest.mark.parametrize("scenario", ["prefix-affinity", "kv-participation"])
@pytest.mark.parametrize("stack", list(OWN))
def test_a_kv_check_runs_at_the_stacks_own_prefix_aware_policy(scenario: str, stack: str) -> None:
    plan = ScenarioPlan(scenario=scenario, stack=stack)
    assert plan.resolved().router_mode == OWN[stack]
    assert plan.resolved().resolved() == plan.resolved()  # resolving twice changes nothing
    unsupported = plan.without_policy()
    if OWN[stack] is None:
        assert unsupported is not None and unsupported.verdict is Verdict.UNSUPPORTED
        assert unsupported.reasons == [
            f"the {stack} stack has no prefix-aware policy: none of its router modes "
            f"({', '.join(stack_class(stack).policies)}) routes by the prompt's cached prefix"
        ]
    else:
        assert unsupported is None


def test_a_router_mode_the_caller_gives_wins_over_the_checks_default() -> None:
    given = ScenarioPlan(scenario="prefix-affinity", stack="dynamo", router_mode="round-robin")
    assert given.resolved().router_mode == "round-robin" and given.without_policy() is None
    plan = ScenarioPlan(scenario="kv-participation", stack="haproxy", router_mode="roundrobin")
    assert plan.resolved().router_mode == "roundrobin" and plan.without_policy() is None
    # Any scenario may ask for it by name.
    named = ScenarioPlan(scenario="same-model", stack="smg", router_mode=PREFIX_AWARE)
    assert named.resolved().router_mode == "cache_aware"
    asked = ScenarioPlan(scenario="same-model", stack="nginx", router_mode=PREFIX_AWARE)
    assert asked.without_policy() is not None
    with pytest.raises(ConfigError, match="has no router mode 'kv'"):
        ScenarioPlan(scenario="prefix-affinity", stack="haproxy", router_mode="kv")


def test_a_stack_without_one_is_unsupported_and_nothing_launches(no_process_started: list[str]) -> None:
    result = run_scenario(ScenarioPlan(scenario="prefix-affinity", stack="litellm"))
    assert result.verdict is Verdict.UNSUPPORTED
    assert "litellm stack has no prefix-aware policy" in result.reasons[0]
    assert no_process_started == []


class OwnWords(Minimal):
    name = "own-words"
    lacks: ClassVar[dict[str, str]] = {"prefix_aware": "it hashes the client's address"}


class NotAMode(Minimal):
    name = "not-a-mode"
    prefix_aware_mode = "kv"


class BothWays(Minimal):
    name = "both-ways"
    policies: ClassVar[dict[str, Split]] = {"kv": Split.REPORT}
    prefix_aware_mode = "kv"
    lacks: ClassVar[dict[str, str]] = {"prefix_aware": "none"}


def test_a_stack_says_why_it_has_none_in_its_own_words() -> None:
    check_stack_class("own-words", OwnWords)
    with pytest.raises(UnsupportedError, match="^it hashes the client's address$"):
        prefix_aware(OwnWords())


@pytest.mark.parametrize(
    ("cls", "message"),
    [
        (NotAMode, "its prefix-aware policy 'kv' is not among its policies"),
        (BothWays, "gives a reason it lacks a prefix-aware policy, yet names one"),
    ],
)
def test_a_stack_names_only_a_prefix_aware_mode_it_has(cls: type[Minimal], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_stack_class(cls.name, cls)
