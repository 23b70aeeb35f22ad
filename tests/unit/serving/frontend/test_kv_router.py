"""The KV-aware policy (kv_router.py): its index of the workers' caches, its cost, and the faults
that break it (`blind`, `deaf`: faults.py)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence

import pytest

from embedlab.engines.kv import BLOCK_SIZE, KvEvent, PrefixCache, block_hashes
from embedlab.serving.frontend.dispatch import make_policy
from embedlab.serving.frontend.faults import FaultInjector, parse_fault
from embedlab.serving.frontend.instances import Instance, InstanceTable
from embedlab.serving.frontend.kv_router import OVERLAP_WEIGHT, KvAware, KvIndex

PICKS = 400


def pool(n: int, model: str = "m") -> list[Instance]:
    return [
        Instance(instance_id=f"i{k}", endpoint=f"ns.w{k}.ep", model=model, url="http://x") for k in range(n)
    ]


def prompt_blocks(n: int, tag: str = "p") -> list[int]:
    return block_hashes([f"{tag}{i}" for i in range(n * BLOCK_SIZE)])


def stored(seq: int, blocks: Sequence[int]) -> KvEvent:
    return KvEvent(seq=seq, kind="stored", blocks=tuple(blocks))


def removed(seq: int, blocks: Sequence[int]) -> KvEvent:
    return KvEvent(seq=seq, kind="removed", blocks=tuple(blocks))


def picks(policy: KvAware, live: Sequence[Instance], blocks: Sequence[int], n: int = PICKS) -> Counter[str]:
    return Counter(policy.pick("m", live, blocks).instance_id for _ in range(n))


def test_the_documented_weight() -> None:
    assert OVERLAP_WEIGHT == 1.0  # Dynamo's --kv-overlap-score-weight default


# -- KvIndex -----------------------------------------------------------------------------------


def test_index_overlap_is_the_leading_run_of_held_blocks() -> None:
    index = KvIndex()
    blocks = prompt_blocks(4)
    assert index.overlap("i0", blocks) == 0, "an instance never heard of holds nothing"
    index.apply("i0", [stored(1, blocks[:2])])
    assert index.overlap("i0", blocks) == 2
    assert index.overlap("i1", blocks) == 0, "one instance's events say nothing of another's"
    index.apply("i0", [stored(2, blocks[3:])])
    assert index.overlap("i0", blocks) == 2, "a gap ends the prefix"
    index.apply("i0", [stored(3, blocks[2:3])])
    assert index.overlap("i0", blocks) == 4


def test_removal_events_drop_overlap_and_are_counted() -> None:
    index = KvIndex()
    blocks = prompt_blocks(4)
    index.apply("i0", [stored(1, blocks)])
    index.apply("i0", [removed(2, blocks[2:3])])
    assert index.overlap("i0", blocks) == 2
    index.apply("i0", [removed(3, blocks[:1]), stored(4, [99])])
    assert index.overlap("i0", blocks) == 0
    assert index.applied == Counter({("i0", "stored"): 2, ("i0", "removed"): 2})


def test_events_apply_in_order() -> None:
    index = KvIndex()
    blocks = prompt_blocks(2)
    index.apply("i0", [stored(1, blocks), removed(2, blocks[1:]), stored(3, blocks[1:])])
    assert index.overlap("i0", blocks) == 2
    index.apply("i0", [stored(4, blocks), removed(5, blocks)])
    assert index.overlap("i0", blocks) == 0


def test_forget_drops_what_an_instance_held_but_keeps_the_counts() -> None:
    index = KvIndex()
    blocks = prompt_blocks(3)
    index.apply("i0", [stored(1, blocks)])
    index.apply("i1", [stored(1, blocks)])
    index.forget("i0")
    index.forget("never-seen")  # no error
    assert index.overlap("i0", blocks) == 0
    assert index.overlap("i1", blocks) == 3
    assert index.applied[("i0", "stored")] == 1


def test_index_fed_by_a_worker_cache_agrees_with_it() -> None:
    """The worker's PrefixCache and the router's index hash alike: the events carry the cache over."""
    cache, index = PrefixCache(capacity=6), KvIndex()
    rng = random.Random(3)
    prompts = [prompt_blocks(rng.randint(1, 4), f"g{g}-") for g in range(5)]
    for _ in range(60):
        blocks = rng.choice(prompts)
        _, events = cache.serve(blocks)
        index.apply("i0", events)
        for probe in prompts:
            assert index.overlap("i0", probe) == cache.overlap(probe)


# -- KvAware: cost = OVERLAP_WEIGHT * (blocks not cached) + inflight * blocks --------------------


def test_kv_is_a_router_mode() -> None:
    assert isinstance(make_policy("kv", seed=1), KvAware)


def test_a_single_instance_is_always_picked() -> None:
    live = pool(1)
    live[0].inflight = 50
    assert KvAware(random.Random(0)).pick("m", live, prompt_blocks(2)) is live[0]


def test_the_instance_holding_the_prefix_wins_over_idle_empty_ones() -> None:
    policy = KvAware(random.Random(1))
    live = pool(3)
    blocks = prompt_blocks(4)
    policy.index.apply("i1", [stored(1, blocks[:3])])
    assert picks(policy, live, blocks) == Counter({"i1": PICKS})


def test_the_longer_cached_prefix_wins() -> None:
    policy = KvAware(random.Random(2))
    live = pool(3)
    blocks = prompt_blocks(5)
    policy.index.apply("i0", [stored(1, blocks[:2])])
    policy.index.apply("i2", [stored(1, blocks[:4])])
    assert picks(policy, live, blocks) == Counter({"i2": PICKS})


@pytest.mark.parametrize(
    ("other_load", "holder_load", "winner"),
    [
        # holder: 3 of 4 blocks cached -> cost 1 + 4k; the other: none cached -> cost 4 + 4m.
        # The holder wins while 1 + 4k < 4 + 4m, i.e. k <= m; at k = m + 1 it loses.
        (0, 0, "i0"),
        (0, 1, "i1"),
        (2, 0, "i0"),
        (2, 2, "i0"),
        (2, 3, "i1"),
        (5, 5, "i0"),
        (5, 6, "i1"),
    ],
)
def test_in_flight_load_outweighs_the_cached_prefix_at_the_break_even(
    other_load: int, holder_load: int, winner: str
) -> None:
    policy = KvAware(random.Random(3))
    live = pool(2)
    blocks = prompt_blocks(4)
    policy.index.apply("i0", [stored(1, blocks[:3])])
    live[0].inflight, live[1].inflight = holder_load, other_load
    assert picks(policy, live, blocks, 100) == Counter({winner: 100})


def test_a_fully_cached_prefix_ties_with_one_more_request_in_flight() -> None:
    # Holder: 0 + 4 (m + 1); the other: 4 + 4m. Equal: the tie goes either way.
    policy = KvAware(random.Random(4))
    live = pool(2)
    blocks = prompt_blocks(4)
    policy.index.apply("i0", [stored(1, blocks)])
    live[0].inflight, live[1].inflight = 2, 1
    chosen = picks(policy, live, blocks)
    assert chosen["i0"] > PICKS // 4 and chosen["i1"] > PICKS // 4, chosen


def test_ties_are_broken_among_all_tied_instances() -> None:
    policy = KvAware(random.Random(5))
    live = pool(4)
    live[3].inflight = 1  # not tied: costs one more prompt's blocks
    chosen = picks(policy, live, prompt_blocks(3), 600)
    assert set(chosen) == {"i0", "i1", "i2"}
    assert min(chosen.values()) > 100, chosen  # ~200 each: never always the first


def test_ties_are_reproducible_with_the_seed() -> None:
    live = pool(3)
    blocks = prompt_blocks(2)
    a, b = make_policy("kv", seed=9), make_policy("kv", seed=9)
    first = [a.pick("m", live, blocks).instance_id for _ in range(50)]
    assert first == [b.pick("m", live, blocks).instance_id for _ in range(50)]
    assert set(first) == {"i0", "i1", "i2"}


def test_without_blocks_the_cost_is_load_alone() -> None:
    """An embeddings request has no blocks: fewest in flight, ties at random, whatever is cached."""
    policy = KvAware(random.Random(6))
    live = pool(3)
    policy.index.apply("i0", [stored(1, prompt_blocks(4))])
    live[2].inflight = 1
    chosen = picks(policy, live, ())
    assert set(chosen) == {"i0", "i1"}
    assert min(chosen.values()) > PICKS // 4
    live[0].inflight = live[1].inflight = 3
    assert picks(policy, live, ()) == Counter({"i2": PICKS})


def test_a_removed_prefix_no_longer_attracts() -> None:
    policy = KvAware(random.Random(7))
    live = pool(2)
    blocks = prompt_blocks(3)
    policy.index.apply("i0", [stored(1, blocks)])
    assert picks(policy, live, blocks, 50) == Counter({"i0": 50})
    policy.index.apply("i0", [removed(2, blocks[:1])])
    chosen = picks(policy, live, blocks)
    assert chosen["i0"] > PICKS // 4 and chosen["i1"] > PICKS // 4, chosen


# -- the faults: blind ignores the cached prefix, deaf loses the first instance's events ----------


def test_blind_routes_on_load_alone() -> None:
    live = pool(2)
    blocks = prompt_blocks(4)
    table = InstanceTable()
    policy = KvAware(random.Random(8))
    policy.index.apply("i0", [stored(1, blocks)])
    healthy = FaultInjector([], seed=0)
    blind = FaultInjector([parse_fault("blind")], seed=0)
    assert Counter(healthy.pick("m", live, policy, table, blocks).instance_id for _ in range(100)) == Counter(
        {"i0": 100}
    )
    chosen = Counter(blind.pick("m", live, policy, table, blocks).instance_id for _ in range(PICKS))
    assert chosen["i0"] > PICKS // 4 and chosen["i1"] > PICKS // 4, chosen
    # Load still counts: blind, the holder with a request in flight never wins.
    live[0].inflight = 1
    assert Counter(blind.pick("m", live, policy, table, blocks).instance_id for _ in range(100)) == Counter(
        {"i1": 100}
    )


def registered(table: InstanceTable, model: str, n: int, offset: int = 0) -> list[Instance]:
    return [
        table.register(
            instance_id=f"{model}-{k}", endpoint=f"ns.{model}{k}.ep", model=model, url=f"http://h:{9000 + k}"
        )
        for k in range(offset, offset + n)
    ]


def test_deaf_loses_each_models_first_instance_only() -> None:
    table = InstanceTable()
    a = registered(table, "a", 3)
    b = registered(table, "b", 2)
    deaf = FaultInjector([parse_fault("deaf")], seed=0)
    healthy = FaultInjector([], seed=0)
    assert [deaf.hears(i, table) for i in a] == [False, True, True]
    assert [deaf.hears(i, table) for i in b] == [False, True]
    assert all(healthy.hears(i, table) for i in a + b)


def test_deaf_makes_a_prefix_cached_on_the_first_instance_look_new() -> None:
    """The frontend applies an instance's events only where the injector hears it (app.kv_events)."""
    table = InstanceTable()
    live = registered(table, "m", 2)
    blocks = prompt_blocks(4)
    events = {i.instance_id: PrefixCache().serve(blocks)[1] for i in live}

    def routed(faults: FaultInjector) -> Counter[str]:
        policy = KvAware(random.Random(10))
        # live[0] and live[1] both served the prompt; each posts its events.
        for instance in live:
            if faults.hears(instance, table):
                policy.index.apply(instance.instance_id, events[instance.instance_id])
        policy.index.apply(live[1].instance_id, [removed(2, blocks)])  # only the second evicts it
        return Counter(
            faults.pick("m", table.live("m"), policy, table, blocks).instance_id for _ in range(PICKS)
        )

    assert routed(FaultInjector([], seed=0)) == Counter({"m-0": PICKS})
    deafened = routed(FaultInjector([parse_fault("deaf")], seed=0))
    # The router never heard m-0 store the prompt: both look empty, the pick is a coin toss.
    assert deafened["m-0"] > PICKS // 4 and deafened["m-1"] > PICKS // 4, deafened
