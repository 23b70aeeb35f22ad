"""The simulation fed what real checks measured (bench/verification_power.py --busy): the other
client's variance per window, the frontend's exact leak rule, a kept block's wall time and the
time before the schedule."""

from __future__ import annotations

import numpy as np
import pytest

from embedlab.evidence.busy.simulate import Background, Pool, _counts, simulate
from embedlab.verdicts import Verdict


@pytest.mark.parametrize("fano", [0.2, 1.0, 3.0])
def test_the_other_clients_counts_have_the_mean_and_variance_asked_for(fano: float) -> None:
    counts = _counts(np.random.default_rng(1), np.full(40_000, 12.0), fano)
    assert abs(counts.mean() - 12.0) < 0.1
    assert abs(counts.var() / counts.mean() - fano) < 0.08 * max(1.0, fano)
    assert (_counts(np.random.default_rng(1), np.zeros(5), fano) == 0).all()


def test_the_frontends_leak_rule_leaks_one_in_ten_of_both_clients_requests() -> None:
    # No other client: each window's 20 requests of a model leak exactly 2 (the debt rule), and the
    # check fails every time; at the rule's random phase a 1x other client shares the leaks.
    for multiple in (0.0, 1.0):
        [sim] = simulate(
            Pool.multi_model(2, fault="leak:0.1"), backgrounds=[Background("steady", multiple)],
            runs=40, seed=3, requests=20, leak_rule="debt", fano=0.3,
        )  # fmt: skip
        assert sim.rate(Verdict.FAILED) == 1.0 and sim.count(Verdict.PASSED) == 0
    with pytest.raises(ValueError, match="leak_rule"):
        simulate(Pool.multi_model(2), runs=1, leak_rule="sometimes")


def test_times_follow_the_measured_block_and_the_time_before_the_schedule() -> None:
    [sim] = simulate(
        Pool.same_model(2), backgrounds=[Background("steady", 1.0)], runs=60, seed=4,
        requests=10, window_s=0.25, block_s=0.8, overhead_s=3.0, budget_s=30.0, fano=0.5, rate_per_s=40, router=True,
    )  # fmt: skip
    assert sim.count(Verdict.FAILED) == 0 and sim.rate(Verdict.PASSED) > 0.9
    blocks = (sim.seconds - 3.0) / 0.8
    assert np.allclose(blocks, np.round(blocks)) and sim.seconds.max() <= 3.0 + 0.8 * (30 // 0.8) + 1e-9
