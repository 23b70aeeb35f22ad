"""The notebooks' kernels under `embedlab regress`: where their sockets lie, and how a signal stops them.

A run's kernel talks over Unix sockets in a folder of its own (`kernel_folder`), which
the notebook's end deletes and the watchdog deletes should the harness die first:
otherwise a SIGKILLed harness would leave `kernel-ipc-1` to `-5` in the run folder and
the connection file in the temp dir. Papermill runs on a thread of its own
(`off_main_thread`), so that the main thread takes SIGINT and SIGTERM (`Stop`): the
running cell is interrupted as Jupyter's interrupt button does it, and nothing further
starts.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from ..cluster.launcher import drop_scratch, keep_scratch

__all__ = ["Stop", "Stopped", "ipc_kernel_manager", "kernel_folder", "off_main_thread", "stopping_on_signals"]


def ipc_kernel_manager(folder: Path, on_start: Callable[[int | None], None]) -> type:
    """A kernel manager whose kernel talks over Unix sockets in `folder` instead of loopback TCP.

    The kernel then opens no port at all, and ipykernel's warning about unencrypted TCP,
    printed once per notebook, does not apply. Its connection file and its sockets
    (kernel-ipc-1 to -5, named after the file) lie in `folder`, not in the run folder and
    the runtime dir, where a killed harness left them. `on_start` gets the kernel's
    process group, for `Stop` to interrupt.
    """
    from jupyter_client.manager import AsyncKernelManager
    from traitlets import default

    class IpcKernelManager(AsyncKernelManager):
        @default("transport")
        def _default_transport(self) -> str:
            return "ipc"

        @default("connection_file")
        def _default_connection_file(self) -> str:
            return str(folder / "kernel.json")

        # AsyncKernelManager makes KernelManager's sync start_kernel async, as its own stubs can't say.
        async def start_kernel(self, **kw: Any) -> None:  # type: ignore[override]
            await super().start_kernel(**kw)
            on_start(getattr(self.provisioner, "pgid", None))

    return IpcKernelManager


@contextlib.contextmanager
def kernel_folder() -> Iterator[Path]:
    """A folder for one kernel's connection file and sockets: deleted after the notebook, and
    by the watchdog should the harness die first (short, in the temp dir: a socket's path
    may not exceed 107 bytes)."""
    path = Path(tempfile.gettempdir()) / f"embedlab-kernel-{os.getpid()}-{secrets.token_hex(4)}"
    keep_scratch(path)  # before it exists: no moment in which a SIGKILL would leave it
    try:
        path.mkdir(mode=0o700)
        yield path
    finally:
        drop_scratch(path)


class Stopped(Exception):
    """A signal stopped the notebook before its next cell (raised in papermill's cell hook)."""


class Stop:
    """The signal handler `regression.run_jobs` installs for SIGINT and SIGTERM.

    The first signal interrupts the running notebook's cell (SIGINT to its kernel, as
    Jupyter's interrupt button does), and no further cell or notebook starts; a second
    kills that kernel, for a cell that does not stop; a third raises `KeyboardInterrupt`
    at once. Papermill runs on a thread of its own (`off_main_thread`), so the main
    thread is free to take the signal.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self.count = 0
        self.kernel_pgid: int | None = None

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        self.signum = self.signum or signum
        if self.count >= 3:
            raise KeyboardInterrupt
        # os.write: a print() here could re-enter the stream that the main thread is writing.
        os.write(
            2,
            b"embedlab: stopping; what finished is kept (again: kill the notebook's kernel)\n"
            if self.count == 1
            else b"embedlab: killing the notebook's kernel (again: stop at once)\n",
        )
        self._signal_kernel(signal.SIGINT if self.count == 1 else signal.SIGKILL)

    def kernel_started(self, pgid: int | None) -> None:
        self.kernel_pgid = pgid

    def before_cell(self, **_: Any) -> None:
        if self.signum is not None:
            raise Stopped(f"stopped by {signal.Signals(self.signum).name} before this cell")

    def _signal_kernel(self, sig: int) -> None:
        if self.kernel_pgid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.kernel_pgid, sig)


@contextlib.contextmanager
def stopping_on_signals() -> Iterator[Stop]:
    stop = Stop()
    if threading.current_thread() is not threading.main_thread():
        yield stop  # signal handlers belong to the main thread; elsewhere a run is not stopped so
        return
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def off_main_thread(call: Callable[[], Any]) -> Any:
    """`call()` on a thread of its own; its result or its exception here.

    nbclient adds SIGINT and SIGTERM handlers to the running event loop for every notebook
    (and never removes them), which on the main thread would replace `Stop`'s while a
    notebook runs. asyncio takes signal handlers on the main thread only, so off it nbclient
    adds none, and the main thread, waiting in `join()`, runs `Stop`. Daemon: after a
    third signal the process need not wait for it.
    """
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = call()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name="embedlab-papermill", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box.get("result")
