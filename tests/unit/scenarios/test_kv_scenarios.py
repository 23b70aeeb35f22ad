"""The KV scenarios' arithmetic and figures (scenarios/builtin/kv.py): how many new prefixes
kv-participation sends, and what prefix-affinity shows."""

from __future__ import annotations

import pytest

from embedlab.evidence.kv_view import KvView
from embedlab.scenarios.builtin.kv import PARTICIPATION_MISS, KvFigures, participation_requests


def missed(workers: int, n: int) -> float:
    """The union bound on a random router leaving some worker out of n prompts."""
    return workers * (1 - 1 / workers) ** n


def test_the_default_miss_is_one_in_a_thousand() -> None:
    assert PARTICIPATION_MISS == 0.001


@pytest.mark.parametrize("workers", [-1, 0, 1])
def test_fewer_than_two_workers_need_one_request(workers: int) -> None:
    assert participation_requests(workers) == 1


@pytest.mark.parametrize("miss", [PARTICIPATION_MISS, 0.05, 0.01, 1e-6, 0.5])
@pytest.mark.parametrize("workers", [2, 3, 4, 5, 7, 8, 16, 33, 100])
def test_the_fewest_requests_that_bound_the_miss(workers: int, miss: float) -> None:
    n = participation_requests(workers, miss)
    assert n >= 1
    assert missed(workers, n) <= miss
    assert missed(workers, n - 1) > miss, f"{n - 1} requests would do: {n} is not the fewest"


def test_known_small_cases() -> None:
    # Two workers: 2 * 2^-n <= 0.001 first at n = 11 (n = 10 gives 2/1024, n = 11 gives 2/2048).
    assert participation_requests(2) == 11
    # Two workers and a miss of 1/2: 2 * 2^-2 = 1/2 exactly, so 2.
    assert participation_requests(2, 0.5) == 2


def test_more_workers_need_more_requests() -> None:
    counts = [participation_requests(w) for w in range(2, 40)]
    assert counts == sorted(counts) and len(set(counts)) == len(counts)
    assert all(n > w for w, n in zip(range(2, 40), counts)), "always more prompts than workers"


def test_a_smaller_miss_needs_more_requests() -> None:
    assert participation_requests(5, 0.1) < participation_requests(5, 0.01) < participation_requests(5, 0.001)


# -- KvFigures ---------------------------------------------------------------------------------


def figures(groups: list[dict[str, float]], view: KvView | None = None) -> KvFigures:
    return KvFigures(
        structure="2 groups of 6 prompts",
        groups=groups,
        view=view,
        endpoints={0: "ns.w.generate", 1: "ns.w.generate", 2: ""},
    )


def test_rows_show_where_each_group_went() -> None:
    shown = figures([{"0": 6.0, "1": 0.0, "2": 0.0}, {"0": 2.0, "1": 0.0, "2": 4.0}, {"0": 0.0, "1": 0.0}])
    assert shown.rows() == [
        ("prompts", "2 groups of 6 prompts"),
        ("group 0", "worker 0 +6"),
        ("group 1", "worker 0 +2, worker 2 +4"),
        ("group 2", "no counts"),
    ]


def test_key_figures_count_the_groups_that_stayed_on_one_worker() -> None:
    assert figures([]).key_figures() == {"groups that stayed on one worker": 0}
    shown = figures([{"0": 6.0, "1": 0.0}, {"0": 1.0, "1": 5.0}, {"0": 0.0, "1": 6.0}, {"0": 0.0, "1": 0.0}])
    # Groups 0 and 2 stayed on one worker; group 1 split; group 3 was counted nowhere.
    assert shown.key_figures() == {"groups that stayed on one worker": 2}


def test_the_routers_view_follows_the_groups() -> None:
    view = KvView(ids={0: "w0", 1: "w1"}, made={0: 4.0, 1: 3.0}, applied={0: 4.0, 1: 0.0})
    rows = figures([{"0": 6.0, "1": 0.0}], view).rows()
    assert rows[:2] == [("prompts", "2 groups of 6 prompts"), ("group 0", "worker 0 +6")]
    assert rows[2:] == view.rows()
    assert ("worker 1 KV", "made 3 KV events, router applied 0") in rows


def test_figures_serialise() -> None:
    data = figures([{"0": 6.0}]).to_json()
    assert data["structure"] == "2 groups of 6 prompts"
    assert data["groups"] == [{"0": 6.0}]
    assert data["view"] is None
    assert data["endpoints"] == {0: "ns.w.generate", 1: "ns.w.generate", 2: ""}
