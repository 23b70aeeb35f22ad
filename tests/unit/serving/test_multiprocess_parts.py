"""The parts multi-process workers and frontends are built from, each against its contract.

The shared-memory channel delivers every message whole and in order, fragments and wrap
included; the board's exposition is the single-process registry's, series for series; the
shared round-robin and leak debt are exact across processes; a replica of the instance
table routes as its owner does.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import time
from collections.abc import Callable

import numpy as np
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from embedlab.serving.channel import RING_BYTES, Channel, create_memory
from embedlab.serving.frontend.instances import InstanceTable
from embedlab.serving.frontend.shared_routing import SharedRouting
from embedlab.serving.worker.metrics import Board, BoardCollector, SlotMetrics, WorkerMetrics

LABELS = {
    "dynamo_namespace": "ns",
    "dynamo_component": "w",
    "dynamo_endpoint": "generate",
    "model": "m",
    "worker_id": "abc",
}


def test_the_channel_delivers_every_message_whole_and_in_order() -> None:
    sizes = [1, 16, 4000, RING_BYTES // 3, 10 * RING_BYTES + 7, 0, 123]
    sizes += [random.Random(0).randrange(1, 70_000) for _ in range(300)]  # laps the ring many times
    messages = [os.urandom(n) for n in sizes]

    async def main() -> tuple[list[bytes], list[bytes]]:
        memory = create_memory(Channel.SIZE)
        a, b = socket.socketpair()
        got_b: list[bytes] = []
        got_a: list[bytes] = []
        done = asyncio.Event()

        def at_b(view: memoryview) -> None:
            got_b.append(bytes(view))
            engine.send(bytes(view)[::-1])  # answer each, the other way

        def at_a(view: memoryview) -> None:
            got_a.append(bytes(view))
            if len(got_a) == len(messages):
                done.set()

        ingest = Channel(memory_fd=memory, sock=a, side=0, on_message=at_a, on_closed=lambda: None)
        engine = Channel(memory_fd=memory, sock=b, side=1, on_message=at_b, on_closed=lambda: None)
        os.close(memory)
        ingest.start()
        engine.start()
        for message in messages:
            ingest.send(message)
        await asyncio.wait_for(done.wait(), 60)
        ingest.close()
        engine.close()
        return got_b, got_a

    at_engine, back = asyncio.run(main())
    assert at_engine == messages
    assert back == [m[::-1] for m in messages]


def test_a_closed_peer_is_reported() -> None:
    async def main() -> bool:
        memory = create_memory(Channel.SIZE)
        a, b = socket.socketpair()
        lost = asyncio.Event()
        ingest = Channel(memory_fd=memory, sock=a, side=0, on_message=lambda v: None, on_closed=lost.set)
        ingest.start()
        b.close()  # the engine process died
        await asyncio.wait_for(lost.wait(), 5)
        return ingest.closed

    assert asyncio.run(main())


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        # The simulated prefix cache lives in one process (the kv policy needs processes=1).
        if not s.name.endswith("_created") and not s.name.startswith("embedlab_kv_")
    }


def test_the_board_exposes_the_single_process_series_summed_over_slots() -> None:
    single = WorkerMetrics(LABELS)
    board = Board(create_memory(Board.size(3)))
    slots = [SlotMetrics(board, i) for i in range(3)]
    for i, (duration, size) in enumerate([(0.0003, 10), (0.02, 300), (3.0, 7), (0.02, 1)]):
        for metrics in (single, slots[i % 3]):
            metrics.requests.inc()
            metrics.inflight.inc()
            metrics.request_bytes.inc(size)
            metrics.duration.observe(duration)
            if i == 2:
                metrics.errors.inc()
            else:
                metrics.response_bytes.inc(size * 2)
    single.inflight.dec()
    slots[1].inflight.dec()
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=True)
    registry.register(BoardCollector(board, LABELS))
    ours, theirs = generate_latest(registry).decode(), generate_latest(single.prom).decode()
    assert _samples(ours) == _samples(theirs)
    counters = [
        s
        for f in text_string_to_metric_families(ours)
        for s in f.samples
        if s.name == "dynamo_component_requests_total"
    ]
    assert len(counters) == 1 and counters[0].value == 4


def test_shared_leak_debt_leaks_one_in_ten_whatever_the_interleaving() -> None:
    shared = SharedRouting()
    leaks = [shared.leak("a", 0.1, possible=True) for _ in range(100)]
    assert sum(leaks) == 10 and leaks[9] and not any(leaks[:9])
    assert not shared.leak("b", 0.1, possible=False)


def test_a_replica_routes_as_its_owner_and_keeps_its_own_inflight() -> None:
    now = [100.0]
    owner = InstanceTable(ttl=3.0, clock=lambda: now[0])
    removed: list[str] = []
    replica = InstanceTable(ttl=3.0, clock=lambda: now[0], on_remove=lambda i: removed.append(i.instance_id))
    for i in range(3):
        owner.register(
            instance_id=f"i{i}", endpoint=f"ns.w{i}.g", model="m", url=f"http://127.0.0.1:{9000 + i}"
        )
    owner.register(instance_id="j", endpoint="ns.x.g", model="n", url="http://127.0.0.1:9100")
    replica.apply_snapshot(owner.snapshot())
    kept = replica.live("m")[1]
    kept.inflight = 5
    assert [i.instance_id for i in replica.live("m")] == ["i0", "i1", "i2"]
    owner.deregister("i0")
    owner.set_weight("i2", 3.0)
    replica.apply_snapshot(owner.snapshot())
    assert [(i.instance_id, i.weight) for i in replica.live("m")] == [("i1", 1.0), ("i2", 3.0)]
    assert replica.live("m")[0] is kept and kept.inflight == 5
    assert removed == ["i0"]
    now[0] += 2.0
    owner.heartbeat("i1")
    replica.apply_snapshot(owner.snapshot())
    now[0] += 1.5  # i2's lease lapses in both at the same instant: one clock
    assert [i.instance_id for i in replica.live("m")] == [i.instance_id for i in owner.live("m")] == ["i1"]
    assert replica.is_known("n") and replica.models() == owner.models()


@pytest.mark.parametrize("processes", [1, 3])
def test_frontend_settings_travel_to_other_processes(processes: int) -> None:
    from embedlab.serving.frontend.app import FrontendConfig
    from embedlab.serving.frontend.faults import parse_fault

    config = FrontendConfig(
        port=0, processes=processes, faults=(parse_fault("leak:0.1"), parse_fault("stick")), token="secret"
    )
    copy = FrontendConfig.from_settings(config.settings(), token="secret")
    assert copy == config and "token" not in config.settings()


def test_a_doorbell_rung_while_the_consumer_reads_leaves_no_flag_set() -> None:
    """The producer rings again between the consumer's wake-up and its read, so one recv takes
    both bytes. The flag must not outlive them, or every later message would skip its byte
    and wait for the 5 ms poll (what c=1 showed after a load, at 5.3 ms against 2.6)."""

    class Interleaved:
        """The consumer's socket, with the producer's next send slipped in before each read."""

        def __init__(self, sock: socket.socket, before: Callable[[], None]) -> None:
            self.sock, self.before = sock, before

        def recv(self, n: int) -> bytes:
            self.before()
            return self.sock.recv(n)

        def __getattr__(self, name: str) -> object:
            return getattr(self.sock, name)

    async def main() -> tuple[bool, list[bytes]]:
        memory = create_memory(Channel.SIZE)
        a, b = socket.socketpair()
        got: list[bytes] = []
        ingest = Channel(memory_fd=memory, sock=a, side=0, on_message=lambda v: None, on_closed=lambda: None)
        engine = Channel(
            memory_fd=memory,
            sock=b,
            side=1,
            on_message=lambda v: got.append(bytes(v)),
            on_closed=lambda: None,
        )
        os.close(memory)

        def ring(message: bytes) -> None:
            ingest.send(message)
            ingest._ring()  # the doorbell's own step, as the next loop turn runs it

        ring(b"one")
        engine._sock = Interleaved(b, lambda: ring(b"two"))  # type: ignore[assignment]
        engine._readable()
        stuck = ingest._tx.bell
        ingest.close()
        engine.close()
        return stuck, got

    stuck, got = asyncio.run(main())
    assert got == [b"one", b"two"]
    assert stuck is False, "the flag outlived the bytes it stood for"


def test_a_message_stamp_tells_its_age_across_the_clock_wrap() -> None:
    from embedlab.serving.worker.multiprocess import messages

    lengths, ids = np.array([3], dtype=np.int32), np.array([5, 6, 7], dtype=np.int32)
    now = 7_000.0
    for age_us in (0, 250, 40_000):
        stamp = (int(now * 1e6) - age_us) % (1 << 32)  # the stamp wraps every 71.6 minutes
        view = memoryview(messages.embed_request(1, lengths, ids, None, stamp))
        assert messages.head(view) == (messages.EMBED, 1, 1, 3, -1)
        assert abs((now - messages.sent_at(view, now)) * 1e6 - age_us) < 2
    reply = memoryview(messages.vectors_reply(9, np.ones((2, 4), dtype=np.float32)))
    # Stamped as it was made: a wrong stamp is minutes off (up to the 71.6-minute wrap), never seconds.
    assert 0 <= time.monotonic() - messages.sent_at(reply, time.monotonic()) < 60.0
