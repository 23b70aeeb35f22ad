"""Files for people are written whole or not at all: a failed write keeps the old file and leaves
no temporary file (a writer SIGKILLed mid-write: tests/integration/test_atomic_writes.py)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from embedlab.jsonio import write_bytes_atomic, write_text_atomic


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = write_text_atomic(tmp_path / "index.html", "old")
    with pytest.raises(TypeError):
        write_bytes_atomic(target, "not bytes")  # type: ignore[arg-type]
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["index.html"]


def test_a_written_file_has_the_mode_open_would_give_it(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        path = write_text_atomic(tmp_path / "deep" / "report.html", "<p>é</p>")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # not mkstemp's 0600
    assert path.read_bytes() == "<p>é</p>".encode()
