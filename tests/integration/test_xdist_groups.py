"""tests/xdist_groups.py in a real pytest-xdist run: the tests of a group run on one worker.

xdist's own loadgroup lost its groups silently on pytest 9.2 (pytest-dev/pytest-xdist#1386),
so a run of a small suite here checks where each test ran, from pytest's own -v lines.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from ..conftest import REPO
from ..xdist_groups import GROUPS_FILE

CONFTEST = """
from tests import xdist_groups
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    xdist_groups.publish(config, items)

@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    return xdist_groups.scheduler(config, log)
"""

# Collected in this order, loadscope without groups would split each group over both workers.
SHARED = """
import pytest

@pytest.fixture(scope="module")
def deployment():
    return object()

@pytest.fixture(scope="module")
def other_server():
    return object()

def test_1(deployment): pass
def test_2(deployment): pass
def test_3(deployment): pass
def test_alone(): pass
def test_other_1(other_server): pass
def test_other_2(other_server): pass
"""

HEAVY = """
import pytest

@pytest.mark.heavy
def test_heavy_1(): pass
def test_light_1(): pass
@pytest.mark.heavy
def test_heavy_2(): pass
@pytest.mark.vllm
def test_vllm_1(): pass
def test_light_2(): pass
@pytest.mark.vllm
def test_vllm_2(): pass
@pytest.mark.vllm(engines=1)
def test_one_engine_1(): pass
@pytest.mark.vllm(engines=1)
def test_one_engine_2(): pass
@pytest.mark.netns
def test_netns_1(): pass
@pytest.mark.netns
def test_netns_2(): pass
"""


def test_a_group_runs_on_one_worker_and_the_rest_spreads(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    heavy\n    vllm\n    netns\n")
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_shared.py").write_text(SHARED)
    (tmp_path / "test_heavy.py").write_text(HEAVY)
    # Only xdist: the venv's other plugins (ai-dynamo's import vLLM) have no part here.
    # This test may itself run in an xdist worker: its variables are not the inner run's.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(PYTHONPATH=str(REPO), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "xdist.plugin", "-n", "2", "--dist", "loadgroup", "-v"]
        + ["-p", "no:cacheprovider", "--basetemp", str(tmp_path / "base"), str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "scheduling tests via GroupScheduling" in proc.stdout
    ran = dict(
        (test, worker) for worker, test in re.findall(r"\[(gw\d)\] \[ *\d+%\] PASSED \S+::(\w+)", proc.stdout)
    )
    assert len(ran) == 16, proc.stdout
    assert ran["test_1"] == ran["test_2"] == ran["test_3"], ran
    assert ran["test_other_1"] == ran["test_other_2"], ran
    assert ran["test_heavy_1"] == ran["test_heavy_2"], ran
    assert ran["test_vllm_1"] == ran["test_vllm_2"], ran
    assert ran["test_one_engine_1"] == ran["test_one_engine_2"], ran
    assert ran["test_netns_1"] == ran["test_netns_2"], ran
    assert set(ran.values()) == {"gw0", "gw1"}, ran
    # Where they need not share, they are not bound to: each fixture and each lane its own group.
    group = {
        k.rsplit("::", 1)[1]: v for k, v in json.loads((tmp_path / "base" / GROUPS_FILE).read_text()).items()
    }
    assert group["test_other_1"] == group["test_other_2"] != group["test_1"], group
    lanes = ("test_heavy_1", "test_vllm_1", "test_one_engine_1", "test_netns_1")
    assert [group[test] for test in lanes] == ["heavy", "vllm", "vllm-1", "netns"], group
    assert "test_alone" not in group and "test_light_1" not in group, group
