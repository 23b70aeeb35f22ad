"""Fixtures shared by the suite: tiny models, an in-process stack on real loopback HTTP; and the
hooks that spread `make test` over pytest-xdist workers (tests/xdist_groups.py)."""

from __future__ import annotations

import asyncio
import fcntl
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from embedlab.engines import EngineOptions
from embedlab.serving.frontend.app import Frontend, FrontendConfig
from embedlab.serving.worker.app import Worker, WorkerConfig

from . import xdist_groups

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def tiny_models(request: pytest.FixtureRequest) -> dict[str, Path]:
    from embedlab.engines.tiny import cached_tiny_model

    cache = Path(
        os.environ.get("EMBEDLAB_TEST_MODEL_CACHE") or xdist_groups.run_root(request.config) / "models"
    )
    cache.mkdir(parents=True, exist_ok=True)
    # One cache for all xdist workers: the first builds while the others wait on the folder's
    # lock, then find the models built (a build is atomic anyway: this saves doing it twice).
    fd = os.open(cache, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return {arch: cached_tiny_model(arch, cache_dir=cache) for arch in ("bert", "qwen3")}
    finally:
        os.close(fd)


# -- pytest-xdist: tests/xdist_groups.py says which tests share a worker ---------------------


@pytest.hookimpl(tryfirst=True)  # before the marks' deselection: groups are of every test collected
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    xdist_groups.publish(config, items)
    _leave_out_slow(config, items)


# Tests marked `slow` (minutes each: every notebook in a browser) run only where asked, and the
# summary says which were left out and how to run them: never a silent skip.
SLOW_ENV = "EMBEDLAB_SLOW"


def _leave_out_slow(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(SLOW_ENV) == "1":
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]
        config.stash[_LEFT_OUT] = [item.nodeid for item in slow]


_LEFT_OUT = pytest.StashKey[list[str]]()


def pytest_sessionfinish(session: pytest.Session) -> None:
    # An xdist worker hands what it left out to the controller, which writes the summary.
    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput["slow_left_out"] = session.config.stash.get(_LEFT_OUT, [])


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    left = getattr(node, "workeroutput", {}).get("slow_left_out", [])
    known = node.config.stash.get(_LEFT_OUT, [])
    node.config.stash[_LEFT_OUT] = known + [n for n in left if n not in known]


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    left = config.stash.get(_LEFT_OUT, [])
    if left:
        terminalreporter.write_sep(
            "-", f"{len(left)} slow test(s) left out ({SLOW_ENV}=1 or `make test-slow` runs them)"
        )
        for nodeid in left:
            terminalreporter.write_line(nodeid)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    return xdist_groups.scheduler(config, log)


def pytest_runtest_setup(item: pytest.Item) -> None:
    # Torch in this process (the transformers engine's unit tests, the vLLM tests' reference
    # vectors) runs on one thread: OpenMP's spinning threads stall once xdist's workers share
    # the cores. One graph-bucket test on the loaded 2-core machine: 26 s of CPU with torch's
    # two threads, 14 s with one (its pytest process, collection included).
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != 1:
        torch.set_num_threads(1)


IN_PROCESS_LEASE_TTL_S = 120.0


class InProcessStack:
    """A real frontend and real hash workers on loopback ports, served from one background loop.

    For tests that need many requests against live servers without process start-up.
    """

    def __init__(self, models: list[str], *, frontend: dict[str, Any] | None = None) -> None:
        self.models = models
        self.frontend_options = frontend or {}
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.frontend: Frontend | None = None
        self.workers: list[Worker] = []

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=60)

    def __enter__(self) -> InProcessStack:
        self.thread.start()
        try:
            self.call(self._start())
        except BaseException:
            self.__exit__()
            raise
        return self

    async def _start(self) -> None:
        # A long lease: this loop shares its process with the test, and a busy machine once
        # stalled it past the default 3 s, so that both workers lapsed and a check got a 503.
        options = {"lease_ttl": IN_PROCESS_LEASE_TTL_S, **self.frontend_options}
        self.frontend = Frontend(FrontendConfig(port=0, seed=0, **options))
        await self.frontend.start()
        for i, model in enumerate(self.models):
            worker = Worker(
                WorkerConfig(
                    engine="hash",
                    served_model_name=model,
                    endpoint=f"test.w{i}.generate",
                    frontend_url=self.url,
                    engine_options=EngineOptions(dim=16, max_model_len=64),
                )
            )
            await worker.start()
            self.workers.append(worker)

    @property
    def url(self) -> str:
        assert self.frontend is not None
        return f"http://127.0.0.1:{self.frontend.port}"

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            for worker in self.workers:
                await worker.close()
            if self.frontend is not None:
                await self.frontend.close()

        if self.thread.is_alive():
            try:
                self.call(stop())
            finally:
                self.loop.call_soon_threadsafe(self.loop.stop)
                self.thread.join(timeout=10)


@pytest.fixture
def inprocess_stack() -> Iterator[InProcessStack]:
    with InProcessStack(["model-a", "model-b"]) as stack:
        yield stack


@pytest.fixture
def router_plugin() -> Iterator[Any]:
    """tests/plugins/router_stack.py, registered for this test only.

    The module registers its stack when first imported, once per process: a test that imported
    it and left it registered put 'toy-router' in another test's list of built-in stacks (an
    xdist worker runs unit and integration tests in one process)."""
    from embedlab.cluster.stack_registry import STACKS, register_stack
    from tests.plugins import router_stack

    register_stack(router_stack.NAME, router_stack.ToyRouterStack, replace=True)
    try:
        yield router_stack
    finally:
        STACKS.unregister(router_stack.NAME)
