"""Files for people and browsers: written whole or not at all; JSON whose NaN and infinities
become null and whose paths become strings.

Every file embedlab writes for someone to read (results, indexes, reports, JUnit, pages,
the benchmarks' JSON) goes through `write_bytes_atomic`: a temporary file in the same
folder, fsynced, then renamed over the target. A reader, or a process killed mid-write,
finds the old file or the new one, never a half-written one. A SIGKILL during the write
leaves its temporary file (`.<name>.<pid>-<random>.tmp`); the next write of that target
deletes those whose process is gone.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["load_json", "write_bytes_atomic", "write_json", "write_text_atomic"]

_TMP_SUFFIX = ".tmp"


def write_json(path: str | Path, data: Any) -> Path:
    """Write `data` to `path` (atomically), parents created."""
    return write_text_atomic(path, json.dumps(_finite(data), indent=2, default=str) + "\n")


def load_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text())


def write_text_atomic(path: str | Path, text: str) -> Path:
    """`text` as UTF-8 at `path`: the old file or the new one, never a part (`write_bytes_atomic`)."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    """`data` at `path`, parents created, through a temporary file renamed into place.

    The file is fsynced before the rename, so the name never points at unwritten blocks
    after a crash; the folder is not (after a power loss the rename may be lost, and the
    old file is what remains). On any failure the temporary file is deleted and the
    target is untouched. The new file's mode is what `open(path, "w")` would give it.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(
        dir=target.parent, prefix=f"{_tmp_prefix(target.name)}{os.getpid()}-", suffix=_TMP_SUFFIX
    )
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would hide a shared report
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _remove_stale_tmp(target)
    return target


def _tmp_prefix(name: str) -> str:
    return f".{name}."


def _remove_stale_tmp(target: Path) -> None:
    """Delete the temporary files of `target` that a killed writer left (its pid is gone)."""
    prefix = _tmp_prefix(target.name)
    try:
        names = os.listdir(target.parent)
    except OSError:
        return
    for name in names:
        if not (name.startswith(prefix) and name.endswith(_TMP_SUFFIX)):
            continue
        pid = name[len(prefix) :].split("-", 1)[0]
        if pid.isdigit() and not _pid_alive(int(pid)):
            with contextlib.suppress(OSError):
                os.unlink(target.parent / name)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _umask() -> int:
    # Read, not set and reset: os.umask() would change it for every thread meanwhile.
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_finite(v) for v in value]
    return value
