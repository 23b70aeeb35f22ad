"""A harness process for test_orphans: starts servers, reports their PIDs, then waits to be killed.

    python orphan_harness.py MODE RUN_DIR

MODE:
    deployment  a Deployment (frontend and two hash workers) started on the main thread
    thread      the same, started from a thread that has exited before the report
    wrapped     a Deployment plus a worker launched through a wrapper shell, the way a
                launch script runs one: the shell is the direct child, and the worker and
                a process that ignores SIGTERM are its children, which no parent-death
                signal reaches
    cluster     Dynamo on etcd across 3 hosts: network namespaces, an etcd data dir and an
                address on loopback besides the processes

Prints one JSON line once every server answers, then sleeps until a signal ends it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path

import httpx

from embedlab import Deployment, DeploymentSpec
from embedlab.cluster.managed_process import ManagedProcess, _watchdog
from embedlab.cluster.ports import reserve_port


def wrapped_worker(dep: Deployment, run_dir: Path) -> ManagedProcess:
    system_port = reserve_port()
    worker = [
        sys.executable,
        "-m",
        "embedlab",
        "worker",
        "--served-model-name",
        "wrapped",
        "--endpoint",
        "test.wrapped.generate",
        "--frontend-url",
        dep.frontend_url,
        "--system-port",
        str(system_port),
    ]
    # `trap "" TERM` in a subshell: the sleep it execs inherits SIGTERM ignored, so only
    # SIGKILL stops it.
    script = '"$@" & (trap "" TERM; exec sleep 600) & wait'
    proc = ManagedProcess(
        "wrapper", ["sh", "-c", script, "wrapper", *worker], log_path=run_dir / "wrapper.log"
    ).start()
    with httpx.Client(timeout=2.0) as client:
        proc.wait_ready(
            lambda: client.get(f"http://127.0.0.1:{system_port}/health").status_code == 200,
            timeout=60,
            what="the wrapped worker's /health answered 200",
        )
    return proc


def main() -> None:
    # Ctrl-C raises KeyboardInterrupt, also where SIGINT was inherited as ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    mode, run_dir = sys.argv[1], Path(sys.argv[2])
    spec = DeploymentSpec.multi_model(["model-a", "model-b"])
    if mode == "cluster":
        spec = DeploymentSpec.multi_model(["model-a", "model-b"], stack="dynamo", discovery="etcd", hosts=3)
    if mode == "thread":
        box: dict[str, Deployment] = {}
        starter = threading.Thread(
            target=lambda: box.setdefault("dep", Deployment(spec, run_dir=run_dir).start())
        )
        starter.start()
        starter.join()
        dep = box["dep"]
    else:
        dep = Deployment(spec, run_dir=run_dir).start()
    procs = list(dep.processes)
    if mode == "wrapped":
        procs.append(wrapped_worker(dep, run_dir))
    # Serving now, not merely started: a server killed by its starting thread's exit
    # would fail here.
    with httpx.Client(timeout=5.0) as client:
        for model in ("model-a", "model-b"):
            client.post(
                f"{dep.frontend_url}/v1/embeddings", json={"model": model, "input": "x"}
            ).raise_for_status()
    assert _watchdog._proc is not None
    report = {
        "harness": os.getpid(),
        "watchdog": _watchdog._proc.pid,
        "frontend_url": dep.frontend_url,
        "servers": {p.name: {"pid": p.pid, "pgid": p.pgid} for p in procs},
        "namespaces": [h.namespace for h in dep.network.hosts if h.namespace],
        "hub": dep.network.hub,
    }
    print(json.dumps(report), flush=True)
    while True:  # until a signal ends it: the test sends SIGKILL
        signal.pause()


if __name__ == "__main__":
    main()
