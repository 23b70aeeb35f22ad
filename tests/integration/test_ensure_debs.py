"""scripts/ensure-debs, which `make test` runs for its Debian packages: a shell script, run with stubs.

A PATH of stubs records each call: the install logic, never the machine's apt-get or sudo.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ..commands import REPO


@pytest.fixture
def stub_bin(tmp_path: Path) -> Path:
    """A PATH of stubs that record their calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls"
    for name in ("apt-get", "sudo", "present-tool"):
        stub = bin_dir / name
        body = f'echo "{name} $*" >> {log}\n'
        if name == "sudo":
            body += '[ "$1" = "-n" ] && shift\n"$@"\n'
        stub.write_text("#!/bin/sh\n" + body)
        stub.chmod(0o755)
    return bin_dir


def ensure(stub_bin: Path, *pairs: str, uid: int) -> tuple[int, str, list[str]]:
    (stub_bin / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    (stub_bin / "id").chmod(0o755)
    # PATH holds the stubs alone, so the machine's own apt-get and sudo are out of reach.
    proc = subprocess.run(
        [
            "/bin/bash",
            str(REPO / "scripts" / "ensure-debs"),
            "or skip it on purpose: make test SKIP=1",
            *pairs,
        ],
        capture_output=True,
        text=True,
        env={"PATH": str(stub_bin)},
        timeout=30,
    )
    log = stub_bin.parent / "calls"
    return proc.returncode, proc.stderr, log.read_text().splitlines() if log.exists() else []


def test_ensure_debs_installs_what_is_missing_as_root(stub_bin: Path) -> None:
    code, err, calls = ensure(stub_bin, "present-tool:dash", "no-such-command-here:chromium", uid=0)
    assert code == 0, err
    assert calls[0] == "apt-get update -qq"
    assert calls[1].startswith("apt-get install") and calls[1].endswith(" chromium"), calls


def test_ensure_debs_goes_through_sudo_when_not_root(stub_bin: Path) -> None:
    code, err, calls = ensure(stub_bin, "no-such-command-here:chromium", uid=1000)
    assert code == 0, err
    assert "sudo -n apt-get update -qq" in calls
    assert any(c.startswith("sudo -n apt-get install") and c.endswith(" chromium") for c in calls), calls


def test_ensure_debs_installs_nothing_when_everything_is_there(stub_bin: Path) -> None:
    assert ensure(stub_bin, "present-tool:dash", uid=0) == (0, "", [])


def test_ensure_debs_that_cannot_install_says_so_in_one_line(stub_bin: Path) -> None:
    (stub_bin / "apt-get").unlink()
    (stub_bin / "sudo").unlink()
    code, err, calls = ensure(stub_bin, "no-such-command-here:chromium", uid=1000)
    assert code == 1 and calls == []
    assert err.strip().count("\n") == 0
    assert "chromium" in err and "sudo apt-get install -y chromium" in err and "make test SKIP=1" in err
