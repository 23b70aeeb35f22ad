"""The package's shape, checked: layers point one way, nothing imports in a circle, modules stay small."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import embedlab

from ..conftest import REPO

PACKAGE = Path(embedlab.__file__).parent


def test_the_import_contracts_hold(capsys: pytest.CaptureFixture[str]) -> None:
    """import-linter, configured in pyproject.toml: the packages' layers, the layers inside the
    larger packages, the core's independence of IPython, and the no-cycle contract. In-process,
    as `lint-imports --no-cache` runs it."""
    from importlinter.cli import lint_imports

    status = lint_imports(config_filename=str(REPO / "pyproject.toml"), no_cache=True, no_logo=True)
    out = capsys.readouterr().out
    assert status == 0, out[-6000:]
    assert re.search(r"Contracts: \d+ kept, 0 broken\.", out), out[-2000:]
