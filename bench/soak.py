"""Soak: 20,000 mixed valid and invalid requests at concurrency 64 against a live frontend.

A real `embedlab frontend` and two hash workers on 127.0.0.1. Half the requests are
valid; the other half are hostile (malformed JSON, wrong types, invalid UTF-8, deep
nesting, too many inputs, unknown models, wrong methods, content encodings, registry
garbage, a few bodies over the size limit). It passes when

- every valid request gets a 200 with an embedding,
- no request at all gets a 5xx, and every invalid one a 4xx with OpenAI error JSON,
- the frontend's resident memory grows by under 10% from after a 2,000-request warm-up
  to after the soak (VmRSS from /proc/<pid>/status).

The load comes from several processes (one Python process tops out near 1,000 req/s
and would measure itself), each an asyncio loop with aiohttp, all lanes closed-loop.
Bounded in time: lanes stop at --max-seconds, and the run then fails as incomplete.

    .venv/bin/python bench/soak.py [--requests 20000] [--concurrency 64] [--warmup 2000]
        [--processes 2] [--max-seconds 600] [--json bench/results/soak.json]

Exit status 0 when it passes, 1 when it fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import platform
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loadgen import run_fast  # noqa: E402

from embedlab import Deployment, DeploymentSpec  # noqa: E402

# The frontend's body limit, read where it is defined once (not part of the public API).
from embedlab.defaults import MAX_BODY_BYTES as DEFAULT_MAX_BODY  # noqa: E402
from embedlab.jsonio import write_text_atomic  # noqa: E402

MODEL = "soak-model"
RSS_LIMIT = 0.10
MAX_BODY = DEFAULT_MAX_BODY  # the frontend's default --max-body-bytes

# A request: (class, method, path, body, headers). Class "valid" must get 200.
Request = tuple[str, str, str, bytes, dict[str, str]]
J = {"Content-Type": "application/json"}
UNKNOWN_MODEL = b"<a fresh unknown model per request>"


def _valid(rng: random.Random) -> Request:
    choice = rng.randrange(5)
    if choice == 0:
        payload: Any = {"model": MODEL, "input": f"soak {rng.random()}"}
    elif choice == 1:
        payload = {"model": MODEL, "input": [f"a {rng.random()}", "b c d"], "encoding_format": "base64"}
    elif choice == 2:
        payload = {"model": MODEL, "input": [rng.randrange(50_000) for _ in range(rng.randint(1, 64))]}
    elif choice == 3:
        payload = {"model": MODEL, "input": "word " * rng.randint(1, 200), "dimensions": rng.randint(1, 384)}
    else:
        payload = {"model": MODEL, "input": [[1, 2, 3], [rng.randrange(1000)]], "user": "soak"}
    return ("valid", "POST", "/v1/embeddings", json.dumps(payload).encode(), J)


def _invalid_catalogue() -> list[tuple[float, Request]]:
    """(weight, request): what a hostile or broken client sends, all answered 4xx."""
    emb = "/v1/embeddings"
    cases: list[tuple[float, Request]] = [
        (1, ("invalid", "POST", emb, b'{"model": "soak-model", "input": ', J)),
        (1, ("invalid", "POST", emb, b"hello", J)),
        (1, ("invalid", "POST", emb, b"", J)),
        (1, ("invalid", "POST", emb, b'["soak-model"]', J)),
        (1, ("invalid", "POST", emb, b'{"input": "x"}', J)),
        (1, ("invalid", "POST", emb, b'{"model": 3, "input": "x"}', J)),
        (1, ("invalid", "POST", emb, b'{"model": "soak-model"}', J)),
        (1, ("invalid", "POST", emb, b'{"model": "soak-model", "input": {"a": 1}}', J)),
        (1, ("invalid", "POST", emb, b'{"model": "soak-model", "input": []}', J)),
        (1, ("invalid", "POST", emb, b'{"model": "soak-model", "input": ["a", 1]}', J)),
        (1, ("invalid", "POST", emb, b'{"model": "soak-model", "input": [true, false]}', J)),
        (1, ("invalid", "POST", emb, b'{"model": "soak-model", "input": [9223372036854775808]}', J)),
        (
            1,
            (
                "invalid",
                "POST",
                emb,
                b'{"model": "soak-model", "input": "x", "dimensions": 4611686018427387904}',
                J,
            ),
        ),
        (1, ("invalid", "POST", emb, b'{"model": "soak-model", "input": "x", "encoding_format": "int8"}', J)),
        (1, ("invalid", "POST", emb, b'{"model": "soak-model", "input": "\xff\xfe"}', J)),
        (1, ("invalid", "POST", emb, b'{"model": "soak-model", "input": "\\ud800"}', J)),
        (
            1,
            (
                "invalid",
                "POST",
                emb,
                b'{"model": "soak-model", "input": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
                J,
            ),
        ),
        (1, ("invalid", "POST", emb, b'{"model": "soak-model", "input": [' + b"9" * 5000 + b"]}", J)),
        (1, ("invalid", "POST", emb, json.dumps({"model": MODEL, "input": ["x"] * 2049}).encode(), J)),
        (1, ("invalid", "POST", emb, json.dumps({"model": MODEL, "input": "w " * 9000}).encode(), J)),
        (
            1,
            (
                "invalid",
                "POST",
                emb,
                b"model=soak-model&input=x",
                {"Content-Type": "application/x-www-form-urlencoded"},
            ),
        ),
        (
            1,
            (
                "invalid",
                "POST",
                emb,
                b'{"model": "soak-model", "input": "x"}',
                {**J, "Content-Encoding": "gzip"},
            ),
        ),
        (1, ("invalid", "GET", emb, b"", {})),
        (1, ("invalid", "POST", "/v1/nothing", b"{}", J)),
        (1, ("invalid", "POST", "/registry/instances", b'{"instance_id": 1}', J)),
        (1, ("invalid", "PUT", "/registry/instances/nope/heartbeat", b"", {})),
        (1, ("invalid", "PUT", "/registry/instances/nope/weight", b'{"weight": -1}', J)),
        # Every request names a different unknown model: a label per model name in the
        # frontend's metrics, say, would grow without bound here.
        (3, ("invalid", "POST", emb, UNKNOWN_MODEL, J)),  # filled in per request, below
        # Over the body limit: rare, as each one is 8 MiB on the wire.
        (
            0.02,
            (
                "invalid",
                "POST",
                emb,
                b'{"model": "soak-model", "input": "' + b"x" * (MAX_BODY + 1) + b'"}',
                J,
            ),
        ),
    ]
    return cases


def build_requests(count: int, *, seed: int, invalid_fraction: float) -> list[Request]:
    rng = random.Random(seed)
    catalogue = _invalid_catalogue()
    weights = [w for w, _ in catalogue]
    out: list[Request] = []
    for i in range(count):
        if rng.random() >= invalid_fraction:
            out.append(_valid(rng))
            continue
        request = rng.choices(catalogue, weights)[0][1]
        if request[3] == UNKNOWN_MODEL:
            request = (
                request[:3]
                + (json.dumps({"model": f"unknown-{seed}-{i}", "input": "x"}).encode(),)
                + request[4:]
            )
        out.append(request)
    return out


@dataclass
class Tally:
    sent: dict[str, int] = field(default_factory=lambda: {"valid": 0, "invalid": 0})
    status: dict[str, dict[int, int]] = field(default_factory=lambda: {"valid": {}, "invalid": {}})
    errors: list[str] = field(default_factory=list)  # transport errors and wrong answers, first few
    error_count: int = 0
    valid_latency: list[float] = field(default_factory=list)
    finished: int = 0

    def merge(self, other: Tally) -> None:
        for cls in ("valid", "invalid"):
            self.sent[cls] += other.sent[cls]
            for code, n in other.status[cls].items():
                self.status[cls][code] = self.status[cls].get(code, 0) + n
        self.errors += other.errors[: max(0, 20 - len(self.errors))]
        self.error_count += other.error_count
        self.valid_latency += other.valid_latency
        self.finished += other.finished

    def failed(self, message: str) -> None:
        self.error_count += 1
        if len(self.errors) < 20:
            self.errors.append(message)


async def _drive(base: str, requests: list[Request], lanes: int, start_at: float, deadline: float) -> Tally:
    import aiohttp

    tally = Tally()
    queue = iter(requests)
    connector = aiohttp.TCPConnector(limit=lanes)
    timeout = aiohttp.ClientTimeout(total=60)
    # auto_decompress off and skip_auto_headers: send and read bytes exactly as given.
    async with aiohttp.ClientSession(
        base, connector=connector, timeout=timeout, auto_decompress=False
    ) as session:
        await asyncio.sleep(max(0.0, start_at - time.time()))

        async def lane() -> None:
            for cls, method, path, body, headers in queue:
                if time.time() > deadline:
                    return
                tally.sent[cls] += 1
                started = time.perf_counter()
                try:
                    async with session.request(method, path, data=body, headers=headers) as resp:
                        payload = await resp.read()
                        status = resp.status
                        content_type = resp.headers.get("Content-Type", "")
                except (TimeoutError, aiohttp.ClientError) as exc:
                    tally.failed(f"{cls} {method} {path} {body[:80]!r}: {exc!r}")
                    continue
                tally.status[cls][status] = tally.status[cls].get(status, 0) + 1
                tally.finished += 1
                if cls == "valid":
                    tally.valid_latency.append(time.perf_counter() - started)
                    if status != 200 or not payload.startswith(b'{"object":"list"'):
                        tally.failed(f"valid {body[:80]!r}: {status} {payload[:200]!r}")
                elif not 400 <= status < 500:
                    tally.failed(f"invalid {method} {path} {body[:80]!r}: {status} {payload[:200]!r}")
                elif method != "HEAD" and not (
                    content_type.startswith("application/json") and b'"error"' in payload
                ):
                    tally.failed(
                        f"invalid {method} {path} {body[:80]!r}: {status} not error JSON: {payload[:200]!r}"
                    )

        await asyncio.gather(*(lane() for _ in range(lanes)))
    return tally


def _process(args: tuple[str, list[Request], int, float, float, Any]) -> None:
    base, requests, lanes, start_at, deadline, queue = args
    queue.put(run_fast(_drive(base, requests, lanes, start_at, deadline)))


def run_load(
    base: str, requests: list[Request], *, concurrency: int, processes: int, max_seconds: float
) -> tuple[Tally, float]:
    """Spread `requests` and `concurrency` lanes over `processes`; returns the tally and the wall time."""
    processes = max(1, min(processes, concurrency))
    lanes = [concurrency // processes + (1 if i < concurrency % processes else 0) for i in range(processes)]
    shares = [requests[i::processes] for i in range(processes)]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    start_at = time.time() + 1.5 + 0.3 * processes  # every process starts together, after its imports
    deadline = start_at + max_seconds
    procs = [
        ctx.Process(target=_process, args=((base, s, n, start_at, deadline, queue),))
        for s, n in zip(shares, lanes)
    ]
    for p in procs:
        p.start()
    try:
        tally = Tally()
        for _ in procs:
            tally.merge(queue.get(timeout=max_seconds + 120))
        wall = time.time() - start_at
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    return tally, wall


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def cpu_seconds(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=2_000)
    parser.add_argument("--invalid-fraction", type=float, default=0.5)
    parser.add_argument("--processes", type=int, default=2, help="load-generator processes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--max-seconds", type=float, default=600.0, help="stop the soak after this long (then it fails)"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()

    warmup = build_requests(args.warmup, seed=args.seed + 1, invalid_fraction=args.invalid_fraction)
    soak = build_requests(args.requests, seed=args.seed, invalid_fraction=args.invalid_fraction)
    spec = DeploymentSpec.same_model(MODEL, workers=2, seed=args.seed)
    with Deployment(spec) as dep:
        assert dep.frontend is not None and dep.frontend.pid is not None
        pid = dep.frontend.pid
        print(
            f"soak: frontend pid {pid} at {dep.frontend_url}, 2 hash workers; logs in {dep.run_dir}",
            flush=True,
        )
        rss_start = rss_kib(pid)
        warm, warm_wall = run_load(
            dep.frontend_url,
            warmup,
            concurrency=args.concurrency,
            processes=args.processes,
            max_seconds=args.max_seconds,
        )
        rss_before, cpu_before = rss_kib(pid), cpu_seconds(pid)
        print(
            f"warm-up: {warm.finished} requests in {warm_wall:.1f} s; frontend RSS {rss_before / 1024:.1f} MiB",
            flush=True,
        )
        tally, wall = run_load(
            dep.frontend_url,
            soak,
            concurrency=args.concurrency,
            processes=args.processes,
            max_seconds=args.max_seconds,
        )
        rss_after, cpu_after = rss_kib(pid), cpu_seconds(pid)
        workers_rss = [rss_kib(w.pid) for w in dep.workers if w.pid]
        alive = all(p.alive() for p in dep.processes)
        log_text = dep.frontend.log_path.read_text(errors="replace")
    unhandled = log_text.count("unhandled error")

    growth = (rss_after - rss_before) / rss_before
    lat = np.array(tally.valid_latency) * 1000 if tally.valid_latency else np.array([float("nan")])
    valid_ok = tally.status["valid"].get(200, 0)
    five = sum(n for cls in ("valid", "invalid") for code, n in tally.status[cls].items() if code >= 500)
    complete = tally.finished + tally.error_count == args.requests
    checks = {
        "all requests answered within the time bound": complete,
        "zero failures among valid requests": valid_ok == tally.sent["valid"] and tally.sent["valid"] > 0,
        "no 5xx at all": five == 0,
        "every invalid request a 4xx with error JSON": tally.error_count == 0,
        f"frontend RSS growth under {RSS_LIMIT:.0%}": growth < RSS_LIMIT,
        "servers alive, no unhandled error logged": alive and unhandled == 0,
    }
    passed = all(checks.values())

    def codes(cls: str) -> str:
        return ", ".join(f"{code}: {n}" for code, n in sorted(tally.status[cls].items())) or "-"

    print()
    print(
        f"Soak of {args.requests} requests ({args.invalid_fraction:.0%} invalid) at concurrency {args.concurrency}, "
        f"{args.processes} load processes, after a {args.warmup}-request warm-up"
    )
    print(f"{'':22}{'sent':>8}{'answered 200':>14}{'5xx':>6}   statuses")
    for cls in ("valid", "invalid"):
        fives = sum(n for code, n in tally.status[cls].items() if code >= 500)
        print(
            f"{cls + ' requests':22}{tally.sent[cls]:>8}{tally.status[cls].get(200, 0):>14}{fives:>6}   {codes(cls)}"
        )
    print(f"{'transport errors / wrong answers':34} {tally.error_count}")
    print(f"{'throughput':34} {tally.finished / wall:,.0f} req/s over {wall:.1f} s")
    print(f"{'valid latency':34} p50 {np.percentile(lat, 50):.2f} ms, p99 {np.percentile(lat, 99):.2f} ms")
    print(f"{'frontend CPU':34} {(cpu_after - cpu_before) / max(1, tally.finished) * 1e3:.3f} ms per request")
    print(f"{'frontend RSS at start':34} {rss_start / 1024:.1f} MiB")
    print(f"{'frontend RSS after warm-up':34} {rss_before / 1024:.1f} MiB")
    print(
        f"{'frontend RSS after soak':34} {rss_after / 1024:.1f} MiB  ({growth:+.2%}, limit {RSS_LIMIT:.0%})"
    )
    print(f"{'worker RSS after soak':34} " + ", ".join(f"{r / 1024:.1f} MiB" for r in workers_rss))
    for name, ok in checks.items():
        print(f"  [{'ok' if ok else 'FAIL'}] {name}")
    for line in tally.errors[:10]:
        print(f"  error: {line}")
    print(f"soak: {'PASSED' if passed else 'FAILED'}")

    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        result = {
            "passed": passed,
            "checks": checks,
            "requests": args.requests,
            "concurrency": args.concurrency,
            "warmup": args.warmup,
            "processes": args.processes,
            "sent": tally.sent,
            "status": {cls: {str(k): v for k, v in d.items()} for cls, d in tally.status.items()},
            "errors": tally.error_count,
            "error_examples": tally.errors,
            "wall_seconds": wall,
            "requests_per_second": tally.finished / wall,
            "valid_p50_ms": float(np.percentile(lat, 50)),
            "valid_p99_ms": float(np.percentile(lat, 99)),
            "rss_kib": {"start": rss_start, "after_warmup": rss_before, "after_soak": rss_after},
            "rss_growth": growth,
            "workers_rss_kib": workers_rss,
            "frontend_cpu_ms_per_request": (cpu_after - cpu_before) / max(1, tally.finished) * 1e3,
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "platform": platform.platform(),
            },
        }
        write_text_atomic(args.json, json.dumps(result, indent=2))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
