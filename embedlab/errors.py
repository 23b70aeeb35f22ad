"""The errors embedlab raises, one tree rooted at `EmbedlabError`.

    EmbedlabError
    ├── ConfigError                 a spec, argument or matrix that cannot work
    ├── ServerError                 a process embedlab manages (carries its log path)
    │   ├── ServerStartError
    │   │   ├── ServerExitedError       exited before it was ready
    │   │   └── ReadinessTimeoutError   alive, but not ready in time
    │   └── ServerStopError             would not die after SIGKILL
    ├── MetricsError                a worker's /metrics (carries the URL and the worker's index)
    │   ├── ScrapeError                 unreachable, or not Prometheus text
    │   ├── MetricNotFoundError         reachable, but the counter is missing
    │   └── CounterResetError           a counter went down: the worker restarted
    ├── DiscoveryError              a discovery service (etcd) could not list its instances (carries the URL)
    ├── NetworkError                a simulated host's network could not be made or changed (carries the host)
    ├── DrainError                  a drain or resume the frontend did not take up in time (carries the worker)
    ├── TrafficError                a burst whose responses were wrong
    ├── AccessError                 an endpoint refused the harness's credentials or TLS (carries the URL)
    ├── DeploymentStoppedError      a deployment used after it stopped, or whose frontend exited: start a new one
    ├── EarlierCellFailedError      a notebook cell was given what an earlier run left: fix the failed cell
    ├── CheckFailedError            a dispatch check did not hold (carries the table)
    ├── UnsupportedError            the stack cannot do what was asked (a router without a drain API)
    ├── EngineError                 an engine could not load or run its model
    │   └── RemoteEngineError           it failed in a worker's engine process (carries its class)
    ├── NotebookRunError            a scenario notebook failed (carries its report)
    └── ShardMergeError             regress shards that cannot make one run (carries their folders)

Every message says what happened, where, and what to look at next. So a notebook shows
an embedlab error as its message alone, without the stack of frames above it (IPython's
`_render_traceback_` hook); `%tb verbose` (or `%tb plain`) prints the full traceback of
the last error.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

__all__ = [
    "EmbedlabError",
    "ConfigError",
    "ServerError",
    "ServerStartError",
    "ServerExitedError",
    "ReadinessTimeoutError",
    "ServerStopError",
    "MetricsError",
    "ScrapeError",
    "MetricNotFoundError",
    "CounterResetError",
    "DiscoveryError",
    "NetworkError",
    "DrainError",
    "TrafficError",
    "AccessError",
    "DeploymentStoppedError",
    "EarlierCellFailedError",
    "CheckFailedError",
    "UnsupportedError",
    "EngineError",
    "RemoteEngineError",
    "NotebookRunError",
    "ShardMergeError",
]


# IPython's exception modes that ask for every frame; its default, Context, gets the message.
_FULL_TRACEBACK_MODES = ("Plain", "Verbose")


class EmbedlabError(Exception):
    """Base class of every error embedlab raises on purpose."""

    def _render_traceback_(self) -> list[str]:
        """How IPython (a notebook, papermill) shows this error: `Name: message`, no frames.

        The message already says what happened and where; forty lines of library frames
        above it bury that. `%tb verbose` or `%tb plain` (or `%xmode` set to either)
        shows the full traceback, chained causes included.
        """
        shell = _ipython()
        if shell is not None and shell.InteractiveTB.mode in _FULL_TRACEBACK_MODES:
            return list(shell.InteractiveTB.structured_traceback(type(self), self, self.__traceback__))
        # Red, as IPython colours an exception's name.
        return [f"\x1b[0;31m{type(self).__name__}\x1b[0m: {self}"]


def _ipython() -> Any:
    """The running IPython shell, if this process is one; never imports IPython itself."""
    module = sys.modules.get("IPython")
    get = getattr(module, "get_ipython", None)
    return get() if get is not None else None


class ConfigError(EmbedlabError, ValueError):
    """A spec, an argument or a matrix that cannot work as given.

    Also a `ValueError`, which it is: code that validates values may catch either.
    """


class ServerError(EmbedlabError):
    """Something went wrong with a process embedlab manages."""

    def __init__(self, message: str, *, name: str = "", log_path: Path | None = None) -> None:
        super().__init__(message)
        self.name = name
        self.log_path = log_path


class ServerStartError(ServerError):
    """A managed process did not become ready."""


class ServerExitedError(ServerStartError):
    """A managed process exited before it was ready."""

    def __init__(
        self, message: str, *, name: str = "", log_path: Path | None = None, returncode: int | None = None
    ) -> None:
        super().__init__(message, name=name, log_path=log_path)
        self.returncode = returncode


class ReadinessTimeoutError(ServerStartError):
    """A managed process stayed alive but was not ready within its timeout."""


class ServerStopError(ServerError):
    """A managed process survived SIGTERM and SIGKILL."""


class MetricsError(EmbedlabError):
    """A worker's metrics endpoint could not give the counter asked for.

    `url` is what was read; `worker_index` the worker it belongs to, where the reader
    knew (a check names its workers by index; a bare `scrape(url)` does not).
    """

    def __init__(self, message: str, *, url: str = "", worker_index: int | None = None) -> None:
        super().__init__(message)
        self.url = url
        self.worker_index = worker_index


class ScrapeError(MetricsError):
    """The metrics URL was unreachable or did not answer with Prometheus text."""


class MetricNotFoundError(MetricsError):
    """The metrics URL answered, but without the counter (or labels) asked for."""


class CounterResetError(MetricsError):
    """A counter went down between two snapshots: its worker restarted in between."""


class DiscoveryError(EmbedlabError):
    """A discovery service (etcd) could not say which instances it holds. `url` is what was asked."""

    def __init__(self, message: str, *, url: str = "") -> None:
        super().__init__(message)
        self.url = url


class NetworkError(EmbedlabError):
    """A simulated host's network (namespace, link, address, route) could not be made or changed.

    `host` is the host's index (0: the harness's own, which holds the run's hub address),
    None for a listing of the machine's own addresses; `command` the `ip` command that failed.
    """

    def __init__(self, message: str, *, host: int | None = None, command: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.host = host
        self.command = command


class DrainError(EmbedlabError):
    """A drain (or a resume) that the frontend did not take up in time.

    The stack's call succeeded, yet worker `worker_index` (endpoint `endpoint`) was still in
    dispatch (or, for a resume, still out of it) after `timeout` seconds. `drained` is the
    state that was asked for: True for a drain, False for a resume.
    """

    def __init__(
        self, message: str, *, worker_index: int, endpoint: str, drained: bool, timeout: float
    ) -> None:
        super().__init__(message)
        self.worker_index = worker_index
        self.endpoint = endpoint
        self.drained = drained
        self.timeout = timeout


class TrafficError(EmbedlabError):
    """A burst got responses that break the OpenAI embeddings contract."""


class AccessError(EmbedlabError):
    """An endpoint refused the harness before any burst: a 401 or 403 to the credentials it
    sent (or to none), or a TLS handshake that failed (an unknown CA, a name that does not match).

    `url` is what was asked, `endpoint` whose it is ("the frontend", "worker 1's metrics"),
    `status` the HTTP status where one came back (None for a TLS failure), `reason` why, in
    one line. The message never holds a secret: it names where the key came from, never the key.
    """

    def __init__(
        self, message: str, *, url: str = "", endpoint: str = "", status: int | None = None, reason: str = ""
    ) -> None:
        super().__init__(message)
        self.url = url
        self.endpoint = endpoint
        self.status = status
        self.reason = reason


class DeploymentStoppedError(EmbedlabError):
    """A launched deployment was used after it stopped: its servers are gone.

    `stop()` ran (a Stop cell, a second Start, the end of a `with` block), or its
    frontend exited on its own (then `log_path` is its log, and the message ends with
    its last lines). Nothing reaches it any more; start a new one.

    `why` is what happened, in one line (the message adds what to do and the log tail);
    `returncode` the frontend's exit code, where it exited.
    """

    def __init__(
        self,
        why: str = "this deployment was stopped and its servers are gone",
        *,
        log_path: Path | None = None,
        tail: str = "",
        returncode: int | None = None,
    ) -> None:
        message = f"{why}; start a new one (in a notebook: run the Start cell again)"
        super().__init__(message + (f". Last lines of {log_path}:\n{tail}" if log_path is not None else ""))
        self.why = why
        self.log_path = log_path
        self.returncode = returncode


class EarlierCellFailedError(EmbedlabError):
    """A notebook cell was given what an earlier run left, because a cell that would have
    replaced it failed (Run All went on past the error, or it was not run again since).

    It shows none of it. `role` says what the failed cell does ("the plan cell"), `cell`
    which execution failed (`In [3]`), `error` that error's first line, and `stale` what it
    left behind ("`result`"). `refused`: that cell did not fail itself, it was refused for a
    failure since put right (`error` names that one). `rerun`: the failure is put right,
    and this cell (its role) is what is left to run again.
    """

    def __init__(
        self, *, role: str, cell: str, error: str, stale: str, refused: bool = False, rerun: str | None = None
    ) -> None:
        left = f"{stale} is still what an earlier run left"
        if refused:
            message = f"{role} ({cell}) was refused ({error}), so {left}: run that cell again, then this one"
        elif rerun is not None:
            message = f"{role} ({cell}) failed ({error}) and has run since, but {left}: run {rerun} again, then this one"
        else:
            message = (
                f"{role} ({cell}) failed ({error}), so {left}: fix that cell and run it again, then this one"
            )
        super().__init__(message)
        self.role = role
        self.cell = cell
        self.error = error
        self.stale = stale
        self.refused = refused
        self.rerun = rerun


class CheckFailedError(EmbedlabError, AssertionError):
    """A dispatch check did not hold. `table` is the per-worker table it printed."""

    def __init__(self, message: str, *, table: object = None) -> None:
        super().__init__(message)
        self.table = table


class UnsupportedError(EmbedlabError):
    """The stack cannot do what a scenario needs; the message says why, in the stack's own terms."""


class EngineError(EmbedlabError):
    """An engine could not load its model or could not run it."""


class RemoteEngineError(EngineError):
    """The engine failed in a worker's engine process; an ingest process answers for it.

    `remote_class` names the exception there, so the 500 reads as it would from one process.
    """

    def __init__(self, message: str, *, remote_class: str = "EngineError") -> None:
        super().__init__(message)
        self.remote_class = remote_class


class NotebookRunError(EmbedlabError):
    """A scenario notebook failed. `report` is the path of what it left behind."""

    def __init__(self, message: str, *, report: Path | None = None) -> None:
        super().__init__(message)
        self.report = report


class ShardMergeError(EmbedlabError):
    """Regress shards that cannot be merged into one run: a folder that is not a shard, shards of
    different matrices, splits or commits, or one job (or shard) given twice. Nothing is written.

    `runs` are the run folders the message is about.
    """

    def __init__(self, message: str, *, runs: tuple[Path, ...] = ()) -> None:
        super().__init__(message)
        self.runs = runs
