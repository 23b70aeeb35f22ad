"""Workers with ingest processes (`--api-processes 2`) and frontends with routing processes
(`--processes 2`, `4`) behave as the single-process ones do: the same vectors and errors, one
counter increment per request, drains, faults and exact splits, and nothing left running.

Real processes on loopback; counters parsed by prometheus_client; processes found by PID
and process group from /proc.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from embedlab import (
    Deployment,
    DeploymentSpec,
    WorkerSpec,
    drain,
    multi_model_dispatch,
    same_model_load_balance,
)
from embedlab.cluster.ports import reserve_port
from embedlab.serving.frontend.shared_routing import SharedRouting
from embedlab.serving.openai import decode_embedding

from ..proctools import alive, assert_all_gone, descendants_of, group_members

API2 = ("--api-processes", "2")


def counter_samples(system_url: str) -> list[float]:
    text = httpx.get(f"{system_url}/metrics", timeout=5).text
    return [
        s.value
        for family in text_string_to_metric_families(text)
        if family.type == "counter"
        for s in family.samples
        if s.name == "dynamo_component_requests_total"
    ]


def vectors(response: httpx.Response) -> list[np.ndarray]:
    assert response.status_code == 200, response.text
    return [decode_embedding(d["embedding"]) for d in response.json()["data"]]


# -- the worker: ingest processes -----------------------------------------------------------


def test_ingest_processes_give_the_single_process_vectors_and_errors(
    tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    spec = DeploymentSpec(
        workers=tuple(
            WorkerSpec(
                model=name,
                engine="transformers",
                model_path=tiny_models["qwen3"],
                device="cpu",
                extra_args=args,
            )
            for name, args in (("one", ("--api-processes", "1")), ("two", API2))
        ),
        frontend_args=("--processes", "2"),
    )
    requests = [
        {"input": "hello world"},
        {"input": ["the quick brown fox", "jumps over", "the lazy dog"], "encoding_format": "base64"},
        {"input": [[5, 6, 7, 8, 9], [10, 11]]},
        {"input": "naïve café 嵌入 😀", "encoding_format": "base64"},
    ]
    bad = [
        {"input": [[5, 6, 10**6]]},  # outside the vocabulary
        {"input": "word " * 600},  # past max_model_len
        {"input": "x", "dimensions": 8},  # unsupported by the engine
        {"input": ""},
        {"input": "x", "model": "nope"},
    ]
    with Deployment(spec, run_dir=tmp_path) as dep, httpx.Client(timeout=60) as client:
        planes = {name: dep.direct_url(i) for i, name in enumerate(("one", "two"))}
        for body in requests:
            # One at a time: each request is its own forward in both workers, so any difference is real.
            one = client.post(f"{planes['one']}/v1/embeddings", json={"model": "one", **body})
            two = client.post(f"{planes['two']}/v1/embeddings", json={"model": "two", **body})
            for a, b in zip(vectors(one), vectors(two), strict=True):
                assert np.array_equal(a, b)
            assert one.json()["usage"] == two.json()["usage"]
            through = client.post(f"{dep.frontend_url}/v1/embeddings", json={"model": "two", **body})
            for a, b in zip(vectors(one), vectors(through), strict=True):
                assert np.array_equal(a, b)
        for body in bad:
            one = client.post(f"{planes['one']}/v1/embeddings", json={"model": "one", **body})
            two = client.post(f"{planes['two']}/v1/embeddings", json={"model": "two", **body})
            assert one.status_code == two.status_code and one.status_code in (400, 404), one.text
            assert one.json() == two.json() or body.get("model") == "nope"
            assert one.json()["error"]["code"] == two.json()["error"]["code"]
        broken = client.post(
            f"{planes['two']}/v1/embeddings",
            content=b"{not json",
            headers={"Content-Type": "application/json"},
        )
        assert broken.status_code == 400 and broken.json()["error"]["type"] == "invalid_request_error"
        health = client.get(f"{planes['two']}/health").json()
        assert health["status"] == "ready" and health["engine_info"]["device"] == "cpu"
        assert [len(counter_samples(u)) for u in dep.system_urls] == [1, 1]
        # Where the time goes (the system port): the engine process's start-up heap is out of
        # the collector's walks, and every request that reached the engine (each good one,
        # direct and through the frontend) is counted against an ingest process and queued.
        info = client.get(f"{dep.system_urls[1]}/health").json()["engine_info"]
        assert info["gc"]["frozen_objects"] > 0
        assert sum(p["requests_sent"] for p in info["ingest"]["processes"]) == 2 * len(requests)
        sequences = sum(len(b["input"]) if isinstance(b["input"], list) else 1 for b in requests)
        assert sum(info["batching"]["queued"]["counts"]) == 2 * sequences


def _sockets_of(pid: int) -> set[str]:
    found = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            found.add(target[8:-1])
    return found


def _established_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            if int(cols[1].rsplit(":", 1)[1], 16) == port and cols[3] == "01":  # 01: ESTABLISHED
                inodes.add(cols[9])
    return inodes


def test_one_increment_per_request_whichever_ingest_process_took_it(tmp_path: Path) -> None:
    spec = DeploymentSpec(workers=(WorkerSpec(model="m", extra_args=API2),))
    with Deployment(spec, run_dir=tmp_path) as dep:
        worker = dep.workers[0]
        assert worker.pid is not None
        ingest = [p for p in group_members(worker.pgid or 0) if p != worker.pid]
        assert len(ingest) == 2, f"two ingest processes in the worker's group, got {ingest}"
        plane = dep.direct_url(0)
        assert plane is not None
        port = int(plane.rsplit(":", 1)[1])
        before = counter_samples(dep.system_urls[0])
        # Fresh connections until both ingest processes hold some: the kernel spreads them by hash.
        clients = []
        try:
            served = {p: 0 for p in ingest}
            while min(served.values()) == 0 and len(clients) < 64:
                client = httpx.Client(timeout=10)
                clients.append(client)
                assert (
                    client.post(f"{plane}/v1/embeddings", json={"model": "m", "input": "x"}).status_code
                    == 200
                )
                established = _established_inodes(port)
                served = {p: len(_sockets_of(p) & established) for p in ingest}
            assert min(served.values()) > 0, f"connections per ingest process: {served}"
            sent = len(clients)
            for client in clients:
                for text in ("a", "b", "c"):
                    assert client.post(
                        f"{plane}/v1/embeddings", json={"model": "m", "input": text}
                    ).is_success
                assert (
                    client.post(f"{plane}/v1/embeddings", json={"model": "zzz", "input": "x"}).status_code
                    == 404
                )
                sent += 4
        finally:
            for client in clients:
                client.close()
        after = counter_samples(dep.system_urls[0])
        assert len(before) == len(after) == 1, "one series for the whole worker"
        assert after[0] - before[0] == sent
        load = httpx.get(f"{plane}/get_load", timeout=5).json()
        assert load == {"load": 0}


# -- the frontend: routing processes ----------------------------------------------------------


@pytest.mark.parametrize("router_mode", ["weighted-random", "round-robin"])
def test_same_model_and_multi_model_pass_with_four_routing_processes(
    router_mode: str, tmp_path: Path
) -> None:
    four = ("--processes", "4")
    same = DeploymentSpec.same_model("m", workers=2, router_mode=router_mode, frontend_args=four)
    with Deployment(same, run_dir=tmp_path / "same") as dep:
        # round-robin's split is judged exact: within one request, over all four processes' picks.
        split = "exact" if router_mode == "round-robin" else "weights"
        result = same_model_load_balance(dep, requests=40, split=split)
        assert result.passed, result.summary()
        assert len(group_members(dep.frontend.pgid or 0)) == 4  # type: ignore[union-attr]
    multi = DeploymentSpec.multi_model(["a", "b"], router_mode=router_mode, frontend_args=four)
    with Deployment(multi, run_dir=tmp_path / "multi") as dep:
        result = multi_model_dispatch(dep, requests=10)
        assert result.passed, result.summary()


def test_faults_and_drain_behave_as_with_one_process(tmp_path: Path) -> None:
    two = ("--processes", "2")
    leaky = DeploymentSpec.multi_model(["a", "b"], frontend_args=(*two, "--fault", "leak:0.1"))
    with Deployment(leaky, run_dir=tmp_path / "leak") as dep:
        for _ in range(3):  # exactly one leak per 10 of a model, however the processes shared them
            result = multi_model_dispatch(dep, requests=10)
            assert not result.passed and any("leaked" in r for r in result.reasons), result.summary()
    spec = DeploymentSpec.same_model("m", workers=2, frontend_args=two)
    with Deployment(spec, run_dir=tmp_path / "drain") as dep, httpx.Client(timeout=10) as client:
        result = drain(dep, victim=1, requests=40)
        assert result.passed, result.summary()
        # The attribution header names the instance whose counter moved, through either process.
        labels = {
            client.post(f"{dep.frontend_url}/v1/embeddings", json={"model": "m", "input": str(i)}).headers[
                "x-embedlab-worker"
            ]
            for i in range(20)
        }
        assert {label.split("/")[0] for label in labels} == {dep.endpoint(0), dep.endpoint(1)}
        dep.steering.set_weights([1.0, 1e-6])  # live weights reach every process before the call returns
        picked = [
            client.post(f"{dep.frontend_url}/v1/embeddings", json={"model": "m", "input": str(i)}).headers[
                "x-embedlab-worker"
            ]
            for i in range(30)
        ]
        assert all(p.startswith(dep.endpoint(0) + "/") for p in picked), picked
        errors = [
            client.post(f"{dep.frontend_url}/v1/embeddings", json=body)
            for body in ({"model": "nope", "input": "x"}, {"input": "x"}, {"model": "m", "input": []})
        ]
        assert [e.status_code for e in errors] == [404, 400, 400]
        assert errors[0].json()["error"]["message"] == "The model 'nope' does not exist. Served models: m"
        registry = client.post(f"{dep.frontend_url}/registry/instances", json={"instance_id": "x"})
        assert registry.status_code == 400 and registry.json()["error"]["param"] == "endpoint"


# -- teardown: by PID and process group -------------------------------------------------------


@contextmanager
def started(
    argv: list[str], ready_url: str, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[bytes], list[int]]]:
    """A server in a session of its own, ready; yields it and the PIDs of its children."""
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "embedlab", *argv],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    children: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "server.log").read_text()[-2000:]
            try:
                if httpx.get(ready_url, timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "not ready in time"
            time.sleep(0.05)
        children += descendants_of(proc.pid)
        yield proc, children
    finally:
        for pid in [proc.pid, *children]:  # whatever a failed test left, by the PIDs it recorded
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=10)
        log.close()


def _server(kind: str) -> tuple[list[str], str]:
    port = reserve_port("127.0.0.1")
    if kind == "worker":
        system = reserve_port("127.0.0.1")
        argv = ["worker", "--served-model-name", "m", "--endpoint", "t.w.g", "--frontend-url", ""]
        return [
            *argv,
            "--port",
            str(port),
            "--system-port",
            str(system),
            *API2,
        ], f"http://127.0.0.1:{system}/health"
    return ["frontend", "--port", str(port), "--processes", "3"], f"http://127.0.0.1:{port}/health"


@pytest.mark.parametrize("kind", ["worker", "frontend"])
@pytest.mark.parametrize("how", ["sigterm", "sigkill-parent", "ctrl-c"])
def test_no_process_is_left_behind(kind: str, how: str, tmp_path: Path) -> None:
    argv, ready = _server(kind)
    with started(argv, ready, tmp_path) as (proc, children):
        assert len(children) == 2, f"{kind}: its own process and 2 more, got {children}"
        everything = [proc.pid, *children]
        if how == "sigterm":
            proc.send_signal(signal.SIGTERM)  # the parent alone: it stops its children
            assert proc.wait(timeout=20) == 0
        elif how == "sigkill-parent":
            proc.kill()  # nothing of the parent runs: the children must notice by themselves
            proc.wait(timeout=10)
        else:
            os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the whole group
            assert proc.wait(timeout=20) == 0
        assert_all_gone(everything, [proc.pid], f"after {how}", timeout=15)


# The frontend's routing processes share one round-robin position per model (forked, as they are).
def _take_positions(fd: int, model: str, count: int, out: mp.Queue) -> None:  # type: ignore[type-arg]
    shared = SharedRouting(fd)
    out.put([shared.next_position(model) for _ in range(count)])


def test_shared_round_robin_positions_are_exact_across_processes() -> None:
    shared = SharedRouting()
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_take_positions, args=(shared.fd, "m", 500, out)) for _ in range(4)]
    for p in procs:
        p.start()
    positions = sorted(p for _ in procs for p in out.get(timeout=30))
    for p in procs:
        p.join(timeout=30)
    assert positions == list(range(2000))  # every position once: no two processes took the same
    assert shared.next_position("other") == 0  # models count apart
