"""What the CPU benchmarks share: `hey` runs, process-group CPU time, a quiet machine, the machine.

    from measure import hey, group_cpu_seconds, wait_for_quiet, machine_info

`hey` (Debian's package) is the load generator: a Go binary that drives thousands of
requests per second from one process, where a Python client tops out near 1,000 and
would measure itself. Its CSV output gives every request's latency and start offset,
so several `hey` processes started together (one per model) are pooled exactly.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HEY = shutil.which("hey") or "/usr/bin/hey"


@dataclass(frozen=True)
class HeyResult:
    requests: int  # answered 200
    failed: int  # not 200, or no answer at all
    seconds: float
    rps: float
    p50_ms: float
    p99_ms: float


def require_hey() -> None:
    if not os.path.exists(HEY):
        raise SystemExit(
            "hey is not installed: `apt-get install hey` (Debian), or `make bench`, which installs it"
        )


def _hey_argv(
    url: str,
    body: bytes,
    *,
    requests: int,
    concurrency: int,
    headers: Sequence[str],
    seconds: float | None = None,
) -> list[str]:
    # -z: as many requests as the time allows (a load step of fixed length), else -n.
    amount = ["-z", f"{seconds:g}s"] if seconds else ["-n", str(requests)]
    argv = [
        HEY,
        *amount,
        "-c",
        str(concurrency),
        "-m",
        "POST",
        "-T",
        "application/json",
        "-t",
        "60",
        "-o",
        "csv",
    ]
    for header in headers:
        argv += ["-H", header]
    return argv + ["-d", body.decode(), url]


def _parse_csv(text: str) -> tuple[list[float], list[float], int]:
    """(latencies s, end offsets s, non-200 count) from hey's CSV (one line per answered request)."""
    latencies: list[float] = []
    ends: list[float] = []
    bad = 0
    for line in text.splitlines()[1:]:
        cols = line.split(",")
        if len(cols) < 8:
            continue
        latency, status, offset = float(cols[0]), cols[6], float(cols[7])
        if status != "200":
            bad += 1
            continue
        latencies.append(latency)
        ends.append(offset + latency)
    return latencies, ends, bad


def hey_many(
    jobs: Sequence[tuple[str, bytes]],
    *,
    requests: int,
    concurrency: int,
    headers: Sequence[str] = (),
    seconds: float | None = None,
) -> HeyResult:
    """Run one `hey` per (url, body) job at once, `requests` and `concurrency` each; pool them.

    Throughput is answered requests over the time from the common start to the last
    answer; the processes start within a few milliseconds of each other. With `seconds`,
    each sends for that long instead of a fixed count, and failures are the non-200s.
    """
    require_hey()
    procs = [
        subprocess.Popen(
            _hey_argv(
                url, body, requests=requests, concurrency=concurrency, headers=headers, seconds=seconds
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        for url, body in jobs
    ]
    latencies: list[float] = []
    last_end = 0.0
    bad = 0
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=900)
            if proc.returncode != 0:
                raise RuntimeError(f"hey exited {proc.returncode}: {err.decode(errors='replace')[-500:]}")
            lat, ends, b = _parse_csv(out.decode())
            latencies += lat
            last_end = max([last_end, *ends])
            bad += b
    finally:
        # Ctrl-C or an error: hey is ours, stop it by its PID.
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    # hey gives each of its `concurrency` lanes requests // concurrency requests.
    answered = len(latencies)
    total = answered + bad if seconds else requests // concurrency * concurrency * len(jobs)
    if not answered:
        raise RuntimeError(f"no request was answered 200 by {jobs[0][0]} ({bad} failed)")
    arr = np.asarray(latencies)
    return HeyResult(
        requests=answered,
        failed=total - answered,
        seconds=last_end,
        rps=answered / last_end,
        p50_ms=float(np.percentile(arr, 50) * 1e3),
        p99_ms=float(np.percentile(arr, 99) * 1e3),
    )


def hey(url: str, body: bytes, *, requests: int, concurrency: int, headers: Sequence[str] = ()) -> HeyResult:
    return hey_many([(url, body)], requests=requests, concurrency=concurrency, headers=headers)


def median_result(results: Sequence[HeyResult]) -> dict[str, float]:
    """The median of each figure over repeated runs (each figure on its own)."""
    return {
        "rps": statistics.median(r.rps for r in results),
        "p50_ms": statistics.median(r.p50_ms for r in results),
        "p99_ms": statistics.median(r.p99_ms for r in results),
        "failed": sum(r.failed for r in results),
        "runs": len(results),
    }


_TICK = os.sysconf("SC_CLK_TCK")


def group_cpu_seconds(pgid: int, *, reaped_children: bool = False) -> float:
    """User plus system CPU seconds of every live process in process group `pgid`.

    From /proc/<pid>/stat (utime, stime: all threads of the process). The group, not
    one PID, so that a server's helper processes are counted too. `reaped_children` adds
    cutime and cstime: the CPU of children that exited and were waited for, such as a
    finished `hey`, which would otherwise vanish from the count.
    """
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as handle:
                raw = handle.read()
        except OSError:
            continue  # exited meanwhile
        fields = raw[raw.rindex(b")") + 2 :].split()
        # After the command: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
        if int(fields[2]) == pgid:
            total += int(fields[11]) + int(fields[12])
            if reaped_children:
                total += int(fields[13]) + int(fields[14])
    return total / _TICK


def machine_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all cores since boot, from /proc/stat."""
    with open("/proc/stat") as handle:
        fields = [int(x) for x in handle.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


class ForeignCpu:
    """Cores' worth of CPU used by processes outside ours, from creation to `.cores()`.

    Ours are this script's process group (it holds the `hey`s) and `own_pgids` (the
    servers under test). Recorded beside every measurement: a figure taken while
    someone else's test suite ran is marked as such.
    """

    def __init__(self, own_pgids: Sequence[int] = ()) -> None:
        self.groups = {os.getpgrp(), *own_pgids}
        self.own0 = self._own()
        self.busy0, self.total0 = machine_jiffies()

    def _own(self) -> float:
        return sum(group_cpu_seconds(g, reaped_children=True) for g in self.groups)

    def cores(self) -> float:
        busy1, total1 = machine_jiffies()
        own = self._own() - self.own0
        wall = (total1 - self.total0) / _TICK / (os.cpu_count() or 1)  # as the kernel counted it
        return max(0.0, ((busy1 - self.busy0) / _TICK - own) / max(wall, 1e-9))


def wait_for_quiet(
    own_pgids: Sequence[int] = (),
    *,
    max_load: float | None = 1.5,
    max_foreign_cores: float = 0.3,
    poll_s: float = 30.0,
    max_wait_s: float = 600.0,
    window_s: float = 5.0,
) -> dict[str, float | bool]:
    """Wait (bounded) until other people's work leaves the cores alone; say what was seen.

    Other engineers' test suites share these 2 cores: a run taken under their load says
    more about them than about us. Quiet means that, over `window_s`, processes outside ours
    use at most `max_foreign_cores`, and that the 1-minute load average is at most
    `max_load`. Pass `max_load=None` after a block of our own measurements: they keep
    the load average up for a minute after they end, the foreign CPU does not lie.
    After `max_wait_s` it measures anyway, and the JSON says so.
    """
    started = time.monotonic()
    while True:
        meter = ForeignCpu(own_pgids)
        time.sleep(window_s)
        foreign = meter.cores()
        load = os.getloadavg()[0]
        quiet = foreign <= max_foreign_cores and (max_load is None or load <= max_load)
        waited = time.monotonic() - started
        if quiet or waited >= max_wait_s:
            return {
                "load_1m": round(load, 2),
                "foreign_cores": round(foreign, 2),
                "waited_s": round(waited, 1),
                "quiet": quiet,
            }
        print(
            f"  busy machine (load average {load:.2f}, others use {foreign:.2f} cores): waiting {poll_s:.0f} s",
            flush=True,
        )
        time.sleep(poll_s)


def machine_info() -> dict[str, object]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = 0.0
    try:
        mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        pass
    hey_version = ""
    try:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Version}", "hey"], capture_output=True, text=True, timeout=5
        )
        hey_version = out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_gib, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "hey": hey_version,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def worker_addresses(frontend_url: str) -> dict[str, list[str]]:
    """Model -> the request-plane addresses of its live instances, from the embedded frontend's /health."""
    import httpx

    models = httpx.get(f"{frontend_url}/health", timeout=5).json()["models"]
    return {model: [str(i["address"]) for i in instances] for model, instances in models.items()}


def add_load_options(parser: argparse.ArgumentParser) -> None:
    """`--max-load` and `--max-foreign`: how quiet the machine must be before measuring (`wait_for_quiet`)."""
    parser.add_argument(
        "--max-load", type=float, default=1.5, help="wait for the 1-minute load average to fall below this"
    )
    parser.add_argument(
        "--max-foreign",
        type=float,
        default=0.3,
        help="wait until processes not ours use at most this many cores",
    )
