"""ManagedProcess: one child in its own session, with a log file, readiness, and group teardown.

Nothing starts in `__init__`: a half-built object never owns a process. Every process
started here is stopped by its process group: on `stop()`, at interpreter exit, and when
the harness itself is killed (through a parent-death signal for processes started from
the main thread, and the watchdog for all of them).
"""

from __future__ import annotations

import atexit
import ctypes
import enum
import json
import os
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ..defaults import PORT_DIR_ENV, STOP_TIMEOUT_S
from ..errors import ReadinessTimeoutError, ServerExitedError, ServerStopError
from ..plugins import child_env

_PR_SET_PDEATHSIG = 1
_live: weakref.WeakSet[ManagedProcess] = weakref.WeakSet()
_live_lock = threading.Lock()


class _Watchdog:
    """One `embedlab.cluster.watchdog` per harness process, told which process groups to stop.

    A parent-death signal reaches only direct children; the watchdog also stops what
    they started (vLLM's engine process, for one) if the harness is SIGKILLed.
    """

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._path: Path | None = None
        self._groups: set[int] = set()
        self._cleanups: list[tuple[str, ...]] = []

    def _ensure(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        directory = Path(os.environ.get(PORT_DIR_ENV) or "/tmp") / f"embedlab-watchdog-{os.getuid()}"
        directory.mkdir(parents=True, exist_ok=True)
        self._path = directory / f"{os.getpid()}.groups"
        self._write()
        # Its own session, so a Ctrl-C aimed at the harness's terminal group spares it.
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "embedlab.cluster.watchdog", str(os.getpid()), str(self._path)],
            env=child_env(os.environ),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def _write(self) -> None:
        assert self._path is not None
        tmp = self._path.with_suffix(".tmp")
        lines = [f"{g}\n" for g in sorted(self._groups)] + [
            f"run {json.dumps(list(c))}\n" for c in self._cleanups
        ]
        tmp.write_text("".join(lines))
        tmp.replace(self._path)

    def add(self, pgid: int) -> None:
        self._groups.add(pgid)
        self._ensure()
        self._write()

    def discard(self, pgid: int) -> None:
        self._groups.discard(pgid)
        if self._path is not None:
            self._write()

    def add_cleanup(self, argv: tuple[str, ...]) -> None:
        self._cleanups.append(argv)
        self._ensure()
        self._write()

    def discard_cleanup(self, argv: tuple[str, ...]) -> None:
        if argv in self._cleanups:
            self._cleanups.remove(argv)
        if self._path is not None:
            self._write()

    def close(self) -> None:
        self._groups.clear()
        self._cleanups.clear()
        if self._path is not None:
            self._write()
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        if self._path is not None:
            self._path.unlink(missing_ok=True)


_watchdog = _Watchdog()


class State(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    STOPPED = "stopped"


def _load_prctl() -> Callable[..., int] | None:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


# Resolved in the parent: a dlopen between fork and exec can deadlock on a loader lock
# that another thread of the harness held at fork time.
_prctl = _load_prctl()


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: if the harness dies, even by SIGKILL,
    # the kernel sends this child SIGTERM, and its own shutdown stops its children.
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def tail(path: Path, lines: int = 40) -> str:
    try:
        with open(path, errors="replace") as handle:
            return "".join(deque(handle, maxlen=lines))
    except OSError:
        return ""


class ManagedProcess:
    """A child process embedlab owns: started, probed and stopped by process group."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        stop_timeout: float = STOP_TIMEOUT_S,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = Path(log_path)
        self.env = dict(env) if env is not None else dict(os.environ)
        self.cwd = cwd
        self.stop_timeout = stop_timeout
        self.state = State.NEW
        self._popen: subprocess.Popen[bytes] | None = None
        self.pgid: int | None = None
        self.started_at: float | None = None
        # embedlab sent its group SIGKILL (a fault: `kill_host`): it has exited or is about to,
        # whatever `alive()` says yet (see `signal`).
        self.killed = False

    def __repr__(self) -> str:
        return f"<ManagedProcess {self.name} pid={self.pid} {self.state.value}>"

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen else None

    @property
    def returncode(self) -> int | None:
        return self._popen.poll() if self._popen else None

    def alive(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def start(self) -> ManagedProcess:
        if self.state is not State.NEW:
            raise RuntimeError(f"{self.name} was already started ({self.state.value})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"# embedlab: starting {self.name}: {' '.join(self.argv)}\n".encode())
            log.flush()
            # The kernel sends the parent-death signal when the *thread* that forked the
            # child exits, not the process: a server started from a worker thread (a
            # thread pool, Jupyter's run_sync) died with that thread. Off the main
            # thread, the watchdog alone stops the servers of a killed harness.
            on_main_thread = threading.current_thread() is threading.main_thread()
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
                preexec_fn=_die_with_parent if on_main_thread else None,
            )
        self.pgid = self._popen.pid  # leader of its own new session and group
        self.started_at = time.monotonic()
        self.state = State.RUNNING
        with _live_lock:
            _live.add(self)
            _watchdog.add(self.pgid)
        return self

    def log_tail(self, lines: int = 40) -> str:
        return tail(self.log_path, lines)

    def _exited_error(self, what: str) -> ServerExitedError:
        code = self.returncode
        return ServerExitedError(
            f"{self.name} exited with code {code} before {what}. Last lines of {self.log_path}:\n{self.log_tail()}",
            name=self.name,
            log_path=self.log_path,
            returncode=code,
        )

    def wait_ready(
        self,
        probe: Callable[[], bool],
        *,
        timeout: float,
        what: str = "it was ready",
        on_poll: Callable[[], None] | None = None,
    ) -> float:
        """Poll `probe` with backoff until it is true; fail at once if the process exits.

        `on_poll` runs before each probe (a progress display's clock). Returns the seconds it took.
        """
        start = time.monotonic()
        deadline = start + timeout
        delay = 0.005
        while True:
            if not self.alive():
                raise self._exited_error(what)
            if on_poll is not None:
                on_poll()
            try:
                if probe():
                    return time.monotonic() - start
            except Exception:  # a probe that raises means "not yet"
                pass
            now = time.monotonic()
            if now >= deadline:
                raise ReadinessTimeoutError(
                    f"{self.name} (pid {self.pid}) was not ready ({what}) within {timeout:g}s. "
                    f"Last lines of {self.log_path}:\n{self.log_tail()}",
                    name=self.name,
                    log_path=self.log_path,
                )
            time.sleep(min(delay, deadline - now))
            delay = min(delay * 1.5, 0.05)

    def signal(self, sig: int) -> None:
        """Send `sig` to the whole process group; a SIGKILL that reached it sets `killed`.

        The kernel reports the exit of a process with many threads (a Tokio runtime's) only
        once the last one is gone: `alive()` stayed True 2 to 120 ms after a SIGKILL, measured
        on a 2-core box. `killed` is true from the moment the signal went out.
        """
        if self.pgid is not None:
            try:
                os.killpg(self.pgid, sig)
            except ProcessLookupError:
                return
            self.killed = self.killed or sig == signal.SIGKILL

    def wait_exit(self, timeout: float) -> int | None:
        """The exit code once the kernel reports the exit, waiting at most `timeout` s (None past it)."""
        if self._popen is None:
            return None
        try:
            return self._popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def _group_alive(self) -> bool:
        if self.pgid is None:
            return False
        try:
            os.killpg(self.pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def stop(self, *, timeout: float | None = None) -> int | None:
        """SIGTERM the group, wait, then SIGKILL it. Safe to call more than once."""
        if self._popen is None or self.state is State.STOPPED:
            return self.returncode
        self.signal(signal.SIGTERM)
        return self._finish_stop(time.monotonic() + (self.stop_timeout if timeout is None else timeout))

    def _finish_stop(self, deadline: float) -> int | None:
        assert self._popen is not None
        delay = 0.002
        while time.monotonic() < deadline and (self.alive() or self._group_alive()):
            self._reap()
            time.sleep(delay)
            delay = min(delay * 2, 0.02)
        if self.alive() or self._group_alive():
            self.signal(signal.SIGKILL)
            try:
                self._popen.wait(timeout=5)
            except subprocess.TimeoutExpired as exc:
                raise ServerStopError(
                    f"{self.name} (pid {self.pid}) survived SIGKILL", name=self.name, log_path=self.log_path
                ) from exc
        self._reap()
        self.state = State.STOPPED
        with _live_lock:
            _live.discard(self)
            if self.pgid is not None:
                _watchdog.discard(self.pgid)
        return self.returncode

    def _reap(self) -> None:
        if self._popen is not None:
            self._popen.poll()


def stop_together(procs: list[ManagedProcess], *, timeout: float | None = None) -> None:
    """SIGTERM every group in order, then wait for them all (SIGKILL past the deadline)."""
    running = [p for p in procs if p._popen is not None and p.state is not State.STOPPED]
    for proc in running:
        proc.signal(signal.SIGTERM)
    errors = []
    deadline = time.monotonic() + (
        max((p.stop_timeout for p in running), default=0.0) if timeout is None else timeout
    )
    for proc in running:
        try:
            proc._finish_stop(deadline)
        except Exception as exc:
            errors.append(exc)
    if errors:
        raise errors[0]


def register_cleanup(argv: tuple[str, ...]) -> None:
    """Run `argv` if the harness dies (watchdog) or exits (atexit) before `unregister_cleanup`.

    For what a run makes besides processes (a network namespace, a link): registered
    before it is made, so no moment exists in which a killed harness would leave it behind.
    Cleanups run after every process group is stopped, last registered first.
    """
    with _live_lock:
        _watchdog.add_cleanup(tuple(argv))


def unregister_cleanup(argv: tuple[str, ...]) -> None:
    with _live_lock:
        _watchdog.discard_cleanup(tuple(argv))


@atexit.register
def _stop_all() -> None:
    with _live_lock:
        survivors = list(_live)
        cleanups = list(reversed(_watchdog._cleanups))
    # All groups get SIGTERM at once and share one deadline: each process's own stop
    # timeout (vLLM needs its 30 s to release /dev/shm), not one timeout per survivor.
    try:
        stop_together(survivors)
    except Exception:
        pass
    for argv in cleanups:
        subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=30,
            check=False,
        )
    with _live_lock:
        _watchdog.close()
