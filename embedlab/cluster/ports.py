"""Free loopback ports that parallel test runs never share.

Binding port 0 is collision-free, but a port must be known before some servers start
(Dynamo's system port, the frontend's HTTP port). So a port is reserved by creating a
lock file named after it: the reservation holds across processes until it is released
or its owner dies. Ports come from below Linux's ephemeral range, so an outgoing
connection's source port cannot take one between reservation and bind.
"""

from __future__ import annotations

import errno
import os
import random
import socket
import tempfile
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


def _try_reserve(port: int) -> bool:
    path = _DIR / str(port)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        try:
            owner = int(path.read_text() or 0)
        except (OSError, ValueError):
            return False
        if owner and pid_alive(owner):
            return False
        # The owner died without releasing: take the stale reservation over.
        path.write_text(str(os.getpid()))
        return True
    with os.fdopen(fd, "w") as handle:
        handle.write(str(os.getpid()))
    return True


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
    try:
        if int(path.read_text() or 0) == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass
