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
    proc = subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "Contracts: 2 kept, 0 broken." in proc.stdout, proc.stdout[-2000:]


def test_no_module_grows_past_about_400_lines() -> None:
    sizes = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    too_long = {name: n for name, n in sizes.items() if n > 420}
    assert not too_long, f"split these by job: {too_long}"
