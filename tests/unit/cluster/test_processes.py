"""A run's `Processes` (its lists, its live weights, the spec it never replaces) and the engines'
traits the cluster asks of them instead of their names: pure logic, no process is started."""

from __future__ import annotations

import ast
from collections.abc import Iterator

import pytest

from embedlab import ConfigError, DeploymentSpec, WorkerSpec, register_engine
from embedlab.cluster.processes import Processes
from embedlab.cluster.provisioning import gpu_for
from embedlab.engines import ENGINES, EngineTraits, engine_traits

from ...conftest import REPO

CLUSTER = REPO / "embedlab" / "cluster"


def test_live_weights_are_the_pools_state_and_the_launch_spec_is_never_replaced() -> None:
    spec = DeploymentSpec.same_model("m", workers=2, weights=[1, 2])
    procs = Processes(spec)
    assert procs.weights == (1.0, 2.0) and procs.worker_spec(1) is spec.workers[1]
    procs.set_weights([3, 1])
    assert procs.spec is spec and [w.weight for w in spec.workers] == [1.0, 2.0]
    # What a worker started again gets: its launch spec with its live weight, nothing else changed.
    assert procs.worker_spec(0) == WorkerSpec(model="m", weight=3.0)
    assert procs.worker_spec(1).weight == 1.0 and procs.worker_spec(1).endpoint == spec.workers[1].endpoint


def test_a_pool_before_its_launch_has_nothing_to_stop_and_says_it_is_stopping() -> None:
    procs = Processes(DeploymentSpec.same_model("m", workers=1))
    assert procs.all == [] and procs.frontend is None
    procs.check_frontend()  # no frontend yet: nothing has exited
    assert procs.stop_all() == [] and procs.stopping.is_set()


def test_the_built_in_engines_declare_what_they_ask_of_a_worker() -> None:
    assert engine_traits("hash") == EngineTraits(needs_model=False, uses_gpu=False, runs_vllm=False)
    assert engine_traits("transformers") == EngineTraits()
    assert engine_traits("vllm") == EngineTraits(runs_vllm=True)
    # A plugin only the worker imports is not known here: an engine that loads a model on a GPU.
    assert "not-registered" not in ENGINES and engine_traits("not-registered") == EngineTraits()


class CpuEngine:
    """An engine of one's own that hashes like `hash` does: no model, no GPU."""

    needs_model = False
    uses_gpu = False

    def __init__(self, options: object) -> None:
        self.options = options


@pytest.fixture
def cpu_engine() -> Iterator[str]:
    register_engine("cpu-only", CpuEngine)
    yield "cpu-only"
    ENGINES.unregister("cpu-only")


def test_a_spec_and_its_placement_follow_the_engines_traits_not_its_name(cpu_engine: str) -> None:
    assert WorkerSpec(model="m", engine=cpu_engine).model_path is None  # no model needed
    assert gpu_for(0, WorkerSpec(model="m", engine=cpu_engine), ["0", "1"]) is None
    assert gpu_for(1, WorkerSpec(model="m", engine="transformers", model_path="/m"), ["0", "1"]) == "1"
    with pytest.raises(ConfigError, match="the transformers engine needs a model_path"):
        WorkerSpec(model="m", engine="transformers")
    assert WorkerSpec(model="m", engine="vllm", model_path="/m").runs_vllm
    assert not WorkerSpec(model="m", engine="transformers", model_path="/m").runs_vllm


def test_no_module_of_the_cluster_compares_an_engine_with_a_name() -> None:
    compared = []
    for path in sorted(CLUSTER.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                named = any(isinstance(s, ast.Attribute) and s.attr == "engine" for s in sides)
                if named and any(isinstance(s, ast.Constant) and isinstance(s.value, str) for s in sides):
                    compared.append(f"{path.name}:{node.lineno}")
    assert compared == [], f"choose by `engine_traits`, not by name: {compared}"


def test_no_part_of_a_deployment_re_describes_it_in_a_protocol() -> None:
    for name in ("launcher", "outages", "steering", "supervisor", "processes"):
        tree = ast.parse((CLUSTER / f"{name}.py").read_text())
        bases = [
            getattr(b, "id", getattr(b, "attr", ""))
            for n in ast.walk(tree)
            if isinstance(n, ast.ClassDef)
            for b in n.bases
        ]
        assert "Protocol" not in bases, f"cluster/{name}.py declares a Protocol"
