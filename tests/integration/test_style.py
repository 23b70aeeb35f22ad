"""The style is ruff's, configured in pyproject.toml: ruff is a program of its own, so it runs here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ..commands import REPO


def test_ruff_check_and_format_are_clean() -> None:
    """For the package, the tests and the benchmarks."""
    ruff = Path(sys.executable).parent / "ruff"
    for argv in (["check"], ["format", "--check"]):
        proc = subprocess.run(
            [str(ruff), *argv, "embedlab", "tests", "bench"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, f"ruff {' '.join(argv)}:\n{proc.stdout[-4000:]}{proc.stderr[-2000:]}"
