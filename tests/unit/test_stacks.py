"""Stacks declare what they can do, are checked when they join, and keep no state between runs."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import embedlab
from embedlab import BaseStack, ConfigError, DeploymentSpec, ProcessSpec, StackContext, WorkerSpec
from embedlab.cluster.stack_registry import (
    STACKS,
    battery_stacks,
    get_stack,
    register_stack,
    router_venvs,
    stack_class,
    stacks_with,
)
from embedlab.stacks import dynamo
from embedlab.stacks.routers import VllmRouterStack

from .stub_stacks import Minimal, context_for

REPO = Path(__file__).resolve().parents[2]
PACKAGE = Path(embedlab.__file__).parent


@pytest.fixture
def registered() -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        STACKS.unregister(name)


def test_a_minimal_stack_joins_with_the_defaults(registered: list[str]) -> None:
    registered.append("minimal")
    register_stack("minimal", Minimal)
    stack = get_stack("minimal")
    assert stack.split_for(None) == "weights" and not stack.drains and not stack.live_weights
    assert "minimal" in battery_stacks() and stacks_with(lambda s: s is Minimal) == ["minimal"]
    with pytest.raises(
        embedlab.UnsupportedError, match="minimal has no API to take a worker out of dispatch"
    ):
        stack.drain(None, None, 0)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="the minimal stack runs on one host; hosts=2"):
        stack.check(DeploymentSpec(stack="minimal", hosts=2, workers=(WorkerSpec(model="m"),)))
    with pytest.raises(ConfigError, match="the minimal stack has no 'etcd' discovery"):
        stack.check(DeploymentSpec(stack="minimal", discovery="etcd", workers=(WorkerSpec(model="m"),)))


class NotAStack:
    name = "nope"


class NoDispatch(BaseStack):
    name = "no-dispatch"

    def frontend(self, ctx: StackContext) -> ProcessSpec: ...  # type: ignore[empty-body]

    def worker(self, ctx: StackContext, index: int, worker: WorkerSpec, system_port: int) -> ProcessSpec: ...  # type: ignore[empty-body]

    def health_url(self, ctx: StackContext) -> str: ...  # type: ignore[empty-body]


class OldSignature(Minimal):
    """Today's Protocol took `dispatchable_endpoints(self, health)`: a stack not yet ported says so."""

    name = "old"

    def dispatchable_endpoints(self, health: Any) -> set[str]:  # type: ignore[override]
        return set()


class DrainsOnPaper(Minimal):
    name = "paper"
    drains = True


class PinsNoVenv(Minimal):
    name = "pins"
    pins = ("six",)


class Stateful(Minimal):
    """Today's stacks kept a run's ports on the object; one object serves every run now."""

    name = "stateful"

    def __init__(self) -> None:
        self._urls: list[str] = []


@pytest.mark.parametrize(
    "cls, message",
    [
        (
            NotAStack,
            "stack 'bad': <class '.*NotAStack'> is not a subclass of embedlab.cluster.stack.BaseStack",
        ),
        (NoDispatch, "stack 'bad': NoDispatch lacks dispatchable_endpoints"),
        (
            OldSignature,
            r"stack 'bad': OldSignature: dispatchable_endpoints\(health\) should take \(ctx, health\)",
        ),
        (DrainsOnPaper, "stack 'bad': DrainsOnPaper declares drains but does not define drain, resume"),
        (PinsNoVenv, "stack 'bad': a venv of its own is built from its pins"),
        (Stateful, "stack 'bad': Stateful keeps _urls on the object; .* StackContext.state"),
    ],
)
def test_a_class_that_cannot_be_a_stack_is_refused_when_it_joins(cls: type, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        register_stack("bad", cls)
    assert "bad" not in STACKS.names()


def test_a_lazily_loaded_stack_is_checked_when_first_loaded(registered: list[str]) -> None:
    registered.append("later")
    register_stack("later", f"{__name__}:OldSignature")  # a path: nothing is imported yet
    with pytest.raises(ConfigError, match="stack 'later': OldSignature: dispatchable_endpoints"):
        stack_class("later")


def test_every_builtin_stack_passes_its_own_check_and_declares_its_router_pins() -> None:
    for name in STACKS.names():
        assert issubclass(stack_class(name), BaseStack)
    venvs = router_venvs()
    assert venvs == {
        "litellm": ("litellm[proxy]==1.108.7",),
        "vllm-router": ("vllm-router==0.1.17",),
        "sglang-router": ("sglang-router==0.3.2",),
        "smg": ("smg==1.13.0",),
        "infinity": ("infinity-emb[server,torch]==0.0.78", "torch==2.13.0"),  # a worker server's
    }
    assert battery_stacks()[:5] == ["embedded", "dynamo", "litellm", "vllm-router", "sglang-router"]
    assert stacks_with(lambda s: "etcd" in s.discoveries) == ["dynamo"]
    assert stacks_with(lambda s: s.asserts_failover) == ["embedded"]


def test_a_stack_object_keeps_no_state_of_its_own_between_runs(tmp_path: Path) -> None:
    stack = VllmRouterStack()
    spec = DeploymentSpec(stack="vllm-router", workers=(WorkerSpec(model="m"), WorkerSpec(model="m")))
    first = context_for(spec, tmp_path, iter(range(1000, 1100)))
    second = context_for(spec, tmp_path, iter(range(2000, 2100)))
    stack.prepare(first)
    stack.prepare(second)
    assert vars(stack) == {}, "per-run state lives in StackContext.state"
    assert stack.worker_urls(first) != stack.worker_urls(second)
    health = {"workers": [{"url": u, "is_healthy": True} for u in stack.worker_urls(first)]}
    assert stack.dispatchable_endpoints(first, health) == {first.endpoint(0), first.endpoint(1)}
    assert stack.dispatchable_endpoints(second, health) == set(), "another run's workers are not this run's"


STACK_NAMES = {"embedded", "dynamo", "litellm", "vllm-router", "sglang-router"}


def _names_a_stack(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value in STACK_NAMES


def test_no_module_outside_stacks_compares_or_lists_a_stack_by_name() -> None:
    """A decision by stack name belongs to the stack, as a capability: comparisons and literal
    lists of names (`stack == "embedded"`, `stacks=("dynamo",)`) are found here by the AST."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith("stacks/") or relative in ("defaults.py", "cluster/stack_registry.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            compared = isinstance(node, ast.Compare) and any(
                _names_a_stack(n)
                or (isinstance(n, (ast.Tuple, ast.List, ast.Set)) and any(map(_names_a_stack, n.elts)))
                for n in [node.left, *node.comparators]
            )
            listed = isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(map(_names_a_stack, node.elts))
            keyed = isinstance(node, ast.Dict) and any(k is not None and _names_a_stack(k) for k in node.keys)
            if compared or listed or keyed:
                found.append(f"{relative}:{node.lineno}")  # type: ignore[attr-defined]
    assert not found, found


def test_a_router_stack_from_a_plugin_module_joins_the_battery_and_make_routers(
    registered: list[str],
) -> None:
    """No edit anywhere else: its venv and pins for `make routers`, its name in the battery (the
    command line's side: tests/integration/test_cli.py)."""
    from tests.plugins import router_stack

    registered.append(router_stack.NAME)
    assert router_stack.NAME in battery_stacks()
    assert router_venvs()[router_stack.NAME] == router_stack.PINS


def test_dynamo_on_file_discovery_refuses_a_pool_past_the_inotify_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit = tmp_path / "max_user_instances"
    limit.write_text("128\n")
    monkeypatch.setattr(dynamo, "INOTIFY_LIMIT", limit)
    stack = dynamo.DynamoStack()
    stack.check(DeploymentSpec.same_model(workers=31, stack="dynamo"))  # 125 instances fit
    with pytest.raises(ConfigError, match=r"needs 129 inotify instances for 32 workers.*discovery='etcd'"):
        stack.check(DeploymentSpec.same_model(workers=32, stack="dynamo"))
    stack.check(DeploymentSpec.same_model(workers=64, stack="dynamo", discovery="etcd"))  # no inotify
