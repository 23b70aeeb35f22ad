"""What a result's table, figure and verdict line say, from results built by hand (pure view logic)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from embedlab import CheckFailedError, plot, table, verdict
from embedlab.evidence.counters import evaluate
from embedlab.evidence.metrics import DEFAULT_METRIC, Snapshot
from embedlab.evidence.traffic import BurstResult, RequestRecord
from embedlab.scenarios.result import Burst, ScenarioResult, WorkerInfo
from embedlab.verdicts import Verdict


def snapshots(values: Sequence[float]) -> list[Snapshot]:
    return [
        Snapshot(url=f"http://w{i}", query=DEFAULT_METRIC, series=(((), float(v)),))
        for i, v in enumerate(values)
    ]


def burst(
    name: str, model: str, deltas: Sequence[float], *, shares: dict[int, float], **judged: object
) -> Burst:
    """A burst whose counters moved by `deltas`, judged as `run_burst` judges one."""
    n = int(sum(deltas))
    records = [
        RequestRecord(index=i, model=model, started=0.0, latency=0.01, status=200, worker=None, inputs=1)
        for i in range(n)
    ]
    check = evaluate(
        [f"http://w{i}" for i in range(len(deltas))],
        snapshots([0] * len(deltas)),
        snapshots(deltas),
        shares,
        **judged,
    )  # type: ignore[arg-type]
    traffic = BurstResult(model=model, n=n, concurrency=4, records=records, wall_seconds=0.1)
    return Burst(
        name=name,
        model=model,
        expected=frozenset(shares),
        traffic=traffic,
        check=check,
        expected_shares=shares,
    )


def result(
    bursts: list[Burst], models: Sequence[str], *, verdict: Verdict = Verdict.PASSED, engine: str = "hash"
) -> ScenarioResult:
    workers = [
        WorkerInfo(index=i, system_url=f"http://w{i}", model=m, engine=engine) for i, m in enumerate(models)
    ]
    return ScenarioResult(
        scenario="mixed",
        stack="embedded",
        params={},
        workers=workers,
        bursts=bursts,
        verdict=verdict,
        reasons=[],
    )


MODELS = ["model-a", "model-a", "model-a", "model-b"]  # replicas = [3, 1]
# 40 requests per model: model-a's over its three replicas, model-b's on its one.
SHARES = {0: 1 / 6, 1: 1 / 6, 2: 1 / 6, 3: 1 / 2}


def test_expected_delta_is_the_exact_share_of_the_burst() -> None:
    mixed = result([burst("alternate", "model-a+model-b", [14, 13, 13, 40], shares=SHARES)], MODELS)
    frame = table(mixed)
    assert list(frame["expected_delta"]) == [13.333, 13.333, 13.333, 40.0]
    assert "13.333" in frame._repr_html_() and "13.300" not in frame._repr_html_()
    # Whole expectations stay whole numbers.
    even = result([burst("alternate", "model-a+model-b", [20, 20], shares={0: 0.5, 1: 0.5})], MODELS[2:])
    assert str(table(even)["expected_delta"].dtype) == "Int64"


def test_a_still_worker_the_rule_allows_is_not_asserted_not_false() -> None:
    # Four workers, four requests: a correct router leaves one still 90.6% of the time, so
    # the rule does not assert that every worker moves, and the run passes.
    shares = {i: 0.25 for i in range(4)}
    loose = result(
        [burst("embed-model", "embed-model", [2, 2, 0, 0], shares=shares, require_all=False)],
        ["embed-model"] * 4,
    )
    assert list(table(loose)["ok"]) == [True, True, "not asserted", "not asserted"]
    # Where the rule asserts it, a still worker is a failure, and its row says False.
    strict = burst("embed-model", "embed-model", [2, 2, 0, 0], shares=shares)
    assert [r.ok for r in strict.check.rows] == [True, True, False, False]  # type: ignore[union-attr]
    assert "no traffic reached worker 2, worker 3" in strict.check.reasons  # type: ignore[union-attr]
    # Only some workers must move (one model's replicas, not another's): each row says which.
    some = burst("alternate", "a+b", [2, 0, 0, 5], shares=SHARES, must_move={2, 3})
    assert [r.ok for r in some.check.rows] == [True, None, False, True]  # type: ignore[union-attr]
    # A leak is always asserted.
    leak = burst("embed-model", "embed-model", [2, 2, 1], shares={0: 0.5, 1: 0.5}, require_all=False)
    assert [r.ok for r in leak.check.rows] == [True, True, False]  # type: ignore[union-attr]


def test_the_mixed_figure_names_each_burst_by_its_send_order_on_one_y_scale() -> None:
    mixed = result(
        [
            burst("alternate", "model-a+model-b", [14, 13, 13, 40], shares=SHARES),
            burst("random", "model-a+model-b", [30, 5, 5, 40], shares=SHARES),
        ],
        MODELS,
    )
    fig = plot(mixed)
    first, second = fig.axes[:2]
    assert first.get_title().splitlines()[0] == "burst 'alternate': ok"
    assert second.get_title().splitlines()[0] == "burst 'random': ok"
    assert "model-a, model-b" in first.get_title()
    assert first.get_shared_y_axes().joined(first, second)
    assert first.get_ylim() == second.get_ylim() and first.get_ylim()[1] >= 40
    assert fig.get_suptitle() == "mixed on embedded (hash): PASSED"


def test_a_burst_named_for_its_model_keeps_a_one_line_title() -> None:
    dispatch = result(
        [
            burst("model-a", "model-a", [10, 0], shares={0: 1.0}),
            burst("model-b", "model-b", [0, 10], shares={1: 1.0}),
        ],
        ["model-a", "model-b"],
    )
    fig = plot(dispatch)
    assert [ax.get_title() for ax in fig.axes[:2]] == ["burst 'model-a': ok", "burst 'model-b': ok"]


def test_the_verdict_line_names_the_engine_and_an_attached_run_names_none() -> None:
    launched = result([], MODELS)
    assert launched.summary() == "mixed on embedded (hash): PASSED"
    mixed_engines = ScenarioResult(
        scenario="multi-model", stack="embedded", params={}, bursts=[], verdict=Verdict.PASSED, reasons=[],
        workers=[WorkerInfo(0, "http://w0", "a", engine="hash"), WorkerInfo(1, "http://w1", "b", engine="vllm")],
    )  # fmt: skip
    assert mixed_engines.summary() == "multi-model on embedded (hash+vllm): PASSED"
    attached = ScenarioResult(
        scenario="mixed", stack="attached", params={}, workers=[WorkerInfo(0, "http://w0", "a")], bursts=[],
        verdict=Verdict.PASSED, reasons=[],
    )  # fmt: skip
    assert attached.summary() == "mixed on attached: PASSED"
    assert launched.to_json()["engine"] == "hash" and attached.to_json()["engine"] == ""


def test_verdict_prints_a_pass_and_raises_a_failure_without_printing_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    verdict(result([], MODELS))
    assert capsys.readouterr().out == "mixed on embedded (hash): PASSED\n"
    failed = result([], MODELS, verdict=Verdict.FAILED)
    failed.reasons = ["alternate: no traffic reached worker 2"]
    with pytest.raises(
        CheckFailedError, match=r"^mixed on embedded \(hash\): FAILED \(alternate: no traffic"
    ):
        verdict(failed)
    assert capsys.readouterr().out == ""


def test_a_small_burst_that_could_not_decide_agrees_across_its_title_table_and_ticks() -> None:
    # 4/2 over two replicas: no rule broken, but too few requests to judge (issue 43's requests = 6).
    small = burst("m", "m", [4, 2], shares={0: 0.5, 1: 0.5}, require_all=False)
    shown = result([small], ["m", "m"], verdict=Verdict.INCONCLUSIVE)
    counts = plot(shown).axes[0]
    assert counts.get_title().splitlines()[0] == "burst 'm': no fault seen, inconclusive"
    assert all(float(t).is_integer() for t in counts.get_yticks()), counts.get_yticks()
    assert list(table(shown)["expected"]) == ["may move", "may move"]  # nothing unasserted reads as expected
