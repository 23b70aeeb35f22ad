"""Load steps against a served deployment, with the profile of each: what `gpu_serving.py` measures.

A step sends text bodies for a fixed time, from `hey` (Go: a few tens of microseconds of
CPU per request, so the client does not measure itself) where it is on the PATH, else from
`bench/loadgen.py`. Around it, the step reads:

- the CPU (utime + stime from /proc) of every process of the frontend's and each worker's
  process group, by role: the frontend's owner and its routing processes, the engine
  process and its ingest processes;
- the device's busy share (NVML's utilisation, sampled every 50 ms), where NVML is there;
- the worker's batch-size histogram, from its /health.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
from loadgen import run_load
from measure import hey_many, machine_jiffies

from embedlab import Deployment
from embedlab.cluster.process import ManagedProcess

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


def batch_sizes(system_url: str) -> dict[str, int]:
    info = httpx.get(system_url + "/health", timeout=10).json().get("engine_info") or {}
    return (info.get("batching") or {}).get("batch_sizes", {})


def load(url: str, bodies: Sequence[bytes], *, concurrency: int, seconds: float) -> dict[str, float]:
    if shutil.which("hey"):
        clients = max(1, min(len(bodies), concurrency, 8))
        result = hey_many(
            [(url, b) for b in bodies[:clients]],
            requests=0,
            concurrency=max(1, concurrency // clients),
            seconds=seconds,
        )
        return {
            "requests": result.requests,
            "failed": result.failed,
            "seconds": result.seconds,
            "rps": result.rps,
            "p50_ms": result.p50_ms,
            "p99_ms": result.p99_ms,
            "client": f"hey x{clients}",
        }
    lg = run_load(url, bodies[0], requests=10**9, seconds=seconds, concurrency=concurrency, processes=8)
    return {
        "requests": lg.requests,
        "failed": lg.failed,
        "seconds": lg.seconds,
        "rps": lg.rps,
        "p50_ms": lg.p50_ms,
        "p99_ms": lg.p99_ms,
        "client": "loadgen x8",
    }


def step(
    dep: Deployment,
    *,
    label: str,
    url: str,
    bodies: Sequence[bytes],
    tokens: int,
    concurrency: int,
    inputs: int,
    seconds: float,
    system_url: str,
    extra: dict[str, ManagedProcess] | None = None,
) -> dict[str, Any]:
    """One load step and its profile."""
    groups = roles(dep, extra)
    each0 = {p: cpu_seconds(p) or 0.0 for pids in groups.values() for p in pids}
    hist0 = batch_sizes(system_url)
    busy0, total0 = machine_jiffies()
    with GpuBusy() as gpu:
        result = load(url, bodies, concurrency=concurrency, seconds=seconds)
    busy1, total1 = machine_jiffies()
    hist1 = batch_sizes(system_url)
    wall = result["seconds"]
    requests = max(1, int(result["requests"]))
    cpu = {}
    for role, pids in groups.items():
        # a process that exited during the step (an idle compile worker) took its CPU time
        # with it: it counts as spending nothing, never as a negative figure
        now = {p: cpu_seconds(p) for p in pids}
        each = [now[p] - each0[p] for p in pids if now[p] is not None]
        spent = sum(each)
        busiest = max(each, default=0.0) / wall if wall else 0.0
        cpu[role] = {
            "processes": len(pids),
            "exited": sum(now[p] is None for p in pids),
            "ms_per_request": 1000 * spent / requests,
            "cores": spent / wall if wall else 0.0,
            "busiest_process_cores": busiest,
        }
    histogram = {int(k): v - hist0.get(k, 0) for k, v in hist1.items() if v - hist0.get(k, 0)}
    forwards = sum(histogram.values())
    row = {
        "path": label,
        "tokens": tokens,
        "concurrency": concurrency,
        "inputs_per_request": inputs,
        **result,
        "seq_per_s": result["rps"] * inputs,
        "forwards": forwards,
        "mean_batch": sum(k * v for k, v in histogram.items()) / forwards if forwards else 0.0,
        "batch_histogram": dict(sorted(histogram.items())),
        "cpu": cpu,
        # every process of the machine, the load generator's too
        "machine_busy_cores": (busy1 - busy0) / max(1, total1 - total0) * (os.cpu_count() or 1),
        "gpu_busy": gpu.share,
    }
    log(
        f"  {label:<28} {tokens:>3} tok c={concurrency:<4} x{inputs:<2} {row['seq_per_s']:>9,.0f} seq/s  "
        f"p50 {row['p50_ms']:7.2f} ms  p99 {row['p99_ms']:7.1f}  failed {row['failed']}  batch {row['mean_batch']:5.1f}  "
        f"gpu {'-' if gpu.share is None else f'{gpu.share:.0%}'}  machine {row['machine_busy_cores']:.1f} cores  "
        + "  ".join(f"{r} {c['ms_per_request']:.3f} ms ({c['cores']:.2f} cores)" for r, c in cpu.items())
    )
    return row


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
