"""The restart policy against real worker processes: a crash loop backs off, is bounded, and is given up on."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from embedlab import Deployment, ScenarioPlan, run_scenario
from embedlab.cluster.supervisor import GAVE_UP, RESTART_POLL_S
from embedlab.defaults import PLUGINS_ENV

from ..proctools import processes_under, wait_until

BACKOFF, LIMIT = 0.5, 3
CANNOT_START = "this worker cannot start (embedlab test)"


def test_a_worker_that_cannot_start_again_is_restarted_a_bounded_number_of_times_then_given_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every worker imports this plugin at start; it imports cleanly until the deployment serves,
    # then fails as a bad model path or a shadowed import would: each restart exits at once.
    plugin = tmp_path / "flaky_plugin.py"
    plugin.write_text("")
    monkeypatch.setenv(PLUGINS_ENV, str(plugin))
    seen: list[Deployment] = []

    def crash_loop(dep: Deployment) -> None:
        seen.append(dep)
        plugin.write_text(f"raise RuntimeError({CANNOT_START!r})\n")
        dep.outages.kill_worker(1)
        assert wait_until(lambda: any(e.kind == GAVE_UP for e in dep.events), 180), list(dep.events)
        # Nothing more is started: the log of worker 1 holds its first start and LIMIT restarts.
        time.sleep(10 * RESTART_POLL_S)  # ten polls of the supervisor, each of which could restart it
        assert dep.workers[1].log_path.read_text().count("# embedlab: starting") == 1 + LIMIT

    plan = ScenarioPlan(
        scenario="same-model",
        restart="on-exit",
        restart_limit=LIMIT,
        restart_backoff=BACKOFF,
        run_dir=str(tmp_path / "run"),
    )
    result = run_scenario(plan, on_deployment=crash_loop)
    (dep,) = seen
    events = [e for e in dep.events if e.detail.startswith("worker 1")]
    kinds = [e.kind for e in events]
    assert kinds == [
        "kill worker",
        *["exit", "restarting", "restart failed"] * LIMIT,
        "exit",
        GAVE_UP,
    ], kinds
    # The waits the supervisor made, from each exit to the restart after it: at least the
    # back-off, which doubles (on a loaded machine they run late, never early).
    gaps = [b.at - a.at for a, b in zip(events, events[1:]) if (a.kind, b.kind) == ("exit", "restarting")]
    assert len(gaps) == LIMIT
    assert all(gap >= BACKOFF * 2**k for k, gap in enumerate(gaps)), gaps
    assert gaps[-1] > gaps[0], gaps
    gave_up = events[-1].detail
    assert f"{LIMIT} restarts within" in gave_up and CANNOT_START in gave_up, gave_up
    assert str(dep.workers[1].log_path) in gave_up
    # The scenario's result names it, with the log's last lines, and cannot pass.
    assert not result.passed
    (reason,) = [r for r in result.reasons if r.startswith("the restart policy gave up on worker 1")]
    assert CANNOT_START in reason
    assert processes_under(tmp_path / "run") == []


def test_a_worker_restarted_mid_schedule_makes_the_busy_check_inconclusive_naming_it(tmp_path: Path) -> None:
    """A worker restart on the busy schedule, on real processes (issue 44): worker 1 restarts as
    soon as the schedule's first request reaches it (long before a verdict can stand, which takes
    several blocks). A read finds it down (or its counter started again from 0): the check cannot
    judge its windows, and ends inconclusive naming it, never passed or failed. A restart that no
    read can see is a limit (docs/busy-method.md, "A restart the counters cannot see")."""
    from concurrent.futures import ThreadPoolExecutor

    from embedlab import DeploymentSpec, same_model_load_balance
    from embedlab.evidence.metrics import scrape
    from embedlab.verdicts import Verdict

    with Deployment(DeploymentSpec.same_model("m", workers=2), run_dir=tmp_path / "run") as dep:
        start = scrape(dep.system_urls[1]).value
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(same_model_load_balance, dep.target(), busy=True, budget_s=120)
            assert wait_until(lambda: scrape(dep.system_urls[1]).value > start, 60), (
                "the schedule never began"
            )
            dep.outages.restart_worker(1)
            result = running.result(timeout=300)
    assert result.verdict == Verdict.INCONCLUSIVE, result.summary()
    assert any("worker 1" in r and ("reset" in r or "could not be read" in r) for r in result.reasons), (
        result.reasons
    )
