"""Commands as a user's shell runs them: `embedlab ...` and a fresh `python -c`, their output as text.

For tests outside tests/unit (which start no process). Each runs this interpreter, so
the worktree's embedlab (PYTHONPATH) is the one run, and waits with a deadline.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from embedlab import Deployment

REPO = Path(__file__).resolve().parents[1]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def run_embedlab(
    *args: str | Path,
    timeout: float = 180,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """`python -m embedlab ARGS`, its stdout and stderr kept apart (a CLI error is stderr's one line)."""
    return subprocess.run(
        [sys.executable, "-m", "embedlab", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=None if env is None else dict(env),
        cwd=cwd,
    )


def attach_args(dep: Deployment) -> list[str]:
    """The options that attach `embedlab scenario` to a running deployment: its frontend, and each
    worker's system URL in worker order."""
    urls = [arg for url in dep.system_urls for arg in ("--system-url", url)]
    return ["--frontend-url", dep.frontend_url, *urls]


def python_c(
    code: str, *, timeout: float = 60, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -c CODE` in a fresh interpreter: what a new process imports, or a shell's global hooks."""
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=None if env is None else dict(env),
        cwd=cwd,
    )


def with_repo_on_path(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment, with this checkout first on PYTHONPATH (for `tests.plugins...` modules)."""
    base = dict(os.environ if env is None else env)
    base["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), base.get("PYTHONPATH", "")) if p)
    return base


def shell_shows(cells: str) -> str:
    """What a real IPython shell prints for `cells` (code that runs them with `shell.run_cell`),
    without colours: in a process of its own, as a shell installs global hooks."""
    code = (
        "from IPython.core.interactiveshell import InteractiveShell\n"
        'shell = InteractiveShell.instance(colors="nocolor")\n' + cells
    )
    proc = python_c(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return ANSI.sub("", proc.stdout)
