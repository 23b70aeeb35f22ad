"""The watch's loop against a pool behind httpx.MockTransport: what a live pool does, as events.

The workers' /metrics come from private prometheus_client registries (a worker that restarts
gets a fresh one: its counter resets); the frontend places each request on a replica of its
model, or, leaking, on a worker of another model, which refuses it (404) as embedlab's
workers do. Windows of 0.05 s and no rate cap make a minute of watching take seconds; the
real processes are tests/integration/test_watch.py's.
"""

from __future__ import annotations

import asyncio
import random

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from embedlab.defaults import WORKER_HEADER
from embedlab.evidence.target import attach
from embedlab.watch import names
from embedlab.watch.exporter import Exporter
from embedlab.watch.runner import Watch, WatchConfig

FRONTEND = "http://frontend.test:8000"


class MockPool:
    def __init__(
        self,
        models: list[str],
        *,
        leak: float = 0.0,
        background: float = 0.08,
        seed: int = 0,
        names: bool = True,
        fault: str = "",
    ) -> None:
        """`fault`: one of the embedded frontend's (serving/frontend/faults.py), as it acts on a
        request: `stick`, `skew:w`, `drop:p` (503, no worker), `double:p` (served by two
        replicas), `cache:p` (200, no worker), `slow:ms` (the first replica answers late)."""
        self.models, self.leak, self.background, self.names = models, leak, background, names
        name, _, param = fault.partition(":")
        self.fault, self.param = name, float(param or 0)
        self.rng = random.Random(seed)
        self.registries = [self._registry() for _ in models]
        self.unreadable: set[int] = set()
        self.frontend_down = False
        self.registering = False  # a frontend that restarted: it knows no model until its workers register

    def _registry(self) -> tuple[CollectorRegistry, Counter]:
        registry = CollectorRegistry()
        return registry, Counter("dynamo_component_requests", "requests", registry=registry)

    def restart(self, worker: int) -> None:
        self.registries[worker] = self._registry()

    def urls(self) -> list[str]:
        return [f"http://worker{i}.test:9000" for i in range(len(self.models))]

    def handle(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        if host.startswith("worker"):
            i = int(host.removeprefix("worker").split(".")[0])
            if i in self.unreadable:
                raise httpx.ConnectTimeout("timed out", request=request)
            # Another client's requests, counted between reads: independent of the schedule.
            self.registries[i][1].inc(sum(self.rng.random() < self.background for _ in range(3)))
            return httpx.Response(200, content=generate_latest(self.registries[i][0]))
        if self.frontend_down:
            raise httpx.ConnectError("connection refused", request=request)
        if self.registering:
            return httpx.Response(404, json={"error": {"code": "model_not_found"}})
        import json

        model = json.loads(request.content)["model"]
        own = [i for i, m in enumerate(self.models) if m == model]
        other = [i for i, m in enumerate(self.models) if m != model]
        leaks = other and self.rng.random() < self.leak
        i = self.rng.choice(other if leaks else own)
        if self.fault == "stick" or (self.fault == "skew" and self.rng.random() < self.param):
            i = own[0]
        elif self.fault == "skew":
            i = self.rng.choice(own[1:])
        if self.fault == "drop" and self.rng.random() < self.param:
            return httpx.Response(503, json={"error": {"message": "dropped"}})
        if self.fault == "cache" and self.rng.random() < self.param:
            return httpx.Response(200, json={"data": [{"embedding": [0.1]}]})
        self.registries[i][1].inc()
        if self.fault == "double" and self.rng.random() < self.param:
            self.registries[self.rng.choice([j for j in own if j != i] or own)][1].inc()
        headers = {WORKER_HEADER: f"dynamo.embed-worker-{i + 1}.generate/{i:016x}"} if self.names else {}
        if leaks:
            return httpx.Response(404, json={"error": {"code": "model_not_found"}}, headers=headers)
        return httpx.Response(200, json={"data": [{"embedding": [0.1]}]}, headers=headers)

    async def answer(self, request: httpx.Request) -> httpx.Response:
        response = self.handle(request)
        named = response.headers.get(WORKER_HEADER)
        if self.fault == "slow" and named:
            i = int(named.rsplit("/", 1)[1], 16)
            if self.models.index(self.models[i]) == i:  # the first replica of its model
                await asyncio.sleep(self.param / 1000)
        return response


def watch_on(
    pool: MockPool, *, seconds: float, script=None, until=None, max_rate: float = 1e6, target=None
) -> tuple[Watch, Exporter]:
    """Watch `pool` until `until(watch)` holds (`seconds`: the generous deadline), `script(now)`
    changing the pool as it goes; `target`: how it is attached (default: each worker's /metrics)."""
    target = target or attach(FRONTEND, pool.urls(), models=pool.models)
    config = WatchConfig(
        max_rate=max_rate,
        window_s=0.05,
        horizon_s=60,
        stagger_s=20,
        duration_s=seconds,
        seed=3,
        scrape_timeout_s=1,
        settle_s=0.3,
        retry_s=0.1,
    )
    exporter = Exporter()
    stop = asyncio.Event()

    def update(watch: Watch) -> None:
        if script is not None:
            script(watch.now)
        exporter.update(watch)
        if until is not None and until(watch):
            stop.set()

    watch = Watch(target, config, on_update=update, transport=httpx.MockTransport(pool.answer))

    async def main() -> None:
        stop.clear()  # made on this loop's behalf, outside it
        await watch.run(stop)

    asyncio.run(main())
    exporter.update(watch)
    return watch, exporter


def families(exporter: Exporter) -> dict[str, list]:
    """Samples by their own name (a counter's keep `_total`, which its family's name drops)."""
    text = generate_latest(exporter.registry).decode()
    found: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append(sample)
    return found


def verdicts(exporter: Exporter) -> dict[tuple[str, str], str]:
    on = {}
    for sample in families(exporter)[names.VERDICT]:
        if sample.value == 1:
            key = (sample.labels[names.CHECK], sample.labels[names.MODEL])
            assert key not in on, "a state set has one state at 1"
            on[key] = sample.labels[names.STATE]
    return on


def test_a_correct_pool_through_restarts_timeouts_and_a_frontend_outage() -> None:
    pool = MockPool(["a", "a", "b", "b"], seed=1)

    # Each trouble in turn, each lasting until the watch has said so (no guessed durations).
    watch_of: list[Watch] = []

    def seen(kind: str) -> bool:
        return kind in watch_of[0].event_counts

    def script(now: float) -> None:
        if not watch_of:
            return
        pool.unreadable = {1} if now >= 2 and not seen("unreadable") else set()
        if seen("readable") and not getattr(pool, "restarted", False):
            pool.restarted = True
            pool.restart(2)
        pool.frontend_down = seen("reset") and not seen("unreachable")
        pool.registering = seen("reachable") and not seen("refused")

    def settled(watch: Watch) -> bool:
        if not watch_of:
            watch_of.append(watch)
        return seen("answered") and all(s.state == names.OK for s in watch.states())

    watch, exporter = watch_on(pool, seconds=90, script=script, until=settled)
    kinds = {e.kind for e in watch.events}
    assert {"unreadable", "readable", "reset", "unreachable", "reachable", "refused", "answered"} <= kinds, (
        kinds
    )
    assert "alarm" not in kinds and all(s.alarms == 0 for s in watch.states())
    assert watch.scrape_failures[1] >= 1 and watch.blocks["kept"] > 20
    assert set(verdicts(exporter).values()) == {names.OK}
    found = families(exporter)
    assert {s.labels[names.WORKER] for s in found[names.SHARE]} == {"0", "1", "2", "3"}
    failures = {s.labels[names.WORKER]: s.value for s in found[names.SCRAPE_FAILURES]}
    assert failures["1"] >= 1
    assert any(s.value > 0 for s in found[names.POOL_RATE])


def test_a_restart_between_blocks_is_named_too() -> None:
    # A rate cap leaves gaps between blocks, and each block after a gap reads afresh: a worker
    # that restarts in a gap is seen only by comparing the reads on either side of it.
    pool = MockPool(["a", "a", "b", "b"], seed=5)
    restarts: list[float] = []

    def script(now: float) -> None:  # run after each block, before its gap
        if now >= 1 and not restarts:
            restarts.append(now)
            pool.restart(2)

    watch, _ = watch_on(
        pool, seconds=30, script=script, max_rate=40, until=lambda w: "reset" in w.event_counts
    )
    assert restarts and watch.event_counts.get("reset") == 1, watch.event_counts
    assert any("worker 2's counter went down" in e.detail for e in watch.events if e.kind == "reset")


def test_a_leak_is_one_alarm_per_model_proven_by_the_refusals() -> None:
    pool = MockPool(["a", "a", "b", "b"], seed=2)
    pool.leak = 0.0

    def script(now: float) -> None:
        pool.leak = 0.02 if now >= 4 else 0.0

    def alarmed(watch: Watch) -> bool:
        # Both models' alarms, then a further 3 s of refusals that must raise none.
        times = [t.at for t in watch.transitions if t.alarm]
        return len(times) >= 2 and watch.now > max(times) + 3

    watch, exporter = watch_on(pool, seconds=60, script=script, until=alarmed)
    alarms = {
        (s.labels[names.CHECK], s.labels[names.MODEL]): s.value for s in families(exporter)[names.ALARMS]
    }
    assert alarms[(names.MULTI_MODEL, "a")] == 1 and alarms[(names.MULTI_MODEL, "b")] == 1
    assert alarms[(names.SAME_MODEL, "a")] == 0
    assert sum(watch.misplaced.values()) > 2  # more refusals than alarms: one fault, one alarm
    assert verdicts(exporter)[(names.MULTI_MODEL, "a")] == names.FAILING
    first = min(t.at for t in watch.transitions if t.alarm)
    assert first >= 4


@pytest.mark.parametrize("models", [["a", "a"], ["a", "b"]])
def test_small_pools_decide_too(models: list[str]) -> None:
    watch, exporter = watch_on(
        MockPool(models, seed=4), seconds=60, until=lambda w: all(s.state == names.OK for s in w.states())
    )
    assert set(verdicts(exporter).values()) == {names.OK}


def test_through_a_router_that_names_no_worker_the_counters_find_a_leak() -> None:
    # The wrong worker's refusals carry no header: counted where they landed, the counters convict.
    pool = MockPool(["a", "a", "b", "b"], seed=5, names=False)

    def script(now: float) -> None:
        pool.leak = 0.3 if now >= 2 else 0.0

    watch, exporter = watch_on(
        pool, seconds=60, script=script, until=lambda w: any(t.alarm for t in w.transitions)
    )
    # A leak of 0.3 also takes a share from each replica of the model it leaks from: the
    # same-model check may convict it first (its replicas' shares off their weights').
    alarms = [t for t in watch.transitions if t.alarm]
    assert all("counters rule out a correct router" in t.why and t.at >= 2 for t in alarms), alarms
    assert sum(watch.misplaced.values()) == 0


def test_the_page_shows_the_verdicts_alarms_and_events(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from embedlab.watch.page import Page

    pool = MockPool(["a", "b"], seed=7)

    def script(now: float) -> None:
        pool.leak = 0.05 if now >= 1 else 0.0

    watch, exporter = watch_on(
        pool, seconds=60, script=script, until=lambda w: any(t.alarm for t in w.transitions)
    )
    Page(tmp_path / "page").write(watch, exporter.update(watch), force=True)
    page = (tmp_path / "page" / "index.html").read_text()
    assert '<meta http-equiv="refresh"' in page and "<svg" in page
    assert all(str(k) in page for k in watch.pool.keys) and "failing" in page and "misplaced" in page
    data = json.loads((tmp_path / "page" / "watch.json").read_text())
    assert any(t["alarm"] for t in data["transitions"]) and data["events"]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--system-url", "http://127.0.0.1:9"], "needs --frontend-url"),
        (
            ["--frontend-url", "http://127.0.0.1:9", "--system-url", "http://127.0.0.1:9"],
            "each worker's model",
        ),
        (
            [
                "--frontend-url",
                "http://127.0.0.1:9",
                "--system-url",
                "http://127.0.0.1:9",
                "--worker-models",
                "a",
            ],
            "nothing to check",
        ),
        (
            ["--frontend-url", "x", "--system-url", "y", "--worker-models", "a", "--max-rate", "0"],
            "must be positive",
        ),
    ],
)
def test_the_command_refuses_what_cannot_work_in_one_line(argv: list[str], says: str, capsys) -> None:  # type: ignore[no-untyped-def]
    from embedlab.cli import main

    try:
        code = main(["watch", *argv])
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and says in err and len(err.splitlines()) == 1, err


# Each fault on the watch's loop (the busy schedule's matrix is
# tests/unit/evidence/busy/test_busy_fault_matrix.py's; double and cache, which only the counts
# convict, are test_watch_judge.py's), by the check that convicts it.
# `ghost` is not here: it acts only on an instance that left the pool, and a watched pool's workers
# stay (drain's and failover's checks see it). `leak`: test_a_leak_is_one_alarm_per_model_proven_by_the_refusals.
@pytest.mark.parametrize("fault", ["stick", "skew:0.9"])
def test_a_replica_given_more_than_its_share_is_convicted_by_the_same_model_check(fault: str) -> None:
    pool = MockPool(["a", "a", "b", "b"], seed=6, fault=fault)
    failing = {(names.SAME_MODEL, "a"), (names.SAME_MODEL, "b")}

    def decided(watch: Watch) -> bool:
        return {(t.key.check, t.key.model) for t in watch.transitions if t.alarm} >= failing

    watch, exporter = watch_on(pool, seconds=90, until=decided)
    found = verdicts(exporter)
    assert {k for k, state in found.items() if state == names.FAILING} == failing, (fault, found)
    assert {(t.key.check, t.key.model) for t in watch.transitions if t.alarm} == failing
    assert any("counters rule out a correct router" in t.why for t in watch.transitions if t.alarm)


def test_a_slow_replica_sets_blocks_aside_and_accuses_nothing() -> None:
    """`slow:60`: each model's first replica answers 60 ms late, past its 50 ms window's closing
    read: the block is set aside (its late answer would count in the next window) and run again.
    Where the requests went is right, so no check fails."""
    pool = MockPool(["a", "a", "b", "b"], seed=6, fault="slow:60")
    watch, exporter = watch_on(
        pool, seconds=90, until=lambda w: w.blocks.get("late", 0) >= 3 and w.blocks.get("kept", 0) >= 20
    )
    assert names.FAILING not in set(verdicts(exporter).values()) and not any(
        t.alarm for t in watch.transitions
    )
    assert watch.blocks["late"] >= 3 and watch.blocks["kept"] >= 20, watch.blocks


def test_a_frontend_that_drops_requests_is_named_and_judges_nothing() -> None:
    """`drop:0.2`: the frontend answers one request in five 503 itself. A block with a request that
    reached no worker is set aside (its counters cannot be read as the check's), so no check
    decides on them: the watch names the refusals, turns nothing ok, and accuses no routing."""
    pool = MockPool(["a", "a", "b", "b"], seed=6, fault="drop:0.2")
    watch, exporter = watch_on(pool, seconds=90, until=lambda w: w.blocks.get("refused", 0) >= 5)
    refused = [e for e in watch.events if e.kind == "refused"]
    assert refused and "the frontend answered for itself (HTTP 503), not a worker" in refused[0].detail
    assert names.OK not in set(verdicts(exporter).values()) and not any(t.alarm for t in watch.transitions)
    assert watch.blocks["refused"] > watch.blocks.get("kept", 0), watch.blocks
