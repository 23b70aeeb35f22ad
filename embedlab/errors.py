"""The errors embedlab raises, one tree rooted at `EmbedlabError`.

    EmbedlabError
    ├── ConfigError                 a spec, argument or matrix that cannot work
    ├── ServerError                 a process embedlab manages (carries its log path)
    │   ├── ServerStartError
    │   │   ├── ServerExitedError       exited before it was ready
    │   │   └── ReadinessTimeoutError   alive, but not ready in time
    │   └── ServerStopError             would not die after SIGKILL
    ├── MetricsError                a worker's /metrics (carries the URL)
    │   ├── ScrapeError                 unreachable, or not Prometheus text
    │   ├── MetricNotFoundError         reachable, but the counter is missing
    │   └── CounterResetError           a counter went down: the worker restarted
    ├── TrafficError                a burst whose responses were wrong
    ├── CheckFailedError            a dispatch check did not hold (carries the table)
    ├── UnsupportedError            the stack cannot do what was asked (a router without a drain API)
    ├── EngineError                 an engine could not load or run its model
    └── NotebookRunError            a scenario notebook failed (carries its report)

Every message says what happened, where, and what to look at next.
"""

from __future__ import annotations

from pathlib import Path

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
    "TrafficError",
    "CheckFailedError",
    "UnsupportedError",
    "EngineError",
    "NotebookRunError",
]


class EmbedlabError(Exception):
    """Base class of every error embedlab raises on purpose."""


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
    """A worker's metrics endpoint could not give the counter asked for."""

    def __init__(self, message: str, *, url: str = "") -> None:
        super().__init__(message)
        self.url = url


class ScrapeError(MetricsError):
    """The metrics URL was unreachable or did not answer with Prometheus text."""


class MetricNotFoundError(MetricsError):
    """The metrics URL answered, but without the counter (or labels) asked for."""


class CounterResetError(MetricsError):
    """A counter went down between two snapshots: its worker restarted in between."""

    def __init__(self, message: str, *, url: str = "", worker_index: int | None = None) -> None:
        super().__init__(message, url=url)
        self.worker_index = worker_index


class TrafficError(EmbedlabError):
    """A burst got responses that break the OpenAI embeddings contract."""


class CheckFailedError(EmbedlabError, AssertionError):
    """A dispatch check did not hold. `table` is the per-worker table it printed."""

    def __init__(self, message: str, *, table: object = None) -> None:
        super().__init__(message)
        self.table = table


class UnsupportedError(EmbedlabError):
    """The stack cannot do what a scenario needs; the message says why, in the stack's own terms."""


class EngineError(EmbedlabError):
    """An engine could not load its model or could not run it."""


class NotebookRunError(EmbedlabError):
    """A scenario notebook failed. `report` is the path of what it left behind."""

    def __init__(self, message: str, *, report: Path | None = None) -> None:
        super().__init__(message)
        self.report = report
