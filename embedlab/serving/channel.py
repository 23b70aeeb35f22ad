"""Shared-memory rings between a worker's ingest processes and its engine process.

Each ingest process shares one memfd with the engine process: two single-producer,
single-consumer byte rings, one each way. Token ids go in as int32, vectors come back as
float32, written straight into the ring: nothing is pickled, and a message costs one copy
in and one copy out. A memfd has no name, so a killed worker leaves nothing in /dev/shm;
the memory goes when the last process that maps it exits.

A ring is `head` and `tail`, byte counters that only grow (each on its own cache line),
and records of `size | flags | length`, 16-byte aligned. The producer writes a record, then
moves `tail`; the consumer reads up to `tail`, then moves `head`. On x86-64 stores are
seen in program order and loads are not moved before earlier loads (TSO), which is all an
SPSC ring needs; the doorbell's syscalls order them as well. A record that would not fit
before the end leaves a WRAP marker and starts again at 0. A message larger than half a
ring travels in fragments (FIRST, then LAST), so any request the HTTP limit allows fits.

A Unix socketpair beside the memory is the doorbell: one byte after a batch of writes,
coalesced to one per loop iteration, wakes the other side's event loop. A flag in the
ring's header skips the byte while the consumer has one it has not yet acted on (it
clears the flag after it reads the socket and before it drains): a send wakes a process,
and costs more than the write into the ring. Should a store of the producer's still be on
its way when the consumer drains (the flag and the ring are plain memory, not fenced),
a poll every few milliseconds picks the message up. The socketpair also tells each side
when the other died: EOF. A producer whose ring is full keeps the rest in a backlog and
retries on every doorbell and on a 1 ms timer until it drains.

Each side counts what its doorbell did (`Channel.counts`): bytes rung and skipped,
wake-ups and the records each drained, records the poll drained while their byte was
still unread (`polled`: early, not late) or before any byte was there (`unrung`: rung
late, or never, and so waiting for the poll), sends that backed up.
"""

from __future__ import annotations

import asyncio
import collections
import mmap
import os
import socket
import struct
from collections.abc import Callable

RING_HEADER = 128
RECORD = struct.Struct("<III4x")  # size (aligned, header included), flags, payload length
WRAP = 0xFFFFFFFF
FIRST, LAST = 1, 2
WHOLE = FIRST | LAST
RING_BYTES = (
    4 << 20
)  # a multiple of 16; per direction and ingest process; memory is touched as the ring cycles
RETRY_S = 0.001
POLL_S = 0.005
_HEAD, _TAIL, _BELL = 0, 8, 12  # 8-byte slots of the ring header: 0, 64 and 96 bytes in


def _align(n: int) -> int:
    # 16 = the record header: the room left before the end is always 0 or a whole header.
    return (n + 15) & ~15


COUNTS = ("rung", "skipped", "wakeups", "received", "polled", "unrung", "backlogged")


class Counts:
    """What one side of a channel's doorbell did, since start (see `COUNTS`)."""

    __slots__ = COUNTS
    rung: int
    skipped: int
    wakeups: int
    received: int
    polled: int
    unrung: int
    backlogged: int

    def __init__(self) -> None:
        for name in COUNTS:
            setattr(self, name, 0)

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in COUNTS}


class Ring:
    """One direction of a channel: an SPSC byte ring over a shared buffer."""

    def __init__(self, buf: memoryview) -> None:
        self._index = buf[:RING_HEADER].cast("Q")
        self.data = buf[RING_HEADER:]
        self.capacity = len(self.data)
        # A record must fit an empty ring wherever the wrap point falls.
        self.max_payload = self.capacity // 2 - RECORD.size

    def write(self, payload: memoryview, flags: int) -> bool:
        """Append one record; False (nothing written) when the ring has no room for it now."""
        size = _align(RECORD.size + len(payload))
        head, tail = self._index[_HEAD], self._index[_TAIL]
        pos = tail % self.capacity
        skip = self.capacity - pos if self.capacity - pos < size else 0
        if tail - head + skip + size > self.capacity:
            return False
        if skip:
            RECORD.pack_into(self.data, pos, WRAP, 0, 0)
            tail += skip
            pos = 0
        RECORD.pack_into(self.data, pos, size, flags, len(payload))
        start = pos + RECORD.size
        self.data[start : start + len(payload)] = payload
        self._index[_TAIL] = tail + size
        return True

    def read(self) -> tuple[int, memoryview, int] | None:
        """The oldest record as (flags, payload view, head after it), or None; `release` frees it."""
        head = self._index[_HEAD]
        while head != self._index[_TAIL]:
            pos = head % self.capacity
            size, flags, length = RECORD.unpack_from(self.data, pos)
            if size == WRAP:
                head += self.capacity - pos
                self._index[_HEAD] = head
                continue
            start = pos + RECORD.size
            return flags, self.data[start : start + length], head + size
        return None

    def release(self, head: int) -> None:
        self._index[_HEAD] = head

    def pending(self) -> bool:
        return bool(self._index[_HEAD] != self._index[_TAIL])

    @property
    def bell(self) -> bool:
        """Set by the producer with each doorbell byte, cleared by the consumer as it acts on them."""
        return bool(self._index[_BELL])

    @bell.setter
    def bell(self, value: bool) -> None:
        self._index[_BELL] = int(value)


def create_memory(size: int) -> int:
    """An anonymous shared memory file of `size` zero bytes; the caller owns the descriptor."""
    fd = os.memfd_create("embedlab", os.MFD_CLOEXEC)
    os.ftruncate(fd, size)
    return fd


def map_memory(fd: int) -> memoryview:
    return memoryview(mmap.mmap(fd, os.fstat(fd).st_size, mmap.MAP_SHARED))


class Channel:
    """Messages both ways over two rings in one memfd, with a socketpair doorbell.

    `side` 0 (the ingest process) sends on the first ring; side 1 (the engine) on the second.
    `on_message(view)` gets each whole message; the view is valid only during the call.
    """

    SIZE = 2 * (RING_HEADER + RING_BYTES)

    def __init__(
        self,
        *,
        memory_fd: int,
        sock: socket.socket,
        side: int,
        on_message: Callable[[memoryview], None],
        on_closed: Callable[[], None],
    ) -> None:
        buf = map_memory(memory_fd)
        half = len(buf) // 2
        rings = (Ring(buf[:half]), Ring(buf[half:]))
        self._tx, self._rx = rings[side], rings[1 - side]
        self._sock = sock
        self._sock.setblocking(False)
        self._on_message = on_message
        self._on_closed = on_closed
        self._backlog: collections.deque[list[object]] = collections.deque()  # [view, offset]
        self._partial: bytearray | None = None
        self._ring_pending = False
        self._retry: asyncio.TimerHandle | None = None
        self._poller: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.closed = False
        self.counts = Counts()

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._sock.fileno(), self._readable)
        self._poller = self._loop.call_later(POLL_S, self._poll)

    def _poll(self) -> None:
        if self.closed:
            return
        if self._rx.pending():
            # A byte was skipped for a flag left set: clear it, or every later message would
            # wait for this poll too.
            try:
                rung = bool(self._sock.recv(1, socket.MSG_PEEK))  # its byte waits: the reader is next
            except (BlockingIOError, OSError):
                rung = False
            self._rx.bell = False
            found = self.drain()
            if rung:
                self.counts.polled += found
            else:
                self.counts.unrung += found
        assert self._loop is not None
        self._poller = self._loop.call_later(POLL_S, self._poll)

    def close(self) -> None:
        if self._loop is not None and not self.closed:
            self._loop.remove_reader(self._sock.fileno())
        self.closed = True
        for timer in (self._retry, self._poller):
            if timer is not None:
                timer.cancel()
        self._sock.close()

    # -- sending ------------------------------------------------------------------------

    def send(self, message: bytes | bytearray | memoryview) -> None:
        """Queue one message for the other side (never blocks; a full ring backs up here)."""
        view = memoryview(message)
        if not self._backlog and len(view) <= self._tx.max_payload and self._tx.write(view, WHOLE):
            self._doorbell()
            return
        self.counts.backlogged += 1
        self._backlog.append([view, 0])
        self._flush()

    def _flush(self) -> None:
        wrote = False
        while self._backlog:
            entry = self._backlog[0]
            view, offset = entry[0], entry[1]
            assert isinstance(view, memoryview) and isinstance(offset, int)
            while True:  # at least one record, so an empty message arrives too
                chunk = view[offset : offset + self._tx.max_payload]
                last = offset + len(chunk) == len(view)
                if not self._tx.write(chunk, (FIRST if offset == 0 else 0) | (LAST if last else 0)):
                    entry[1] = offset
                    if wrote:
                        self._doorbell()
                    self._arm_retry()
                    return
                wrote = True
                offset += len(chunk)
                if last:
                    break
            self._backlog.popleft()
        if wrote:
            self._doorbell()

    def _arm_retry(self) -> None:
        if self._retry is None and self._loop is not None and not self.closed:
            self._retry = self._loop.call_later(RETRY_S, self._retried)

    def _retried(self) -> None:
        self._retry = None
        if not self.closed:
            self._flush()

    def _doorbell(self) -> None:
        if not self._ring_pending and self._loop is not None:
            self._ring_pending = True
            self._loop.call_soon(self._ring)

    def _ring(self) -> None:
        self._ring_pending = False
        if self.closed or self._tx.bell:
            self.counts.skipped += 1
            return  # the consumer has not yet acted on the last byte: it will drain this too
        self.counts.rung += 1
        self._tx.bell = True
        try:
            self._sock.send(b"\x01")
        except BlockingIOError:
            pass  # the other side has unread doorbells: it will look at the ring anyway
        except OSError:
            self._lost()

    # -- receiving ----------------------------------------------------------------------

    def _readable(self) -> None:
        try:
            data = self._sock.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._lost()
            return
        # After the read and before the drain: cleared before the read, a byte rung meanwhile
        # would be read by the same recv, and the flag left set with no byte to clear it:
        # every later message would skip its byte and wait for the poll (5 ms at c=1).
        self._rx.bell = False
        self.counts.wakeups += 1
        self.counts.received += self.drain()
        if self._backlog:
            self._flush()

    def drain(self) -> int:
        """Hand every complete message in the receive ring to `on_message`; how many records it read."""
        records = 0
        while not self.closed:
            record = self._rx.read()
            if record is None:
                return records
            records += 1
            flags, view, head = record
            try:
                if flags == WHOLE:
                    self._on_message(view)
                elif flags & FIRST:
                    self._partial = bytearray(view)
                elif self._partial is not None:
                    self._partial += view
                    if flags & LAST:
                        whole, self._partial = self._partial, None
                        self._on_message(memoryview(whole))
            finally:
                view.release()
                self._rx.release(head)
        return records

    def _lost(self) -> None:
        if not self.closed:
            self.close()
            self._on_closed()
