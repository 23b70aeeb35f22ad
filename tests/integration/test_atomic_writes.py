"""A writer SIGKILLed mid-write leaves the old file or the new one, never half of one, and the
next clean write leaves no temporary file behind (the clean writes alone: tests/unit/test_atomic_writes.py)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from embedlab.jsonio import write_json

# A results.json far larger than a real one (4 MB), so that a write takes long enough for
# most kills to land inside it; "end" is the last key, so a cut-off file cannot pass for whole.
WRITER = r"""
import sys
from embedlab.jsonio import write_json

path, i = sys.argv[1], int(sys.argv[2])
pad = "x" * 4_000_000
while True:
    i += 1
    write_json(path, {"i": i, "pad": pad, "end": True})
    print(i, flush=True)
"""


PAD = 4_000_000


KILLS = 40


def _temp_files(folder: Path) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name.endswith(".tmp"))


def _read_whole(path: Path) -> int:
    """The `i` of the file at `path`, which must be one complete write."""
    data = json.loads(path.read_text())  # a half-written file is not valid JSON
    assert data["end"] is True and len(data["pad"]) == PAD
    return int(data["i"])


def test_a_writer_killed_at_random_points_leaves_the_old_file_or_the_new_one(tmp_path: Path) -> None:
    target = tmp_path / "results.json"
    write_json(target, {"i": 0, "pad": "x" * PAD, "end": True})
    rng = random.Random(20261201)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    current, left_behind = 0, 0
    for _ in range(KILLS):
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(target), str(current)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert writer.stdout is not None
        printed = current
        # Let it finish 0 to 2 writes, then kill it at a random moment of the next ones: the
        # sleep picks the point; what is asserted holds wherever the kill lands.
        for _ in range(rng.randrange(3)):
            line = writer.stdout.readline()
            assert line, f"the writer exited early with {writer.poll()}"
            printed = int(line)
        time.sleep(rng.uniform(0, 0.08))
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
        printed = max([printed, *(int(line) for line in writer.stdout.read().split())])
        writer.stdout.close()
        found = _read_whole(target)
        # Killed after its last printed write, or between the rename and the print.
        assert found in (printed, printed + 1), (found, printed)
        current = found
        left_behind = max(left_behind, len(_temp_files(tmp_path)))
    assert current > 0, "no write ever completed: the kills proved nothing"

    # A clean write deletes what the killed writers left and leaves nothing of its own.
    write_json(target, {"i": current + 1, "pad": "x" * PAD, "end": True})
    assert _read_whole(target) == current + 1
    assert _temp_files(tmp_path) == [], f"{left_behind} at most were left while writers were killed"
    assert os.listdir(tmp_path) == ["results.json"]
