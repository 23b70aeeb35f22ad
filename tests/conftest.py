"""Fixtures shared by the suite: tiny models, an in-process stack on real loopback HTTP."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from embedlab.engines import EngineOptions
from embedlab.serving.frontend.app import Frontend, FrontendConfig
from embedlab.serving.worker.app import Worker, WorkerConfig

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from embedlab.engines.tiny import cached_tiny_model

    cache = Path(os.environ.get("EMBEDLAB_TEST_MODEL_CACHE") or tmp_path_factory.mktemp("models"))
    return {arch: cached_tiny_model(arch, cache_dir=cache) for arch in ("bert", "qwen3")}


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
        self.frontend = Frontend(FrontendConfig(port=0, seed=0, **self.frontend_options))
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
