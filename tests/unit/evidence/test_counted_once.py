"""Every request counted exactly once, in its pure parts: the router's own counts parsed from real
exposition, the accounting that binds them to the workers' counters, probes no cache has seen, the
frontend's faults that miscount, and the quiet burst's words for answers no worker counted."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from embedlab.errors import ConfigError
from embedlab.evidence.accounting import Accounting, RouterCounts
from embedlab.evidence.clients import run_sync
from embedlab.evidence.router import KNOWN, known_router, parse_router, router_metrics
from embedlab.evidence.traffic import Probes, probes, probing
from embedlab.scenarios.burst import judge
from embedlab.serving.frontend.faults import Fault, FaultInjector, parse_fault
from embedlab.verdicts import Verdict

from ..notebook.test_result_views import burst


def _exposition(admitted: dict[str, int], answered: dict[tuple[str, str], int]) -> str:
    """What the embedded frontend serves, made by prometheus_client itself."""
    registry = CollectorRegistry()
    took = Counter("embedlab_frontend_requests_admitted", "taken", ["model"], registry=registry)
    done = Counter("embedlab_frontend_requests", "answered", ["model", "status"], registry=registry)
    for model, n in admitted.items():
        took.labels(model).inc(n)
    for (model, status), n in answered.items():
        done.labels(model, status).inc(n)
    return generate_latest(registry).decode()


def test_the_routers_counts_are_read_per_model_from_its_exposition() -> None:
    metrics = known_router("http://r", "embedlab_frontend_requests_admitted_total")
    text = _exposition({"a": 7, "b": 3}, {("a", "200"): 5, ("a", "503"): 1, ("b", "200"): 3})
    counts = parse_router(text, metrics)
    assert counts.admitted == {"a": 7.0, "b": 3.0}
    assert counts.answered == {"a": 6.0, "b": 3.0} and counts.ok == {"a": 5.0, "b": 3.0}
    assert counts.retried == {}  # its retry counter has no series before its first retry: 0
    assert metrics.metrics == "http://r/metrics" and metrics.name == "the embedded frontend"


def test_dynamos_counts_are_known_by_their_names_and_other_routers_by_their_selectors() -> None:
    assert set(KNOWN) == {
        "embedlab_frontend_requests_admitted_total",
        "dynamo_frontend_requests_started_total",
        "smg_router_requests_total",
    }
    named = router_metrics(
        "http://r:9", admitted="my_started_total", answered="my_total", success='code="ok",kind=unary'
    )
    assert named is not None and named.success == (("code", "ok"), ("kind", "unary"))
    assert router_metrics("") is None
    with pytest.raises(ConfigError, match="--router-answered"):
        router_metrics("http://r:9", admitted="my_started_total")
    with pytest.raises(ConfigError, match="label=value"):
        router_metrics("http://r:9", admitted="x", answered="y", success="ok")


def _counts(
    admitted: dict[str, float], answered: dict[str, float], ok: dict[str, float] | None = None
) -> RouterCounts:
    return RouterCounts(admitted=admitted, answered=answered, ok=answered if ok is None else ok)


def test_in_flight_requests_at_any_boundary_are_never_a_miscount() -> None:
    """The router admits before a worker counts, and answers after: whatever is in flight at a
    read lies between the two, and the identity holds at every boundary."""
    acc = Accounting(["a", "a", "b"])
    assert (
        acc.check(
            _counts({"a": 10, "b": 5}, {"a": 8, "b": 5}),
            [5, 4, 5],
            _counts({"a": 11, "b": 5}, {"a": 8, "b": 5}),
        )
        is None
    )
    # 3 of a's in flight at the baseline (slack), and at the next boundary 4 admitted, 2 counted, 1 answered.
    found = acc.check(
        _counts({"a": 15, "b": 9}, {"a": 10, "b": 9}),
        [7, 5, 9],
        _counts({"a": 16, "b": 9}, {"a": 11, "b": 9}),
    )
    assert found is not None and not found.failed and not found.reasons() and not found.notes()


def test_one_leaked_request_is_a_surplus_beside_a_loss_and_a_request_served_twice_a_surplus_alone() -> None:
    acc = Accounting(["a", "b"], "the router")
    quiet = _counts({"a": 0, "b": 0}, {"a": 0, "b": 0})
    assert acc.check(quiet, [0, 0], quiet) is None
    # 10 of a's admitted and answered; 9 counted on a's replica and 1 on b's (refused there: 404).
    leaked = acc.check(
        _counts({"a": 10, "b": 0}, {"a": 10, "b": 0}, {"a": 9, "b": 0}),
        [9, 1],
        _counts({"a": 10, "b": 0}, {"a": 10, "b": 0}),
    )
    assert leaked is not None and leaked.failed and leaked.leaked == {"b": ["a"]}
    assert leaked.reasons() == [
        "'b''s replicas counted 1 request more than the router admitted for 'b', while 'a' lost as many: "
        "requests of 'a' landed on 'b''s replicas"
    ]
    acc.restart()
    assert acc.check(quiet, [0, 0], quiet) is None
    doubled = acc.check(
        _counts({"a": 10, "b": 0}, {"a": 10, "b": 0}), [11, 0], _counts({"a": 10, "b": 0}, {"a": 10, "b": 0})
    )
    assert doubled is not None and doubled.failed and not doubled.leaked
    assert "served twice" in doubled.reasons()[0] and "around the router" in doubled.reasons()[0]


def test_retries_the_router_counts_explain_a_second_count() -> None:
    acc = Accounting(["a", "a"])
    zero = RouterCounts(admitted={"a": 0}, answered={"a": 0}, ok={"a": 0}, retried={"a": 0})
    assert acc.check(zero, [0, 0], zero) is None
    retried = RouterCounts(admitted={"a": 10}, answered={"a": 10}, ok={"a": 10}, retried={"a": 1})
    found = acc.check(retried, [6, 5], retried)
    assert found is not None and not found.failed


def test_answers_no_replica_counted_are_named_as_a_cache_not_failed() -> None:
    acc = Accounting(["a", "a"], "LiteLLM")
    zero = _counts({"a": 0}, {"a": 0})
    assert acc.check(zero, [0, 0], zero) is None
    cached = acc.check(_counts({"a": 20}, {"a": 20}), [6, 4], _counts({"a": 20}, {"a": 20}))
    assert cached is not None and not cached.failed
    assert cached.notes() == [
        "LiteLLM answered 10 requests of 'a' with success that no replica of it counted (a response "
        "cache, or the router answering for itself): not judged as routing"
    ]


def test_the_other_clients_traffic_is_the_routers_admissions_less_the_checks() -> None:
    acc = Accounting(["a", "b"])
    before, after = _counts({"a": 3, "b": 1}, {}), _counts({"a": 30, "b": 9}, {})
    assert acc.others(before, after, {"a": 20}) == {"a": 7.0, "b": 8.0}


def test_probes_never_repeat_and_replay_on_purpose() -> None:
    first = Probes(seed=3)
    bodies = first.take(5) + first.take(5)
    assert len(set(bodies)) == 10 and all(first.nonce in b for b in bodies)
    assert Probes().nonce != first.nonce  # two runs never share a body
    again = Probes(first.nonce, 3, replayed=True)
    assert again.take(5) + again.take(5) == bodies
    assert again.to_json() == {"nonce": first.nonce, "seed": 3, "bodies": 10, "replayed": True}


def test_a_runs_probes_follow_it_into_run_sync_from_a_running_loop() -> None:
    """A notebook's kernel has a loop running: run_sync goes through a thread, and the probes with it."""

    async def inner() -> str:
        return probes().nonce

    async def kernel() -> str:
        with probing("feedbeef") as drawn:
            assert drawn.replayed
            return run_sync(inner())  # a loop runs here: run_sync takes its thread

    assert asyncio.run(kernel()) == "feedbeef"
    assert probes().nonce != probes().nonce  # outside a run: fresh each time


def test_the_frontends_miscounting_faults_parse_and_keep_their_rules() -> None:
    assert parse_fault("double:0.1") == Fault("double", 0.1)
    assert parse_fault("cache") == Fault("cache") and parse_fault("shared-rr") == Fault("shared-rr")
    with pytest.raises(ConfigError, match="takes no parameter"):
        parse_fault("cache:1")
    injector = FaultInjector([parse_fault("double:0.1"), parse_fault("cache")], seed=1)
    assert sum(injector.doubles("a") for _ in range(100)) == 10  # exactly one in ten
    assert injector.cached(b"x") is None
    injector.keep(b"x", 200, b"answer", "application/json")
    injector.keep(b"y", 503, b"busy", "application/json")
    assert injector.cached(b"x") == (200, b"answer", "application/json") and injector.cached(b"y") is None


def test_a_quiet_burst_whose_answers_moved_no_counter_says_so_and_blames_no_still_worker() -> None:
    # 40 answered, 30 counted: worker 1 still. Not a leak, not "no traffic reached worker 1".
    short = burst("m", "m", [30, 0], shares={0: 0.5, 1: 0.5}, require_all=True)
    short.traffic.n = 40
    short.traffic.records += short.traffic.records[:10]
    verdict, reasons = judge([short], exact_total=True)
    assert verdict is Verdict.FAILED and len(reasons) == 1, reasons
    assert reasons[0].startswith("m: 10 of its 40 answered requests moved no worker's counter")
    assert "no traffic reached" not in reasons[0]
    short.replayed = True  # the run sent an earlier run's bodies on purpose: a cache may answer them
    verdict, reasons = judge([short], exact_total=True)
    assert verdict is Verdict.INCONCLUSIVE and "replays an earlier run's request bodies" in reasons[0]
    doubled = burst("m", "m", [21, 21], shares={0: 0.5, 1: 0.5})
    doubled.traffic.n = 40
    verdict, reasons = judge([doubled], exact_total=True)
    assert verdict is Verdict.FAILED and "counted twice" in reasons[-1], reasons
