"""Load steps against a served deployment, with the profile of each: what `gpu_serving.py` measures.

A step sends text bodies for a fixed time from `loadgen.run_bodies` (a bare keep-alive
HTTP client in a few processes; each request a body of its own, so no text repeats within
a step; connections opened and used once before the clock starts). Around it, the step reads:

- the client's latencies: p50, mean, p99, and where the slow ones (over 3x the mean) lie in
  time and over connections;
- the CPU (utime + stime from /proc) of every process of the frontend's and each worker's
  process group, by role: the frontend's owner and its routing processes, the engine
  process and its ingest processes, each process's share too;
- the device's busy share (NVML's utilisation, sampled every 50 ms), where NVML is there;
- the worker's /health: its batch-size histogram, the batcher's queueing (ingest process's
  send to batch start, per sequence) and forward times, each ingest process's requests and
  its channel's doorbell counts;
- the machine's TCP counters (retransmissions, timeouts, listen and backlog drops) and the
  softnet backlog's drops.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
from loadgen import run_bodies, write_bodies
from measure import machine_jiffies

from embedlab import Deployment
from embedlab.cluster.managed_process import ManagedProcess

_TICK = os.sysconf("SC_CLK_TCK")


def log(message: str) -> None:
    print(message, flush=True)


def text_bodies(model: str, texts: Sequence[str], *, inputs: int, count: int) -> list[bytes]:
    """`count` request bodies of `inputs` texts each (different texts in each), base64 answers."""
    bodies = []
    for i in range(count):
        chosen = [texts[(i * inputs + j) % len(texts)] for j in range(inputs)]
        payload: Any = chosen[0] if inputs == 1 else chosen
        bodies.append(json.dumps({"model": model, "input": payload, "encoding_format": "base64"}).encode())
    return bodies


def group_pids(pgid: int) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(f"/proc/{entry.name}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def cpu_seconds(pid: int) -> float | None:
    """User and system CPU of a live process; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK


def _module_of(pid: int) -> str:
    """The `-m` module a process runs (read for measuring only: nothing is signalled by name)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return ""
    return argv[argv.index(b"-m") + 1].decode() if b"-m" in argv[:-1] else ""


HELPERS = {
    "embedlab.serving.worker.multiprocess.ingest": "ingest",
    "embedlab.serving.frontend.multiprocess.replica": "routing",
}


def roles(dep: Deployment, extra: dict[str, ManagedProcess] | None = None) -> dict[str, list[int]]:
    """Role -> PIDs: each server's own process, the ones it started to share its port, and the
    rest of its group (torch.compile's compile workers, idle once the worker is up)."""
    out: dict[str, list[int]] = {}
    servers = {"frontend": dep.frontend, **{p.name: p for p in dep.workers}, **(extra or {})}
    for name, proc in servers.items():
        if proc is None or proc.pid is None or proc.pgid is None:
            continue
        out[name] = [proc.pid]
        for pid in group_pids(proc.pgid):
            if pid != proc.pid:
                out.setdefault(f"{name} {HELPERS.get(_module_of(pid), 'other')}", []).append(pid)
    return out


class GpuBusy:
    """NVML utilisation sampled every 50 ms while the context is open; None without NVML."""

    def __init__(self) -> None:
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._handle: Any = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            self._nvml = pynvml
        except Exception:  # no NVML (CPU runs): no figure
            self._handle = None

    def __enter__(self) -> GpuBusy:
        if self._handle is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.samples.append(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._handle is not None:
            self._thread.join()

    @property
    def share(self) -> float | None:
        return sum(self.samples) / len(self.samples) / 100 if self.samples else None


def health_info(system_url: str) -> dict[str, Any]:
    return httpx.get(system_url + "/health", timeout=10).json().get("engine_info") or {}  # type: ignore[no-any-return]


def batch_sizes(system_url: str) -> dict[str, int]:
    return (health_info(system_url).get("batching") or {}).get("batch_sizes", {})


# -- histograms and counters, as differences over a step ---------------------------------


def hist_diff(after: dict[str, Any] | None, before: dict[str, Any] | None) -> dict[str, Any] | None:
    """A `Durations` snapshot's counts over a step (after - before)."""
    if not after:
        return None
    counts = [
        a - b for a, b in zip(after["counts"], (before or {}).get("counts") or [0] * len(after["counts"]))
    ]
    return {
        "bounds_ms": after["bounds_ms"],
        "counts": counts,
        "sum_s": after["sum_s"] - (before or {}).get("sum_s", 0.0),
    }


def hist_quantile(hist: dict[str, Any] | None, q: float) -> float | None:
    """The q-quantile of a bucketed histogram in ms, linear inside its bucket (None if empty;
    the last bound if it falls in the open bucket above it)."""
    if not hist:
        return None
    total = sum(hist["counts"])
    if not total:
        return None
    bounds = [0.0, *hist["bounds_ms"]]
    want, seen = q * total, 0
    for i, n in enumerate(hist["counts"]):
        if n and seen + n >= want:
            if i >= len(hist["bounds_ms"]):
                return float(hist["bounds_ms"][-1])
            lo, hi = bounds[i], bounds[i + 1]
            return lo + (hi - lo) * (want - seen) / n
        seen += n
    return float(hist["bounds_ms"][-1])


def hist_summary(hist: dict[str, Any] | None) -> dict[str, Any] | None:
    if not hist or not sum(hist["counts"]):
        return None
    n = sum(hist["counts"])
    return {
        "count": n,
        "mean_ms": 1000 * hist["sum_s"] / n,
        "p50_ms": hist_quantile(hist, 0.5),
        "p90_ms": hist_quantile(hist, 0.9),
        "p99_ms": hist_quantile(hist, 0.99),
        "over_100ms": sum(c for b, c in zip([*hist["bounds_ms"], float("inf")], hist["counts"]) if b > 100),
    }


NET_KEYS = {
    "Tcp": ("RetransSegs", "OutSegs", "InErrs", "ActiveOpens", "PassiveOpens"),
    "TcpExt": (
        "TCPTimeouts",
        "TCPLossProbes",
        "TCPSynRetrans",
        "TCPFastRetrans",
        "TCPSlowStartRetrans",
        "ListenOverflows",
        "ListenDrops",
        "TCPBacklogDrop",
        "TCPRcvQDrop",
        "TCPOFOQueue",
        "PruneCalled",
        "TCPRcvCollapsed",
        "TCPZeroWindowDrop",
        "TCPDelivered",
    ),
}


def net_counters() -> dict[str, int]:
    """The machine's TCP counters that say whether a loopback packet was dropped and resent,
    and the softnet backlog's drops (per-CPU queues of received packets), from /proc."""
    out: dict[str, int] = {}
    for name in ("/proc/net/snmp", "/proc/net/netstat"):
        try:
            lines = Path(name).read_text().splitlines()
        except OSError:
            continue
        for head, values in zip(lines[::2], lines[1::2]):
            group, keys = head.split(":", 1)
            if group in NET_KEYS:
                for key, value in zip(keys.split(), values.split(":", 1)[1].split()):
                    if key in NET_KEYS[group]:
                        out[f"{group}.{key}"] = int(value)
    try:
        rows = [line.split() for line in Path("/proc/net/softnet_stat").read_text().splitlines()]
        out["softnet.processed"] = sum(int(r[0], 16) for r in rows)
        out["softnet.dropped"] = sum(int(r[1], 16) for r in rows)
        out["softnet.time_squeeze"] = sum(int(r[2], 16) for r in rows)
    except (OSError, IndexError, ValueError):
        pass
    return out


def sysctls() -> dict[str, str]:
    found = {}
    for key in (
        "net.core.netdev_max_backlog",
        "net.core.somaxconn",
        "net.ipv4.tcp_max_syn_backlog",
        "net.core.netdev_budget",
        "net.ipv4.tcp_rmem",
        "net.ipv4.tcp_wmem",
    ):
        try:
            found[key] = Path("/proc/sys/" + key.replace(".", "/")).read_text().strip()
        except OSError:
            pass
    return found


# -- the client's view of a step ---------------------------------------------------------


TAIL_BOUNDS_MS = (1, 2, 5, 10, 20, 50, 100, 150, 200, 250, 300, 400, 500, 1000, 2000)


def tail_profile(result: Any, window_s: float = 0.05) -> dict[str, Any]:
    """Where a step's slow requests (over 3x the mean) lie: in time (50 ms windows of their
    start), over connections, and by latency."""
    import numpy as np

    lat, starts, conns = result.latencies, result.starts, result.connections
    if not len(lat):
        return {}
    mean = float(lat.mean())
    slow = lat > 3 * mean
    windows = np.floor(starts[slow] / window_s).astype(int)
    per_window = np.bincount(windows) if len(windows) else np.zeros(0, dtype=int)
    top = np.argsort(per_window)[::-1][:5]
    edges = [0.0, *TAIL_BOUNDS_MS, float("inf")]
    slow_ms = 1000 * lat[slow]
    return {
        "threshold_ms": 3000 * mean,
        "slow": int(slow.sum()),
        "slow_share": float(slow.mean()),
        "windows_with_slow": int((per_window > 0).sum()),
        "windows": int(np.ceil(float(starts.max()) / window_s)) if len(starts) else 0,
        "top_windows": [
            {"start_ms": int(i * window_s * 1000), "slow": int(per_window[i])} for i in top if per_window[i]
        ],
        "connections_with_slow": int(len(set(conns[slow].tolist()))),
        "connections": int(len(set(conns.tolist()))),
        "slow_ms_histogram": {
            f"{edges[i]:g}-{edges[i + 1]:g}": int(n)
            for i, n in enumerate(np.histogram(slow_ms, bins=edges)[0])
            if n
        },
        "max_ms": float(1000 * lat.max()),
    }


def server_profile(after: dict[str, Any], before: dict[str, Any], requests: int) -> dict[str, Any]:
    """The worker's own figures over a step: the batcher's queueing and forwards, the trip
    from an ingest process to the engine's loop, each ingest process's share and doorbell."""
    batching_a, batching_b = after.get("batching") or {}, before.get("batching") or {}
    out: dict[str, Any] = {
        "queued": hist_summary(hist_diff(batching_a.get("queued"), batching_b.get("queued"))),
        "forward": hist_summary(hist_diff(batching_a.get("forward"), batching_b.get("forward"))),
    }
    gc_a, gc_b = after.get("gc"), before.get("gc") or {}
    if gc_a:
        # the engine process's collector over the step; longest_ms is since start
        out["gc"] = {
            "collections": [a - b for a, b in zip(gc_a["collections"], gc_b.get("collections") or [0, 0, 0])],
            "seconds": [a - b for a, b in zip(gc_a["seconds"], gc_b.get("seconds") or [0, 0, 0])],
            "longest_ms_since_start": gc_a["longest_ms"],
            "frozen_objects": gc_a["frozen_objects"],
        }
    ingest_a, ingest_b = after.get("ingest"), before.get("ingest") or {}
    if ingest_a:
        out["travelled"] = hist_summary(hist_diff(ingest_a.get("travelled"), ingest_b.get("travelled")))
        procs = []
        for i, now in enumerate(ingest_a["processes"]):
            was = (ingest_b.get("processes") or [{}] * (i + 1))[i] if ingest_b else {}
            row = {
                "requests": now["requests_sent"] - (was.get("requests_sent") or 0),
                "engine_side": {
                    k: v - (was.get("engine_side") or {}).get(k, 0) for k, v in now["engine_side"].items()
                },
                "ingest_side": {k: v - (was.get("ingest") or {}).get(k, 0) for k, v in now["ingest"].items()},
            }
            procs.append(row)
        counts = [p["requests"] for p in procs]
        total = sum(counts) or 1
        wakeups = sum(p["engine_side"]["wakeups"] for p in procs)
        received = sum(p["engine_side"]["received"] for p in procs)
        out["ingest"] = {
            "requests": counts,
            "share_max_over_mean": max(counts) / (total / len(counts)) if counts else None,
            "share_min_over_mean": min(counts) / (total / len(counts)) if counts else None,
            # answering: the ingest process's time per request, HTTP read to answer sent
            "ms_answering": [
                1000 * p["ingest_side"]["seconds_answering"] / max(1, p["ingest_side"]["requests"])
                for p in procs
            ],
            "engine_wakeups_per_request": wakeups / total,
            "engine_records_per_wakeup": received / wakeups if wakeups else None,
            "engine_polled": sum(p["engine_side"]["polled"] for p in procs),
            "engine_rung": sum(p["engine_side"]["rung"] for p in procs),
            "engine_skipped": sum(p["engine_side"]["skipped"] for p in procs),
            "ingest_wakeups_per_request": sum(p["ingest_side"]["wakeups"] for p in procs) / total,
            "ingest_polled": sum(p["ingest_side"]["polled"] for p in procs),
            "engine_unrung": sum(p["engine_side"]["unrung"] for p in procs),
            "ingest_unrung": sum(p["ingest_side"]["unrung"] for p in procs),
            "reply_travel_ms_mean": 1000
            * sum(p["ingest_side"].get("reply_travel_s", 0) for p in procs)
            / max(1, sum(p["requests"] for p in procs)),
            "replies_over_1ms": sum(p["ingest_side"].get("replies_over_1ms", 0) for p in procs),
            "replies_over_5ms": sum(p["ingest_side"].get("replies_over_5ms", 0) for p in procs),
            "backlogged": sum(p["engine_side"]["backlogged"] + p["ingest_side"]["backlogged"] for p in procs),
            "processes": procs,
        }
    return out


def step(
    dep: Deployment,
    *,
    label: str,
    url: str,
    bodies: Bodies,
    tokens: int,
    concurrency: int,
    inputs: int,
    seconds: float,
    system_url: str | None,
    frontend_processes: int,
    extra: dict[str, ManagedProcess] | None = None,
    load_processes: int = 4,
) -> dict[str, Any]:
    """One load step and its profile: the client's figures, CPU by role, the GPU's busy share,
    the worker's batching and ingest figures and the machine's TCP counters, over the step."""
    import numpy as np

    groups = roles(dep, extra)
    each0 = {p: cpu_seconds(p) or 0.0 for pids in groups.values() for p in pids}
    info0 = health_info(system_url) if system_url else {}
    net0 = net_counters()
    busy0, total0 = machine_jiffies()
    with GpuBusy() as gpu:
        result = run_bodies(
            url,
            bodies.path,
            bodies=bodies.count,
            concurrency=concurrency,
            seconds=seconds,
            processes=min(load_processes, concurrency),
            offset=bodies.take(concurrency),
        )
    busy1, total1 = machine_jiffies()
    net1 = net_counters()
    info1 = health_info(system_url) if system_url else {}
    wall = result.seconds
    requests = max(1, result.requests)
    cpu = {}
    for role, pids in groups.items():
        # a process that exited during the step (an idle compile worker) took its CPU time
        # with it: it counts as spending nothing, never as a negative figure
        now = {p: cpu_seconds(p) for p in pids}
        each = [now[p] - each0[p] for p in pids if now[p] is not None]
        spent = sum(each)
        cpu[role] = {
            "processes": len(pids),
            "exited": sum(now[p] is None for p in pids),
            "ms_per_request": 1000 * spent / requests,
            "cores": spent / wall if wall else 0.0,
            "busiest_process_cores": max(each, default=0.0) / wall if wall else 0.0,
            "each_process_cores": [round(x / wall, 3) for x in each] if wall else [],
        }
    cpu["load generator"] = {
        "processes": min(load_processes, concurrency),
        "ms_per_request": 1000 * result.cpu_s / requests,
        "cores": result.cpu_s / wall if wall else 0.0,
    }
    h0 = (info0.get("batching") or {}).get("batch_sizes", {})
    h1 = (info1.get("batching") or {}).get("batch_sizes", {})
    histogram = {int(k): v - h0.get(k, 0) for k, v in h1.items() if v - h0.get(k, 0)}
    forwards = sum(histogram.values())
    lat = result.latencies
    mean_ms = float(1000 * lat.mean()) if len(lat) else float("nan")
    p = {q: float(1000 * np.percentile(lat, q)) if len(lat) else float("nan") for q in (50, 90, 99, 99.9)}
    row = {
        "path": label,
        "frontend_processes": frontend_processes,
        "tokens": tokens,
        "concurrency": concurrency,
        "inputs_per_request": inputs,
        "requests": result.requests,
        "failed": result.failed,
        "seconds": wall,
        "rps": result.rps,
        "seq_per_s": result.rps * inputs,
        "mean_ms": mean_ms,
        "p50_ms": p[50],
        "p90_ms": p[90],
        "p99_ms": p[99],
        "p999_ms": p[99.9],
        "p99_over_mean": p[99] / mean_ms if mean_ms else None,
        "client": f"run_bodies x{min(load_processes, concurrency)}",
        "bodies_sent": result.bodies_sent,
        "bodies_repeated": result.repeated,
        "connect_ms_max": max(result.connect_ms, default=0.0),
        "first_request_ms_max": max(result.first_ms, default=0.0),
        "forwards": forwards,
        "mean_batch": sum(k * v for k, v in histogram.items()) / forwards if forwards else 0.0,
        "batch_histogram": dict(sorted(histogram.items())),
        "cpu": cpu,
        # every process of the machine, the load generator's too
        "machine_busy_cores": (busy1 - busy0) / max(1, total1 - total0) * (os.cpu_count() or 1),
        "gpu_busy": gpu.share,
        "tail": tail_profile(result),
        "server": server_profile(info1, info0, result.requests) if info1 else None,
        "net": {k: v - net0.get(k, 0) for k, v in net1.items() if v - net0.get(k, 0)},
    }
    server = row["server"] or {}
    queued = server.get("queued") or {}
    net = row["net"]
    log(
        f"  {label:<22} fe x{frontend_processes} {tokens:>3} tok c={concurrency:<4} x{inputs:<2} {row['seq_per_s']:>9,.0f} seq/s  "
        f"p50 {row['p50_ms']:7.2f} mean {mean_ms:7.2f} p99 {row['p99_ms']:7.1f} ms (p99/mean {row['p99_over_mean'] or 0:.1f}) "
        f"failed {row['failed']}  batch {row['mean_batch']:5.1f}  gpu {'-' if gpu.share is None else f'{gpu.share:.0%}'}  "
        f"machine {row['machine_busy_cores']:.1f} cores"
        + (
            f"  queued p50 {queued.get('p50_ms') or 0:.2f} p99 {queued.get('p99_ms') or 0:.1f} ms"
            if queued
            else ""
        )
        + f"  retrans {net.get('Tcp.RetransSegs', 0)} rto {net.get('TcpExt.TCPTimeouts', 0)} softdrop {net.get('softnet.dropped', 0)}"
        + (
            f"  gc2 {server['gc']['collections'][2]} ({1000 * server['gc']['seconds'][2]:.0f} ms)"
            if server.get("gc")
            else ""
        )
        + (
            f"  unrung {server['ingest']['engine_unrung'] + server['ingest']['ingest_unrung']:.0f}"
            if server.get("ingest")
            else ""
        )
        + f"  slow {row['tail'].get('slow', 0)} in {row['tail'].get('windows_with_slow', 0)} windows"
    )
    return row


class Bodies:
    """A file of distinct request bodies (`loadgen.write_bodies`) and where the next step starts in it."""

    def __init__(self, path: Path, bodies: Sequence[bytes]) -> None:
        write_bodies(str(path), list(bodies))
        self.path = str(path)
        self.count = len(bodies)
        self._next = 0

    def take(self, concurrency: int) -> int:
        """The offset of the next step's run: steps go round the file, so neighbours differ."""
        offset = self._next
        self._next = (self._next + self.count // 3) % self.count
        return offset


class ExtraFrontend:
    """An `embedlab frontend --processes N` beside the deployment's, routing to one of its workers.

    Registered by hand through the registry API, with a lease long enough for the run: the
    same frontend code and the same worker, so a row differs from its neighbour only in N.
    """

    def __init__(self, dep: Deployment, *, processes: int, worker_url: str, model: str, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.proc = ManagedProcess(
            f"frontend-p{processes}",
            [
                sys.executable,
                "-m",
                "embedlab",
                "frontend",
                "--port",
                str(port),
                "--processes",
                str(processes),
                "--lease-ttl",
                "3600",
            ],
            log_path=dep.run_dir / f"frontend-p{processes}.log",
        )
        self.worker_url = worker_url
        self.model = model

    def __enter__(self) -> ExtraFrontend:
        self.proc.start()
        try:
            self.proc.wait_ready(
                lambda: httpx.get(self.url + "/health", timeout=1).status_code == 200, timeout=60
            )
            registered = httpx.post(
                self.url + "/registry/instances",
                json={
                    "instance_id": f"bench-{self.proc.name}",
                    "endpoint": f"bench.{self.proc.name}.generate",
                    "model": self.model,
                    "url": self.worker_url,
                },
                timeout=10,
            )
            registered.raise_for_status()
        except BaseException:
            self.proc.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.stop()


def wait_listed(url: str, model: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if model in {m["id"] for m in httpx.get(url + "/v1/models", timeout=5).json()["data"]}:
            return
        time.sleep(0.05)
    raise RuntimeError(f"{url} never listed {model}")
