"""The watch's sliding horizon on simulated pools: no false alarm, one alarm per fault, a fault seen to stop.

The blocks are what a real watch feeds the judge (the schedule's own orders, the router's
split, another client's Poisson counts on every worker); only the processes are simulated.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from embedlab.errors import ConfigError
from embedlab.evidence.busy.sequential import orders
from embedlab.evidence.busy.simulate import Pool
from embedlab.watch.checks import CheckKey, WatchPool
from embedlab.watch.judge import Judge
from embedlab.watch.names import COUNTED_ONCE, FAILING, INCONCLUSIVE, MULTI_MODEL, OK, SAME_MODEL

BLOCK_S = 1.5  # 2 windows of 6 requests each at an 8 req/s cap


class Feed:
    """Blocks of a 2 x 2 pool under a router that may leak, at BLOCK_S each."""

    def __init__(
        self,
        judge: Judge,
        *,
        background: float = 4.0,
        seed: int = 0,
        block_s: float = BLOCK_S,
        router: bool = False,
    ) -> None:
        """`router`: the router's own count of the other client's requests per model comes with each block."""
        self.judge, self.background, self.block_s, self.router = judge, background, block_s, router
        self.rng = np.random.default_rng(seed)
        self.block, self.now = 0, 0.0
        self.transitions: list = []

    def run(self, seconds: float, fault: str = "", *, twice: float = 0.0, lost: float = 0.0) -> None:
        """`twice`: each of the check's requests is counted a second time with this probability, on a
        replica of its model (`double`); `lost`: counted by no worker (`cache`)."""
        names = {m: f"m{k}" for k, m in enumerate(self.judge.pool.served)}
        routing = Pool(tuple(names[m] for m in self.judge.pool.models), fault=fault).routing()
        even = Pool(tuple(names[m] for m in self.judge.pool.models)).routing().mean(axis=0)
        schedule = self.judge.schedule
        doses = np.array([schedule.doses(m) for m in self.judge.models_sent])  # models, arms
        table = orders(len(schedule.arms))
        end = self.now + seconds
        while self.now < end:
            observed = schedule.order_index(self.block)
            sent = doses[:, table[observed]]  # models, windows
            deltas = np.zeros((len(self.judge.pool.models), sent.shape[1]))
            others = np.zeros(sent.shape)
            of = [[x == m for x in self.judge.pool.models] for m in self.judge.models_sent]
            for t in range(sent.shape[1]):
                for m in range(sent.shape[0]):
                    counted = sent[m, t] - self.rng.binomial(sent[m, t], lost)
                    deltas[:, t] += self.rng.multinomial(
                        counted + self.rng.binomial(counted, twice), routing[m]
                    )
                theirs = self.rng.poisson(self.background * 0.25 * even)
                deltas[:, t] += theirs
                others[:, t] = [theirs[own].sum() for own in of]
            self.now += self.block_s
            self.transitions += self.judge.add_block(
                deltas, sent.astype(float), observed, now=self.now, others=others if self.router else None
            )
            self.block += 1

    def state(self, key: CheckKey) -> str:
        return next(s.state for s in self.judge.states() if s.key == key)


def judge_for(models: list[str], **kw) -> Judge:
    pool = WatchPool.of(models)
    return Judge(pool, pool.schedule(requests=6, seed=7), **kw)


def test_a_pool_gets_its_checks() -> None:
    once = (CheckKey(COUNTED_ONCE, "a"), CheckKey(COUNTED_ONCE, "b"))
    assert WatchPool.of(["a", "a", "b", "b"]).keys == (
        CheckKey(SAME_MODEL, "a"), CheckKey(SAME_MODEL, "b"), CheckKey(MULTI_MODEL, "a"), CheckKey(MULTI_MODEL, "b"),
        *once,
    )  # fmt: skip
    assert WatchPool.of(["a", "b"]).keys == (CheckKey(MULTI_MODEL, "a"), CheckKey(MULTI_MODEL, "b"), *once)
    assert WatchPool.of(["a", "a"]).keys == (CheckKey(SAME_MODEL, "a"), CheckKey(COUNTED_ONCE, "a"))
    with pytest.raises(ConfigError, match="nothing to check"):
        WatchPool.of(["a"])
    with pytest.raises(ConfigError, match="each worker's model"):
        WatchPool.of(["a", None])


def test_a_correct_router_turns_ok_and_stays_ok() -> None:
    judge = judge_for(["a", "a", "b", "b"], horizon_s=120, stagger_s=30)
    feed = Feed(judge, seed=1, router=True)
    feed.run(6 * 60)
    assert all(s.alarms == 0 for s in judge.states())
    assert not [t for t in feed.transitions if t.new == FAILING]
    first_ok = {t.key: t.at for t in feed.transitions if t.new == OK}
    assert set(first_ok) == set(judge.pool.keys) and max(first_ok.values()) < 120
    assert all(s.state == OK for s in judge.states())
    shares = judge.shares()
    assert [s.worker for s in shares] == [0, 1, 2, 3]
    assert all(s.low <= 0.5 <= s.high and s.expected == 0.5 for s in shares)


def test_with_the_counters_alone_counted_once_decides_slower_and_never_accuses_a_correct_router() -> None:
    """At 6 requests a window, one request in ten counted twice is 0.6 of a request: against the other
    client's noise the counters alone take minutes to rule it out, where the router's counts take
    seconds. The other checks are not held up, and nothing is accused."""
    judge = judge_for(["a", "a", "b", "b"], horizon_s=300, stagger_s=60)
    feed = Feed(judge, seed=1)
    feed.run(10 * 60)
    assert not [t for t in feed.transitions if t.new == FAILING]
    first_ok = {t.key: t.at for t in feed.transitions if t.new == OK}
    assert all(first_ok[k] < 120 for k in judge.pool.keys if k.check != COUNTED_ONCE), first_ok
    assert any(k.check == COUNTED_ONCE for k in first_ok), first_ok


def test_a_leak_that_starts_late_is_one_alarm_and_is_seen_to_stop() -> None:
    judge = judge_for(["a", "a", "b", "b"], horizon_s=120, stagger_s=30, hold_s=60)
    feed = Feed(judge, seed=2)
    key = CheckKey(MULTI_MODEL, "a")
    feed.run(3 * 60)
    assert feed.state(key) == OK
    fault_at = feed.now
    feed.run(4 * 60, fault="leak:0.3")
    failing = [t for t in feed.transitions if t.new == FAILING and t.key == key]
    assert len(failing) == 1 and failing[0].alarm and failing[0].at - fault_at < 120
    assert next(s.alarms for s in judge.states() if s.key == key) == 1
    assert feed.state(key) == FAILING  # held while the fault lasts: still one alarm
    assert feed.state(CheckKey(SAME_MODEL, "a")) != FAILING  # the replicas' shares are not at fault
    feed.run(4 * 60)
    assert feed.state(key) == OK  # the fault stopped, and a test started since has passed
    assert next(s.alarms for s in judge.states() if s.key == key) == 1


def test_misplaced_responses_fail_at_once_and_alarm_once() -> None:
    judge = judge_for(["a", "b"], hold_s=60)
    key = CheckKey(MULTI_MODEL, "b")
    changes = judge.misplaced("b", now=5.0, why="worker 0 refused 'b'")
    assert [(c.key, c.new, c.alarm) for c in changes] == [(key, FAILING, True)]
    assert judge.misplaced("b", now=30.0, why="again") == []  # the same fault: no second alarm
    assert judge.tick(100.0) == []  # 70 s since the last one, but no test has passed since
    [back] = judge.tick(30.0 + judge.horizon_s)
    assert back.new == INCONCLUSIVE  # a whole horizon without a failure, or a pass
    state = next(s for s in judge.states() if s.key == key)
    assert state.alarms == 1 and math.isnan(state.evidence_log10)


def test_an_ok_with_no_newer_pass_grows_inconclusive() -> None:
    judge = judge_for(["a", "a"], horizon_s=120, stagger_s=30)
    feed = Feed(judge, seed=3, background=2.0, router=True)
    feed.run(3 * 60)
    keys = [CheckKey(SAME_MODEL, "a"), CheckKey(COUNTED_ONCE, "a")]
    assert [feed.state(k) for k in keys] == [OK, OK]
    stale = judge.tick(feed.now + 200)
    assert [(s.key, s.new) for s in stale] == [(k, INCONCLUSIVE) for k in keys]


def test_a_fault_after_an_hour_meets_a_young_test() -> None:
    # Blocks 10 s apart (the judge reads only their times): an hour of a correct router, then a
    # leak. The newest test is at most a stagger old when the fault starts, so it is found as
    # soon as after a minute of watching, not after the hour's evidence has been outweighed.
    judge = judge_for(["a", "a", "b", "b"], horizon_s=300, stagger_s=60)
    feed = Feed(judge, seed=8, block_s=10.0)
    feed.run(3600)
    assert not [t for t in feed.transitions if t.new == FAILING]
    fault_at = feed.now
    feed.run(600, fault="leak:0.3")
    # The leak shows on a's placement and on a's requests counted fewer than once: either convicts it.
    alarms = [t for t in feed.transitions if t.alarm and t.key.model == "a"]
    assert alarms and alarms[0].key.check in (MULTI_MODEL, COUNTED_ONCE), alarms
    assert alarms[0].at - fault_at <= 60 * 10, alarms  # within 60 blocks of the fault


@pytest.mark.parametrize(("twice", "lost"), [(0.2, 0.0), (0.0, 0.2)], ids=["double", "cache"])
def test_requests_counted_twice_or_not_at_all_are_convicted_by_the_counts_not_the_shares(
    twice: float, lost: float
) -> None:
    """`double:0.2` and `cache:0.2` on the watch (the loop's other faults are test_watch_runner.py's):
    a check that weighs a model's count against the check's requests (multi-model's or counted-once's)
    fails, with the count it found beside its expected 1; the replicas' shares stay right, so
    same-model accuses no one. At 6 requests a window the watch needs minutes for a fifth."""
    judge = judge_for(["a", "a", "b", "b"], horizon_s=120, stagger_s=30)
    feed = Feed(judge, seed=4, router=True)
    feed.run(60)
    assert not [t for t in feed.transitions if t.alarm]
    feed.run(3 * 60, twice=twice, lost=lost)
    alarms = [t for t in feed.transitions if t.alarm]
    assert alarms and all(t.key.check in (MULTI_MODEL, COUNTED_ONCE) for t in alarms), alarms
    low, high = (1.0, 2.0) if twice else (0.0, 1.0)
    for t in alarms:
        found = float(t.why.split(": ")[-1].split(" of ")[0])
        assert low < found < high and "expected 1)" in t.why, t.why


def test_a_router_stuck_on_every_model_with_nobody_else_sending_convicts_every_model_at_once() -> None:
    """Nothing but the check sends: both models' same-model evidence is the same number, block by
    block. The decision that convicts one convicts the other, and both are named before the
    restart wipes the evidence (one at a time, the first would be convicted again and again, the
    second never: what `embedlab watch` did on the embedded frontend's `--fault stick`)."""
    judge = judge_for(["a", "a", "b", "b"], horizon_s=120, stagger_s=30)
    feed = Feed(judge, background=0.0, seed=3)
    feed.run(60, fault="stick")
    alarms = [t for t in feed.transitions if t.alarm]
    assert {t.key for t in alarms} == {CheckKey(SAME_MODEL, "a"), CheckKey(SAME_MODEL, "b")}, alarms
    assert len({t.at for t in alarms}) == 1  # the same block
    assert all(feed.state(CheckKey(SAME_MODEL, m)) == FAILING for m in "ab")
