"""promtool accepts the watch's alerting rules: `promtool check rules`, and promtool's own unit
test of the alerts (tests/unit/watch/watch_rules_test.yml)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from embedlab.watch import names

RULES_TEST = Path(__file__).parents[1] / "unit" / "watch" / "watch_rules_test.yml"


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail(
            "promtool is missing: `make test` installs Debian's prometheus (apt-get install prometheus)"
        )
    return found


def test_promtool_checks_the_rules() -> None:
    proc = subprocess.run(
        [_promtool(), "check", "rules", str(names.RULES_FILE)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 4 rules found" in proc.stdout + proc.stderr


def test_promtool_unit_tests_the_alerts() -> None:
    # The failing verdict fires the alert at once and clears it with the verdict.
    proc = subprocess.run(
        [_promtool(), "test", "rules", RULES_TEST.name], capture_output=True, text=True, cwd=RULES_TEST.parent
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
