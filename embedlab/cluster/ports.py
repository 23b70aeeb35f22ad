"""Free loopback ports that parallel test runs never share.

Binding port 0 is collision-free, but a port must be known before some servers start
(Dynamo's system port, the frontend's HTTP port). So a port is reserved by creating a
lock file named after it: the reservation holds across processes until it is released
or its owner dies. Ports come from below Linux's ephemeral range, so an outgoing
connection's source port cannot take one between reservation and bind.

No two live processes ever hold one port (pytest-xdist's workers reserve side by side):
a reservation file appears with its owner's PID already in it (a hard link of a finished
file), so none is ever read empty and taken for stale; and a dead owner's reservation is
taken over under a lock, by one process, after reading the owner again.
"""

from __future__ import annotations

import errno
import fcntl
import os
import random
import socket
import tempfile
import threading
from pathlib import Path

from ..defaults import PORT_DIR_ENV

LOW, HIGH = 20000, 32000
_DIR = Path(os.environ.get(PORT_DIR_ENV) or Path(tempfile.gettempdir()) / f"embedlab-ports-{os.getuid()}")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _bindable(port: int, host: str) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _owner(path: Path) -> int | None:
    """The PID a reservation names; None where it cannot be read (then it counts as taken)."""
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def _try_reserve(port: int) -> bool:
    path = _DIR / str(port)
    mine = _DIR / f".{port}.{os.getpid()}.{threading.get_ident()}"
    mine.write_text(str(os.getpid()))
    try:
        try:
            os.link(mine, path)
            return True
        except FileExistsError:
            pass
        owner = _owner(path)
        if owner is None or pid_alive(owner):
            return False
        # The owner died without releasing. Two processes may both have read its PID: under the
        # lock, the first takes the port over and the second reads the new, live owner.
        with open(_DIR / ".takeover.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if _owner(path) != owner:
                return False
            os.replace(mine, path)
            return True
    finally:
        mine.unlink(missing_ok=True)


def reserve_port(host: str = "127.0.0.1", *, attempts: int = 200) -> int:
    """Reserve a port that is free now and stays ours until `release_port`."""
    _DIR.mkdir(parents=True, exist_ok=True)
    rng = random.Random()
    for _ in range(attempts):
        port = rng.randrange(LOW, HIGH)
        if _try_reserve(port):
            if _bindable(port, host):
                return port
            release_port(port)
    raise OSError(errno.EADDRINUSE, f"no free port found in [{LOW}, {HIGH}) after {attempts} attempts")


def release_port(port: int) -> None:
    path = _DIR / str(port)
    if _owner(path) == os.getpid():
        path.unlink(missing_ok=True)
