"""No orphans, ever: an interrupted scenario tears down, and a SIGKILLed harness's servers still die.

Two mechanisms stop the servers of a harness killed by SIGKILL (which runs no Python
cleanup): the kernel's parent-death signal, which reaches the direct children only, and
the `embedlab.cluster.watchdog` process, which stops their whole process groups. Each is tested
alone. Everything is found and checked by PID and process group, read from /proc.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from ..proctools import alive, assert_all_gone, descendants_of, group_members, wait_gone

HARNESS = Path(__file__).with_name("orphan_harness.py")
START_TIMEOUT = 120.0
# The watchdog polls every 0.2 s and allows SIGTERM 3 s before SIGKILL.
GONE_TIMEOUT = 20.0


@dataclass
class Started:
    proc: subprocess.Popen[bytes]
    report: dict[str, Any]
    pids: list[int]  # every process the harness started, grandchildren and the watchdog included
    groups: list[int]

    def server(self, name: str) -> dict[str, int]:
        return self.report["servers"][name]

    def sigkill(self) -> None:
        """SIGKILL the harness process itself and reap it: nothing of it runs its teardown."""
        self.proc.kill()
        self.proc.wait(timeout=10)


def _everything_under(harness_pid: int, groups: list[int]) -> list[int]:
    return sorted({*descendants_of(harness_pid), *(m for g in groups for m in group_members(g))})


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _teardown(proc: subprocess.Popen[bytes], known: set[int], groups: list[int]) -> None:
    """Stop whatever survived a test, by the PIDs and groups recorded while it ran."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)
    for pgid in groups:
        if set(group_members(pgid)) & known:  # still ours: never signal a group id the system reused
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for pid in known:
        if alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _read_line(proc: subprocess.Popen[bytes], timeout: float, err_path: Path) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if sel.select(timeout=0.2):
                line = proc.stdout.readline().decode()
                if line:
                    return line
            if proc.poll() is not None:
                raise AssertionError(
                    f"the harness exited with {proc.returncode}:\n{err_path.read_text()[-3000:]}"
                )
    raise AssertionError(f"the harness did not report within {timeout:g}s:\n{err_path.read_text()[-3000:]}")


@contextmanager
def harness(mode: str, tmp_path: Path) -> Iterator[Started]:
    err_path = tmp_path / "harness.err"
    with open(err_path, "wb") as err:
        # Its own session: signals aimed at it reach nothing of the test run.
        proc = subprocess.Popen(
            [sys.executable, str(HARNESS), mode, str(tmp_path / "run")],
            stdout=subprocess.PIPE,
            stderr=err,
            start_new_session=True,
        )
    known: set[int] = set()
    groups: list[int] = []
    try:
        report = json.loads(_read_line(proc, START_TIMEOUT, err_path))
        groups = [s["pgid"] for s in report["servers"].values()]
        pids = _everything_under(proc.pid, groups)
        known.update(pids)
        assert {s["pid"] for s in report["servers"].values()} <= set(pids)
        assert report["watchdog"] in pids
        yield Started(proc, report, pids, groups)
    finally:
        known.update(_everything_under(proc.pid, groups) if proc.poll() is None else [])
        _teardown(proc, known, groups)
        assert proc.stdout is not None
        proc.stdout.close()


def sigkill_and_wait(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    assert wait_gone([pid], timeout=10) == []


# -- SIGINT: teardown completes -------------------------------------------------------------


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _frontend_requests(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=2).text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        if family.type == "counter"
        for s in family.samples
        if s.name == "embedlab_frontend_requests_total"
    )


def test_sigint_mid_scenario_tears_everything_down(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        # Its own session and group, so that SIGINT to the group is a terminal's Ctrl-C.
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "embedlab",
                "scenario",
                "same-model",
                "--requests",
                "20000",
                "--concurrency",
                "4",
                "--run-dir",
                str(run_dir),
            ],
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
            # A shell without job control starts background jobs with SIGINT ignored, and
            # children inherit that; a terminal's foreground job has the default action.
            preexec_fn=_default_sigint,
        )
    known: set[int] = set()
    groups: list[int] = []
    try:
        # Wait for the deployment, then for its traffic: the interrupt must land mid-burst.
        deadline = time.monotonic() + START_TIMEOUT
        url = ""
        while time.monotonic() < deadline and proc.poll() is None:
            log = run_dir / "frontend.log"
            match = (
                re.search(r"frontend listening on (http://127\.0\.0\.1:\d+)", log.read_text())
                if log.exists()
                else None
            )
            if match:
                url = match.group(1)
                try:
                    if _frontend_requests(url) > 0:
                        break
                except httpx.HTTPError:
                    pass
            time.sleep(0.05)
        assert proc.poll() is None, (
            f"the scenario ended before it could be interrupted:\n{err.read_text()[-2000:]}"
        )
        assert url and _frontend_requests(url) > 0, "no traffic within the start-up deadline"
        # The servers, identified as the frontend itself reports them: worker PIDs by registration.
        health = httpx.get(f"{url}/health", timeout=2).json()
        worker_pids = {i["pid"] for instances in health["models"].values() for i in instances}
        pids = _everything_under(proc.pid, [])
        groups = sorted({g for g in map(_pgid, pids) if g is not None} - {proc.pid})
        pids = _everything_under(proc.pid, groups)
        known.update(pids)
        assert len(worker_pids) == 2 and worker_pids <= set(pids)
        assert len(groups) >= 3, "the frontend, both workers (and the watchdog) each have their own group"

        os.killpg(proc.pid, signal.SIGINT)
        returncode = proc.wait(timeout=60)
        assert returncode == 130, f"exit code {returncode}:\n{err.read_text()[-2000:]}"
        assert "interrupted" in err.read_text()
        assert "PASSED" not in out.read_text(), "the scenario finished: the interrupt did not land mid-run"
        assert_all_gone(pids, groups, "after SIGINT", timeout=GONE_TIMEOUT)
    finally:
        _teardown(proc, known, groups)


# -- SIGKILL: the servers still die ---------------------------------------------------------------


def test_sigkill_harness_parent_death_signal_alone_stops_the_servers(tmp_path: Path) -> None:
    with harness("deployment", tmp_path) as h:
        # Take the watchdog out first: only the kernel's parent-death signal is left.
        sigkill_and_wait(h.report["watchdog"])
        servers = [s["pid"] for s in h.report["servers"].values()]
        assert len(servers) == 3 and all(alive(p) for p in servers)
        h.sigkill()
        assert_all_gone(h.pids, h.groups, "parent-death signal", timeout=GONE_TIMEOUT)


def test_sigkill_harness_watchdog_stops_what_the_signal_cannot_reach(tmp_path: Path) -> None:
    with harness("wrapped", tmp_path) as h:
        wrapper = h.server("wrapper")
        orphans = [p for p in group_members(wrapper["pgid"]) if p != wrapper["pid"]]
        assert len(orphans) >= 2, "the wrapped worker and the SIGTERM-ignoring sleep run under the shell"
        h.sigkill()
        assert_all_gone(h.pids, h.groups, "watchdog", timeout=GONE_TIMEOUT)


def test_without_the_watchdog_a_wrapped_server_is_orphaned(tmp_path: Path) -> None:
    """The control for the test above: the parent-death signal alone leaves the grandchildren."""
    with harness("wrapped", tmp_path) as h:
        wrapper = h.server("wrapper")
        orphans = [p for p in group_members(wrapper["pgid"]) if p != wrapper["pid"]]
        sigkill_and_wait(h.report["watchdog"])
        h.sigkill()
        # The direct children die of the signal...
        assert wait_gone([s["pid"] for s in h.report["servers"].values()], timeout=GONE_TIMEOUT) == []
        # ...the wrapper's children do not: this is the watchdog's job. (Torn down on exit.)
        assert orphans and all(alive(p) for p in orphans)


def test_deployment_started_on_a_thread_outlives_the_thread_but_not_the_harness(tmp_path: Path) -> None:
    # The harness checks that the servers still answer after the starting thread exited.
    with harness("thread", tmp_path) as h:
        servers = [s["pid"] for s in h.report["servers"].values()]
        assert len(servers) == 3 and all(alive(p) for p in servers)
        h.sigkill()
        assert_all_gone(h.pids, h.groups, "watchdog, thread-started deployment", timeout=GONE_TIMEOUT)
