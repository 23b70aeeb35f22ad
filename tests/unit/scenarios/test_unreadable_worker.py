"""A worker that cannot be read when a burst reads it (down, restarting, unreachable): the burst is
inconclusive for that worker, the scenario has it on its timeline and in its figures, and nothing
raises. Without servers: httpx.MockTransport over private prometheus registries."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from embedlab import ScrapeError, Target, Verdict
from embedlab.evidence import clients
from embedlab.evidence.traffic import BurstResult
from embedlab.scenarios.builtin.cluster import _judged
from embedlab.scenarios.builtin.cluster_figures import FaultFigures
from embedlab.scenarios.burst import BurstSpec, judge, mark_unread, run_burst, unread_events, unread_of
from embedlab.scenarios.result import Burst, ScenarioResult

URLS = ("http://worker0.test", "http://worker1.test")


class Pool:
    """Two workers with real counters behind a round-robin frontend; `down` workers refuse every
    connection once `down_after` of their scrapes have been answered."""

    def __init__(self) -> None:
        self.registries = [CollectorRegistry() for _ in URLS]
        self.counters = [
            Counter("dynamo_component_requests", "requests", registry=r) for r in self.registries
        ]
        self.scrapes = [0, 0]
        self.down: dict[int, int] = {}  # worker -> scrapes it answers before it goes down
        self.sent = 0

    def handler(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            index = int(request.url.host.removeprefix("worker").removesuffix(".test"))
            if index in self.down and self.scrapes[index] >= self.down[index]:
                raise httpx.ConnectError("All connection attempts failed", request=request)
            self.scrapes[index] += 1
            return httpx.Response(200, content=generate_latest(self.registries[index]))
        model = json.loads(request.content)["model"]
        self.counters[self.sent % 2].inc()
        self.sent += 1
        data = [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}]
        usage = {"prompt_tokens": 1, "total_tokens": 1}
        return httpx.Response(200, json={"object": "list", "data": data, "model": model, "usage": usage})

    def burst(self, monkeypatch: pytest.MonkeyPatch) -> Burst:
        def mocked(**options: Any) -> httpx.AsyncClient:
            options.pop("transport", None)
            return httpx.AsyncClient(transport=httpx.MockTransport(self.handler), **options)

        monkeypatch.setattr(clients, "scrape_client", mocked)
        monkeypatch.setattr(clients, "async_client", mocked)
        target = Target(frontend_url="http://frontend.test", system_urls=URLS, models=("m", "m"))
        spec = BurstSpec(name="m", model="m", expected=frozenset({0, 1}), requests=10, quiet_s=0.0)
        return asyncio.run(run_burst(target, spec))


def test_a_burst_reads_both_workers_and_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    burst = Pool().burst(monkeypatch)
    assert burst.inconclusive is None and burst.unread is None
    assert judge([burst], exact_total=True) == (Verdict.PASSED, [])


def test_a_worker_down_before_the_burst_makes_it_inconclusive_and_the_traffic_is_still_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pool = Pool()
    pool.down = {1: 0}
    burst = pool.burst(monkeypatch)
    assert burst.inconclusive == "worker 1 could not be read before the burst"
    assert burst.unread is not None and burst.unread.worker == 1 and burst.unread.when == "before the burst"
    assert "ConnectError: All connection attempts failed" in burst.unread.error
    assert burst.traffic.n == 10 and pool.sent == 10 and burst.check is None
    assert judge([burst], exact_total=True) == (
        Verdict.INCONCLUSIVE,
        ["m: worker 1 could not be read before the burst"],
    )
    assert burst.to_json()["unread"]["worker"] == 1


def test_a_worker_gone_after_the_burst_takes_the_same_path(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = Pool()
    pool.down = {0: 1}  # its baseline answered, then it died
    burst = pool.burst(monkeypatch)
    assert burst.inconclusive == "worker 0 could not be read after the burst"
    assert burst.unread is not None and burst.unread.when == "after the burst"
    assert judge([burst], exact_total=True)[0] == Verdict.INCONCLUSIVE


def nothing_sent(model: str) -> BurstResult:
    return BurstResult(model=model, n=0, concurrency=1, records=[], wall_seconds=0.0)


def test_an_unread_worker_is_an_event_at_the_time_it_was_read() -> None:
    burst = Burst(name="m", model="m", expected=frozenset({0, 1}), traffic=nothing_sent("m"))
    unread = unread_of(ScrapeError("worker 1: cannot scrape", worker_index=1), "before the burst")
    mark_unread(burst, unread)
    (event,) = unread_events([burst], origin=unread.at - 12.5)
    assert event.kind == "unreadable" and event.at == pytest.approx(12.5)
    assert event.detail == "m: worker 1 could not be read before the burst"
    assert (
        unread_events([Burst(name="n", model="n", expected=frozenset(), traffic=nothing_sent("n"))], 0.0)
        == []
    )


def _result(verdict: Verdict, reasons: list[str]) -> ScenarioResult:
    return ScenarioResult(
        scenario="same-model",
        stack="dynamo",
        params={},
        workers=[],
        bursts=[],
        verdict=verdict,
        reasons=reasons,
    )


def test_a_fault_whose_recovery_could_not_read_a_worker_is_inconclusive_not_failed() -> None:
    assert _judged(_result(Verdict.PASSED, [])) == (Verdict.PASSED, [])
    inconclusive = _result(Verdict.INCONCLUSIVE, ["m: worker 0 could not be read before the burst"])
    assert _judged(inconclusive) == (
        Verdict.INCONCLUSIVE,
        ["after recovery: m: worker 0 could not be read before the burst"],
    )
    assert _judged(_result(Verdict.FAILED, ["m: no traffic reached worker 1"]))[0] == Verdict.FAILED


def test_fault_figures_show_the_unread_worker_and_a_recovery_not_judged() -> None:
    unread = unread_of(
        ScrapeError("worker 0: cannot scrape: ConnectError", worker_index=0), "before the burst"
    )
    figures = FaultFigures(
        fault="etcd stop of 3 s",
        started_s=2.0,
        ended_s=5.0,
        failed_requests=0,
        status_codes={},
        longest_hang_s=0.1,
        served_during_fault=40,
        left_dispatch_after_s=None,
        back_after_s=1.0,
        recovered=False,
        not_judged=unread.reason,
        unread=(unread,),
    )
    rows = dict(figures.rows())
    assert rows["recovery burst (asserted)"] == "not judged: worker 0 could not be read before the burst"
    assert rows["worker 0 not read before the burst"] == "worker 0: cannot scrape: ConnectError"
    assert figures.key_figures()["recovered"] == "not judged"
    assert figures.to_json()["unread"][0]["worker"] == 0
    failed = FaultFigures(**{**figures.__dict__, "not_judged": None, "unread": ()})
    assert dict(failed.rows())["recovery burst (asserted)"] == "FAILED"
    assert failed.key_figures()["recovered"] == "NO"
