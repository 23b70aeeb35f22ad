"""Explorer on a real embedded deployment: live weights move the split, and the judge has bite."""

from __future__ import annotations

import httpx

from embedlab import Deployment, DeploymentSpec, Explorer, table as embedlab_table


def test_live_weights_move_the_split_and_the_sweep_tracks_them(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with Deployment(DeploymentSpec.same_model("m", workers=2, seed=0), run_dir=tmp_path) as dep:
        explorer = Explorer(dep)
        first = explorer.burst(20)
        assert first.result.passed and sum(first.deltas) == 20
        explorer.set_weights([1, 19])
        explorer.burst(20, repeat=2)
        sweep = explorer.sweep([[1, 1], [19, 1]], requests=40)
        explorer.set_weights([1, 19])  # what is live already: no new phase
        after_sweep = explorer.burst(20)
        live = [w.weight for w in dep.spec.workers]
    # The sweep keeps its bursts to itself, and puts the user's weights back, in the same phase.
    assert live == [1.0, 19.0]
    assert [(s.number, s.phase) for s in explorer.steps] == [(1, 0), (2, 1), (3, 1), (4, 1)]
    assert after_sweep.weights == (1.0, 19.0)
    after_change = explorer.steps[1:3]
    # 1:19 live: worker 1 must take most of the traffic, which it did not at 1:1.
    assert sum(s.deltas[1] for s in after_change) >= 30, [s.deltas for s in after_change]
    table = embedlab_table(explorer)
    assert list(table.burst) == [1, 2, 3, 4], "one row per burst the user sent, none of the sweep's"
    shares = [round(sum(s.deltas[w] for s in after_change) / 40, 3) for w in (0, 1)]
    assert table[table.burst == 3].cumulative_share.item() == " / ".join(f"{x:.3f}" for x in shares)
    assert sweep.passed, sweep.summary()
    assert [p.expected_shares for p in sweep.points] == [[0.5, 0.5], [0.95, 0.05]]
    assert sweep.points[1].deltas[0] >= 30
    assert sweep.to_json()["p_values"].keys() == {"w=1:1", "w=19:1"}


def test_a_frontend_that_ignores_the_weights_fails_the_burst(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with Deployment(DeploymentSpec.same_model("m", workers=2, seed=0), run_dir=tmp_path) as dep:
        explorer = Explorer(dep)
        # Behind the explorer's back, the frontend routes 1:50 while the explorer expects 1:1.
        with httpx.Client(timeout=5.0) as client:
            groups = client.get(f"{dep.frontend_url}/health").json()["models"].values()
            second = sorted((i["endpoint"], i["instance_id"]) for group in groups for i in group)[1][1]
            client.put(
                f"{dep.frontend_url}/registry/instances/{second}/weight", json={"weight": 50}
            ).raise_for_status()
        step = explorer.burst(40)
    assert not step.result.passed
    assert any("unlikely under weights" in r for r in step.result.reasons), step.result.reasons
