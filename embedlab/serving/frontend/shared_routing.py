"""The routing state that several routing processes must share to route as one process does.

Round-robin must be exact over all of a model's requests, whichever process took them,
and the `leak:p` fault must leak exactly one request in 1/p of a model's, not of each
process's (a burst of 10 over 4 processes would otherwise leak none). Both are one
read-modify-write of a number per model: a slot in shared memory, updated under a POSIX
record lock on that memory (`lockf`: per process, so an inherited descriptor still
excludes), a few microseconds per request and only in the modes that need it.

Slots are found by a 16-byte digest of the model name, with linear probing.
"""

from __future__ import annotations

import fcntl
import hashlib
import struct
from collections.abc import Iterator
from contextlib import contextmanager

from ...errors import ConfigError
from ..channel import create_memory, map_memory

SLOTS = 1024
SLOT = struct.Struct("<16sqd")  # model digest, next round-robin position, leak debt
_EMPTY = bytes(16)


class SharedRouting:
    def __init__(self, fd: int | None = None) -> None:
        self.fd = create_memory(SLOTS * SLOT.size) if fd is None else fd
        self._buf = map_memory(self.fd)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        fcntl.lockf(self.fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.lockf(self.fd, fcntl.LOCK_UN)

    def _offset(self, model: str) -> int:
        digest = hashlib.blake2b(model.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        start = int.from_bytes(digest[:8], "little") % SLOTS
        for step in range(SLOTS):
            offset = ((start + step) % SLOTS) * SLOT.size
            key = bytes(self._buf[offset : offset + 16])
            if key == digest:
                return offset
            if key == _EMPTY:
                SLOT.pack_into(self._buf, offset, digest, 0, 0.0)
                return offset
        raise ConfigError(f"more than {SLOTS} models share one frontend's routing state")

    def next_position(self, model: str) -> int:
        """This request's place in the model's round-robin, counted over every process."""
        with self._locked():
            offset = self._offset(model)
            key, position, debt = SLOT.unpack_from(self._buf, offset)
            SLOT.pack_into(self._buf, offset, key, position + 1, debt)
        return int(position)

    def leak(self, model: str, share: float, *, possible: bool) -> bool:
        """Whether this request leaks, under the leak fault's debt rule, the debt shared by all."""
        with self._locked():
            offset = self._offset(model)
            key, position, debt = SLOT.unpack_from(self._buf, offset)
            debt += share
            leaks = debt >= 1.0 - 1e-9 and possible
            SLOT.pack_into(self._buf, offset, key, position, debt - 1.0 if leaks else min(debt, 1.0))
        return leaks
