"""The package's shape, checked: layers point one way, nothing imports in a circle, modules stay small."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import embedlab

REPO = Path(__file__).resolve().parents[2]
PACKAGE = Path(embedlab.__file__).parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def test_the_import_contracts_hold() -> None:
    """import-linter, configured in pyproject.toml: the layers contract and the no-cycle contract."""
    proc = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "Contracts: 2 kept, 0 broken." in proc.stdout, proc.stdout[-2000:]


def test_ruff_check_and_format_are_clean() -> None:
    """The style is ruff's, configured in pyproject.toml, for the package, the tests and the benchmarks."""
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


def test_a_serving_command_imports_nothing_of_the_harness() -> None:
    """`embedlab worker ...` parses with the serving commands alone: no scenarios, stacks or httpx
    (0.2 s of CPU in every worker a pool starts)."""
    code = (
        "import sys; from embedlab.cli.entry import build_parser, _command_of\n"
        "argv = ['--plugin', 'x', 'worker', '--served-model-name', 'm', '--endpoint', 'a.b.c']\n"
        "assert _command_of(argv) == 'worker'\n"
        "build_parser(command='worker').parse_args(argv[2:])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('httpx', 'rich', 'pandas')"
        " or m.startswith(('embedlab.scenarios', 'embedlab.stacks', 'embedlab.cluster.deployment'))))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"
