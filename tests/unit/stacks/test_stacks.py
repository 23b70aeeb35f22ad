"""Stacks say what they can do once, are checked when they join, keep no state between runs,
and are composed of parts rather than derived from each other."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

import embedlab
from embedlab import (
    BaseStack,
    ConfigError,
    CountsBackends,
    DeploymentSpec,
    Drains,
    LiveWeights,
    ProcessSpec,
    SendsCanaries,
    StackContext,
    SwitchesRetries,
    WorkerSpec,
)
from embedlab.cluster.stack import capable, prepare_run
from embedlab.cluster.stack_registry import (
    STACKS,
    battery_stacks,
    get_stack,
    register_stack,
    router_venvs,
    stack_class,
    stacks_with,
)
from embedlab.cluster.worker_server import WORKER_SERVERS
from embedlab.engines import ENGINES
from embedlab.stacks import dynamo
from embedlab.stacks.routers import RouterRun, VllmRouterStack

from ..stub_stacks import Minimal, context_for

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
    assert stack.split_for(None) == "weights"
    assert not isinstance(stack, (Drains, LiveWeights, SwitchesRetries, SendsCanaries, CountsBackends))
    assert "minimal" in battery_stacks() and stacks_with(lambda s: s is Minimal) == ["minimal"]
    with pytest.raises(
        embedlab.UnsupportedError, match="minimal has no API to take a worker out of dispatch"
    ):
        capable(stack, Drains)
    caps = stack.capabilities()
    assert not any(
        caps[c] for c in ("drains", "live_weights", "retries_switch", "canaries", "counts_backends")
    )
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


class HalfADrain(Minimal):
    name = "half"

    def drain(self, client: httpx.Client, ctx: StackContext[Any], index: int) -> None:
        return None


class ReasonForWhatItHas(Minimal):
    name = "reason"
    lacks = {"live_weights": "it cannot"}

    def set_weights(self, client: httpx.Client, ctx: StackContext[Any], weights: Sequence[float]) -> None:
        return None


class WrongDrainSignature(Minimal):
    name = "wrong-drain"

    def drain(self, ctx: StackContext[Any], index: int) -> None:  # type: ignore[override]
        return None

    def resume(self, client: httpx.Client, ctx: StackContext[Any], index: int) -> None:
        return None


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
        (HalfADrain, "stack 'bad': HalfADrain defines drain but not resume: a stack that is a Drains"),
        (ReasonForWhatItHas, "stack 'bad': ReasonForWhatItHas gives a reason it lacks live_weights, yet"),
        (WrongDrainSignature, r"drain\(ctx, index\) should take \(client, ctx, index\)"),
        (PinsNoVenv, "stack 'bad': a venv of its own is built from its pins"),
        (
            Stateful,
            r"stack 'bad': Stateful keeps _urls on the object; .* prepare\(\) returns \(StackContext.state\)",
        ),
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
    first, _ = prepare_run(stack, context_for(spec, tmp_path, iter(range(1000, 1100))))
    second, _ = prepare_run(stack, context_for(spec, tmp_path, iter(range(2000, 2100))))
    assert vars(stack) == {}, "per-run state is what prepare() returned, carried by the run's context"
    assert isinstance(first.state, RouterRun) and first.state.workers.urls != second.state.workers.urls
    health = {"workers": [{"url": u, "is_healthy": True} for u in first.state.workers.urls]}
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


def test_a_router_stack_from_a_plugin_module_joins_the_battery_and_make_routers(router_plugin: Any) -> None:
    """No edit anywhere else: its venv and pins for `make routers`, its name in the battery (the
    command line's side: tests/integration/test_cli.py)."""
    router_stack = router_plugin
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


CAPS = {"drains", "live_weights", "retries_switch", "canaries", "counts_backends"}


def test_what_each_builtin_stack_can_do_is_what_it_defines() -> None:
    """Read from the methods, as `embedlab stacks` shows it: the table the flags once gave."""
    has = {
        name: sorted(c for c, yes in stack_class(name).capabilities().items() if yes is True and c in CAPS)
        for name in STACKS.names()
    }
    assert has == {
        "embedded": ["drains", "live_weights"],
        "dynamo": ["canaries", "retries_switch"],
        "litellm": ["retries_switch"],
        "vllm-router": ["drains", "retries_switch"],
        "sglang-router": ["drains", "retries_switch"],
        "smg": ["counts_backends", "drains", "retries_switch"],
        "haproxy": ["counts_backends", "drains", "retries_switch"],
        "nginx": ["drains", "retries_switch"],
    }


def test_no_builtin_stack_derives_from_another() -> None:
    """Composition, not a chain: each built-in stack is a BaseStack holding its parts."""
    for name in STACKS.names():
        cls = stack_class(name)
        assert cls.__bases__ == (BaseStack,), f"{name}: {cls.__mro__}"


def test_a_prepared_run_carries_the_stacks_typed_state_and_its_environment(tmp_path: Path) -> None:
    stack = get_stack("nginx")
    spec = DeploymentSpec(stack="nginx", workers=(WorkerSpec(model="m"), WorkerSpec(model="m")))
    unprepared = context_for(spec, tmp_path, iter(range(3000, 3100)))
    ctx, env = prepare_run(stack, unprepared)
    assert unprepared.state is None and env == {}
    assert ctx.state.generation == 0 and ctx.state.down == set()
    assert ctx.state.status_url.startswith("http://127.0.0.1:") and len(ctx.state.workers.ports) == 2
    assert ctx.scratch_paths is unprepared.scratch_paths  # what the run made is deleted with it
    for path in ctx.scratch_paths:
        for sub in sorted(path.rglob("*"), reverse=True):
            sub.rmdir()
        path.rmdir()


def test_no_module_compares_a_worker_server_or_an_engine_with_its_name() -> None:
    """Engines and worker servers are chosen by their traits (`engine_traits`, `runs_engine`,
    `joins`), never by name: `server == "embedlab"`, `engine == "hash"` are found by the AST."""
    names = set(ENGINES.names()) | set(WORKER_SERVERS.names())
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            about = any(
                "engine" in getattr(s, "attr", getattr(s, "id", ""))
                or "server" in getattr(s, "attr", getattr(s, "id", ""))
                for s in sides
            )
            if about and any(isinstance(s, ast.Constant) and s.value in names for s in sides):
                found.append(f"{path.relative_to(PACKAGE).as_posix()}:{node.lineno}")
    assert not found, found
