"""Which tests share a pytest-xdist worker under `make test` (`-n N --dist loadgroup`).

A test goes to whichever worker is free, except that the tests of one group run on one
worker, one after another in file order. The groups are computed from the tests themselves,
so that no test has to name one:
  - tests that share a fixture of module or session scope (a deployment per module, the
    regress run) are one group: the fixture is built once, not once on each worker that
    happens to run one of them. Two fixtures of one module are two groups: a module's vLLM
    server does not hold back the tests of its Infinity server;
  - tests marked vllm are one group, so one runs at a time: vLLM pins an engine to each of
    CI's two cores. Those that start one engine at most (marked vllm(engines=1): a single
    worker, or one that fails to start) are a second such lane, so that a one-engine test may
    run beside a two-engine one, but never two pools at once. Tests marked heavy (Chromium driving a live JupyterLab, whose kernel
    and torch workers keep both cores busy) are another: one of each may run at once, as
    they were measured to fit, while the light browser tests (a static report) go anywhere.
    One group for both was the suite's critical path: 1,284 s of 1,379 under a second load;
  - tests marked netns are one group: they compare the machine's network namespaces and
    lo's addresses before and after, which another test's cluster would change;
  - tests marked xdist_group(name) are one group per name, as with xdist's own loadgroup.
Tests linked through any of these are one group (the tests of a module's shared vLLM
deployment are part of the vllm group).

xdist's own loadgroup passes a test's group to the controller by appending "@group" to its
node id, which pytest 9.2 no longer lets a plugin change (pytest-dev/pytest-xdist#1386): the
groups would be silently ignored. So each worker writes the groups it computed to a file in
the run's temp folder as it collects, and the controller's scheduler (loadgroup's, fed from
that file) reads them when it schedules, after every worker has collected.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

# Fixtures of wider scope that each worker may build for itself: cheap checks, or (tiny_models)
# shared across workers through a lock.
PER_WORKER = {"tiny_models", "project_kernel", "routers_installed", "kernel_reports"}
LANES = ("heavy", "vllm", "netns")  # marks whose tests run one at a time, each mark its own lane
ONE_ENGINE_LANE = "vllm-1"  # tests marked vllm(engines=1): one vLLM engine, beside a pool's two
SCOPE_NODES = {"module": pytest.Module, "class": pytest.Class, "package": pytest.Package}
GROUPS_FILE = "xdist-groups.json"


def _worker(config: pytest.Config) -> str | None:
    """This process's xdist worker id (gw0, ...), None in the controller or a run without xdist."""
    # From the config, not PYTEST_XDIST_WORKER: a pytest that a test starts inherits that.
    workerinput = getattr(config, "workerinput", None)
    return workerinput["workerid"] if workerinput else None


def run_root(config: pytest.Config) -> Path:
    """A folder of this test run that the controller and all its xdist workers share."""
    base = config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    return base.parent if _worker(config) else base


def _shared_fixtures(item: pytest.Item) -> Iterator[str]:
    """What `item` shares with other tests: the node of each module, class or package fixture it
    uses, and the name of each session fixture."""
    info = getattr(item, "_fixtureinfo", None)
    for name, defs in info.name2fixturedefs.items() if info else ():
        fixture = defs[-1]  # the definition that applies to this test
        # Plugins' fixtures (baseid "") are pytest's own: tmp_path_factory and the like.
        if fixture.scope == "function" or not fixture.baseid or name in PER_WORKER:
            continue
        node = item.getparent(SCOPE_NODES[fixture.scope]) if fixture.scope in SCOPE_NODES else None
        yield f"{node.nodeid}::{name}" if node else name


def _keys(item: pytest.Item) -> list[str]:
    keys = list(_shared_fixtures(item))
    keys += [
        f"xdist_group {m.args[0] if m.args else m.kwargs.get('name', 'default')}"
        for m in item.iter_markers("xdist_group")
    ]
    lanes = [mark for mark in LANES if item.get_closest_marker(mark)]
    if any(m.kwargs.get("engines") == 1 for m in item.iter_markers("vllm")):
        lanes = [ONE_ENGINE_LANE if lane == "vllm" else lane for lane in lanes]
    return keys + lanes


def groups(items: Iterable[pytest.Item]) -> dict[str, str]:
    """node id -> group name, for the tests that must share a worker (connected by any key)."""
    parent: dict[str, str] = {}

    def find(key: str) -> str:
        while parent.setdefault(key, key) != key:
            parent[key] = key = parent[parent[key]]
        return key

    linked = {item.nodeid: _keys(item) for item in items}
    for first, *rest in filter(None, linked.values()):
        for key in [first, *rest]:
            parent[find(key)] = find(first)
    members: dict[str, list[str]] = {}
    for key in parent:
        members.setdefault(find(key), []).append(key)
    # Named for its lane where it has one (heavy, vllm, netns), else for what its tests share.
    names = {
        root: min(keys, key=lambda k: (k not in (*LANES, ONE_ENGINE_LANE), k))
        for root, keys in members.items()
    }
    return {nodeid: names[find(keys[0])] for nodeid, keys in linked.items() if keys}


def publish(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker: write the groups of the tests it collected for the controller."""
    worker = _worker(config)
    if not worker:
        return
    path = run_root(config) / GROUPS_FILE
    staged = path.with_name(f".{GROUPS_FILE}.{worker}")
    staged.write_text(json.dumps(groups(items)))
    staged.replace(path)  # every worker collects the same tests: whichever lands last is as good


def scheduler(config: pytest.Config, log: Any) -> Any:
    """For `--dist loadgroup`: loadgroup's scheduler, its groups read from the workers' file."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """Loadscope with a scope per group (and per test outside any)."""

        _groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:
                path = run_root(config) / GROUPS_FILE
                self._groups = json.loads(path.read_text()) if path.exists() else {}
            return self._groups.get(nodeid, nodeid)

    return GroupScheduling(config, log)
