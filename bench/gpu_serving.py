"""GPU serving on short inputs against the GPU's own limit, the fair baselines, and the tail.

Measured in one call, on one machine, with a random-weight Qwen3-Embedding-0.6B-shaped model:

- references before the deployment: the plain batched transformers forward (bf16, eager,
  then compiled with the worker's own settings) at 13 and 128 tokens, batch 64/256/1024;
  sentence-transformers `encode` (LAST pooling, normalize) at batches up to 4096 on the same
  texts; the served forward itself (the transformers engine, compiled, its CUDA graphs) in
  this process, replayed back to back at every row bucket (the GPU's limit for the path),
  and one forward alone (batch 1's latency);
- one transformers worker (`--api-processes 6`, compiled, CUDA graphs, `pipeline_min=64`)
  and a hash worker behind one embedded frontend of 4 routing processes (`--processes 4`);
  `--api-also N` adds a worker with N ingest processes, measured at saturation each round;
- alternating rounds (3 by default), each with its own references: sentence-transformers'
  best batch of 1024/2048/4096, the replayed forward at every bucket and batch 1, the compiled
  plain forward at 128 tokens, then the served steps: the hash worker at c=1 (the loopback
  round trip through the frontend), 13 tokens x1 at c=1, 64, 256, 512 and 768, 128 tokens
  x16 at c=64 and x1 at c=256;
- every request of a step a different text of exactly the stated length
  (`loadgen.run_bodies`); per step the client's p50/mean/p99 and where the slow requests
  lie, CPU by role and per process, the GPU's busy share, the batcher's queueing (ingest
  process's send to batch start, per sequence), each ingest process's share and doorbell,
  and the machine's TCP counters;
- the targets of issue 33, each marked met or missed here (`targets`).

`--profile` adds the in-process engine profile: back-to-back forwards of each path
(transformers' own masks, ours eager, CUDA graphs, graphs + compile) timed on the host and
on the device, a torch-profiler summary of the device's idle gaps, and a check with
`torch.cuda.set_sync_debug_mode("error")` that no forward synchronises.

    python bench/gpu_serving.py --api-also 8 --out bench/results/gpu_short_inputs.json   # on the GPU machine
    python bench/gpu_serving.py --shape tiny --device cpu --quick --api 2        # a CPU dry run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import httpx  # noqa: E402
import numpy as np  # noqa: E402
from gpu_served import Bodies, log, step, sysctls, text_bodies  # noqa: E402

from embedlab import Deployment, DeploymentSpec, WorkerSpec  # noqa: E402
from embedlab.engines.tiny import build_tiny_model  # noqa: E402
from embedlab.jsonio import write_text_atomic  # noqa: E402

LENGTHS = (13, 128)
BATCHES = (64, 256, 1024)
QUICK_BATCHES = (8, 32)
ST_BATCHES_13 = (64, 256, 1024, 2048, 4096)
ST_BATCHES_128 = (64, 256, 1024, 4096)
ST_ROUND = (1024, 2048, 4096)  # sentence-transformers' batches in each round (its best is among them)
ST_ROUND_QUICK = (64, 256)
SWEEP = (1, 64, 256, 512, 768)  # 13 tokens x1 through the frontend, each round; the last is saturation
QUICK_SWEEP = (1, 8, 32)
MODEL, HASH_MODEL = "qwen3", "hash"
API_PROCESSES = 6  # the worker's ingest processes
FRONTEND_PROCESSES = 4  # the frontend's routing processes (issue 33's setting)
# 512 rows at 128 tokens: the plain forward's best batch is 1024, and at 256 rows (the
# previous 32,768) the served batches gave 0.991x of it; 512 rows is within 0.5% of 1024.
MAX_BATCH_TOKENS = 512 * 128
PROFILE_BATCH = 256  # the in-process engine profile's largest batch
# A partial batch of this many goes behind the forward in flight (the engine's pipeline_min):
# graph replays cost little to launch, and the device need not idle between forwards.
PIPELINE_MIN = 64
TARGETS = {
    "vs_replay_limit": 0.9,
    "p99_over_mean": 3.0,
    "c1_over_floor_ms": 1.0,
    "p50_ms_c1_13_tokens": 4.0,
    "short_vs_sentence_transformers": 2.0,
    "served_vs_plain_128_tokens": 1.0,
}


def gpu_names() -> list[str]:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        return [line.strip() for line in out.stdout.splitlines() if line.strip()]
    except (OSError, subprocess.SubprocessError):
        return []


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


# -- references: the plain forward and sentence-transformers -------------------------------


def plain_forward(
    model: Any, *, device: str, batch: int, tokens: int, seconds: float, vocab: int
) -> dict[str, float]:
    """Sequences per second of a bare batched forward (transformers' own masks, no KV cache)."""
    import torch

    ids = torch.randint(10, vocab, (batch, tokens), device=device)
    mask = torch.ones_like(ids)
    with torch.inference_mode():
        for _ in range(2):
            model(input_ids=ids, attention_mask=mask, use_cache=False)
        sync(device)
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds or n < 2:
            model(input_ids=ids, attention_mask=mask, use_cache=False)
            n += 1
        sync(device)
        elapsed = time.perf_counter() - start
    return {
        "tokens": tokens,
        "batch": batch,
        "forwards": n,
        "seq_per_s": n * batch / elapsed,
        "tokens_per_s": n * batch * tokens / elapsed,
    }


def texts_of_length(model_dir: Path, tokens: int, count: int, seed: int) -> list[str]:
    """`count` different texts the model's tokenizer turns into exactly `tokens` ids (end-of-text included)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    base = len(tokenizer("", add_special_tokens=True)["input_ids"])
    words = sorted({w for w in (REPO / "README.md").read_text().split() if w.isalpha() and w.isascii()})
    single = [w for w in words if len(tokenizer(" " + w, add_special_tokens=False)["input_ids"]) == 1][:400]
    rng = np.random.default_rng(seed)
    # Each word after a space is one token; the leading space keeps the first one so too.
    picks = rng.integers(0, len(single), (count + count // 20 + 16, tokens - base))
    texts = list(dict.fromkeys("".join(" " + single[i] for i in row) for row in picks))[:count]
    if len(texts) < count:
        raise RuntimeError(f"only {len(texts)} different texts of {tokens} tokens from {len(single)} words")
    lengths = {len(ids) for ids in tokenizer(texts, add_special_tokens=True)["input_ids"]}
    if lengths != {tokens}:
        raise RuntimeError(f"texts of {tokens} tokens came out as {sorted(lengths)} tokens")
    return texts


class SentenceTransformers:
    """sentence-transformers on the model dir: LAST pooling and normalisation, as the workers serve it."""

    def __init__(self, model_dir: Path, *, device: str, dtype: str, dim: int) -> None:
        import torch
        from sentence_transformers import SentenceTransformer

        try:  # sentence-transformers 6 moved the modules; 5 and older have them in `models`
            from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
        except ImportError:
            from sentence_transformers.models import Normalize, Pooling, Transformer  # type: ignore[no-redef]

        self.device = device
        self.st = SentenceTransformer(
            modules=[Transformer(str(model_dir)), Pooling(dim, pooling_mode="lasttoken"), Normalize()],
            device=device,
        ).to(getattr(torch, dtype))

    def measure(self, texts: list[str], *, batch: int, tokens: int) -> dict[str, float]:
        self.st.encode(texts[:batch], batch_size=batch)  # warm-up: this batch size's first pass
        sync(self.device)
        start = time.perf_counter()
        self.st.encode(texts, batch_size=batch)
        sync(self.device)
        elapsed = time.perf_counter() - start
        log(
            f"  sentence-transformers {tokens:>3} tokens, batch {batch:>4}: {len(texts) / elapsed:>9,.0f} seq/s"
        )
        return {"tokens": tokens, "batch": batch, "inputs": len(texts), "seq_per_s": len(texts) / elapsed}


# -- the in-process engine profile ---------------------------------------------------------


def engine_profile(model_dir: Path, *, device: str, dtype: str, quick: bool, max_id: int) -> dict[str, Any]:
    """Back-to-back forwards of each path: host time to queue one, device time, wall time."""
    import torch

    from embedlab.engines.base import EngineOptions
    from embedlab.engines.transformers import TransformersEngine

    shapes = [(1, 13), (64, 13), (256, 13), (256, 128)]
    out: dict[str, Any] = {"shapes": shapes, "paths": {}}
    rng = np.random.default_rng(0)
    for path in ("transformers-masks", "no-sync eager", "cuda graphs", "cuda graphs + compile"):
        if not device.startswith("cuda") and path.startswith("cuda"):
            continue
        # Only the buckets these shapes use: each capture costs start-up time.
        extra: dict[str, object] = {
            "cuda_graphs": path.startswith("cuda"),
            "compile": path.endswith("compile"),
            "graph_widths": [16, 128],
        }
        engine = TransformersEngine(
            EngineOptions(
                model_path=model_dir,
                device=device,
                dtype=dtype,
                max_batch_size=PROFILE_BATCH,
                max_batch_tokens=PROFILE_BATCH * 128,
                extra_args=extra,
            )
        )
        started = time.monotonic()
        engine._load()
        load_s = time.monotonic() - started
        if path == "transformers-masks":
            engine.attention = engine.info["attention"] = (
                "transformers"  # the landed code's inputs: a 2-D mask
            )
        rows = []
        for count, tokens in shapes:
            seqs = [rng.integers(10, max_id, tokens).tolist() for _ in range(count)]
            n = 3 if not device.startswith("cuda") else (40 if count * tokens <= 4096 else 12)
            for _ in range(2):
                _wait(engine._forward(seqs))
            sync(device)
            starts, ends, host = [], [], []
            pending = []
            wall0 = time.perf_counter()
            for _ in range(n):
                if device.startswith("cuda"):
                    starts.append(torch.cuda.Event(enable_timing=True))
                    ends.append(torch.cuda.Event(enable_timing=True))
                    starts[-1].record()
                t = time.perf_counter()
                pending.append(engine._forward(seqs))
                host.append(time.perf_counter() - t)
                if device.startswith("cuda"):
                    ends[-1].record()
                if len(pending) > 2:  # the batcher keeps two in flight
                    _wait(pending.pop(0))
            for p in pending:
                _wait(p)
            sync(device)
            wall = (time.perf_counter() - wall0) / n
            gpu = (
                float(np.median([s.elapsed_time(e) for s, e in zip(starts, ends)])) / 1000
                if starts
                else float("nan")
            )
            row = {
                "rows": count,
                "tokens": tokens,
                "forwards": n,
                "host_ms_per_forward": 1000 * float(np.median(host)),
                "device_ms_per_forward": 1000 * gpu,
                "wall_ms_per_forward": 1000 * wall,
                "seq_per_s": count / wall,
            }
            rows.append(row)
            log(
                f"  {path:<24} {count:>3} x {tokens:<3}: host {row['host_ms_per_forward']:7.2f} ms  device "
                f"{row['device_ms_per_forward']:7.2f} ms  wall {row['wall_ms_per_forward']:7.2f} ms  {row['seq_per_s']:>9,.0f} seq/s"
            )
        info = {k: v for k, v in engine.info.items() if k != "cuda_graphs"}
        info["graphs"] = len(engine.info.get("cuda_graphs", []))
        out["paths"][path] = {"load_s": load_s, "info": info, "rows": rows}
        if device.startswith("cuda"):
            # The landed inputs are the control: the check must catch their mask's sync.
            out["paths"][path]["sync_check"] = _sync_check(engine, rng, max_id)
            log(f"  {path}: sync check {out['paths'][path]['sync_check'][:120]}")
            if not path.endswith("compile"):
                out["paths"][path]["trace"] = trace = _trace(engine, rng, max_id)
                log(
                    f"  {path}: 20 back-to-back 256 x 13 forwards: device busy {trace.get('device_busy_fraction') or 0:.0%} "
                    f"of {trace.get('span_ms', 0):.1f} ms, {trace.get('gaps_over_50us')} idle gaps over 50 us, largest {trace.get('largest_gap_us', 0):.0f} us"
                )
        del engine
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    return out


def _wait(result: Any) -> np.ndarray:
    return result.wait() if hasattr(result, "wait") else result


def _sync_check(engine: Any, rng: np.random.Generator, max_id: int) -> str:
    """Forwards of every kind under sync-debug 'error': any host sync raises."""
    import torch

    batches = [
        [rng.integers(10, max_id, int(n)).tolist() for n in rng.integers(1, 120, k)] for k in (1, 7, 64)
    ]
    batches.append([rng.integers(10, max_id, 700).tolist() for _ in range(3)])  # past the graph widths: eager
    results: list[Any] = []
    try:
        for seqs in batches:
            torch.cuda.set_sync_debug_mode("error")
            try:
                results.append(engine._forward(seqs))
            finally:
                torch.cuda.set_sync_debug_mode(0)
            if len(results) >= 2:  # as the batcher does: two in flight, the engine's slots hold three
                _wait(results.pop(0))
    except RuntimeError as exc:
        return f"FAILED: {exc}"
    finally:
        for r in results:
            _wait(r)
    return f"passed: no synchronising call in {len(batches)} forwards (graph replays and eager)"


def _trace(engine: Any, rng: np.random.Generator, max_id: int) -> dict[str, Any]:
    """torch.profiler over back-to-back graph replays: how long the device sits idle."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    seqs = [rng.integers(10, max_id, 13).tolist() for _ in range(256)]
    pending = []
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            pending.append(engine._forward(seqs))
            if len(pending) > 2:
                _wait(pending.pop(0))
        for p in pending:
            _wait(p)
        torch.cuda.synchronize()
    kernels = sorted(
        (e.time_range.start, e.time_range.end)
        for e in prof.events()
        if e.device_type == torch.autograd.DeviceType.CUDA and e.time_range.end > e.time_range.start
    )
    if not kernels:
        return {"kernels": 0}
    busy, gaps, end = 0.0, [], kernels[0][0]
    for s, e in kernels:
        if s > end:
            gaps.append(s - end)
        busy += max(0, e - max(s, end))
        end = max(end, e)
    span = end - kernels[0][0]
    try:
        table = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=15)
    except Exception:  # the sort key's name moved between torch versions
        table = prof.key_averages().table(sort_by="cpu_time_total", row_limit=15)
    return {
        "kernels": len(kernels),
        "span_ms": span / 1000,
        "busy_ms": busy / 1000,
        "device_busy_fraction": busy / span if span else None,
        "gaps_over_50us": sum(1 for g in gaps if g > 50),
        "largest_gap_us": max(gaps) if gaps else 0.0,
        "top_ops": table.splitlines()[:25],
    }


# -- served ------------------------------------------------------------------------------


def spec(
    model_dir: Path,
    *,
    device: str,
    dtype: str,
    compile_: bool,
    max_batch: int,
    api: int,
    frontend: int,
    also: tuple[int, ...] = (),
) -> DeploymentSpec:
    """The served deployment: the transformers worker with `api` ingest processes, a hash
    worker (answers in microseconds) for the loopback round trip, and transformers workers
    with `also` ingest processes for side rows, behind one frontend."""
    args = (
        "--dtype",
        dtype,
        "--max-batch-size",
        str(max_batch),
        "--max-batch-tokens",
        str(MAX_BATCH_TOKENS),
        "--batch-wait-ms",
        "2",
        "--engine-arg",
        f"compile={'true' if compile_ else 'false'}",
        "--engine-arg",
        f"pipeline_min={PIPELINE_MIN}",
    )

    def transformers(name: str, processes: int) -> WorkerSpec:
        return WorkerSpec(
            model=name,
            engine="transformers",
            model_path=model_dir,
            device=None if device == "cuda" else "cpu",
            extra_args=(*args, "--api-processes", str(processes)),
        )

    return DeploymentSpec(
        workers=(
            transformers(MODEL, api),
            WorkerSpec(model=HASH_MODEL, engine="hash", extra_args=("--dim", "1024")),
            *(transformers(also_name(n), n) for n in also),
        ),
        frontend_args=("--processes", str(frontend)),
        startup_timeout=900,
    )


def also_name(processes: int) -> str:
    return f"{MODEL}-api{processes}"


def health(system_url: str) -> dict[str, Any]:
    return httpx.get(system_url + "/health", timeout=10).json()  # type: ignore[no-any-return]


def parity(
    dep: Deployment, model_dir: Path, *, device: str, dtype: str, max_id: int, max_len: int
) -> dict[str, Any]:
    """Served vectors (through the frontend, batched with padding) against one unpadded forward each."""
    import httpx
    import torch
    from transformers import AutoModel

    from embedlab.serving.openai import decode_embedding

    rng = np.random.default_rng(7)
    # One length in and one past each graph width, a length at each width, and past the last.
    lengths = [
        n
        for n in (1, 2, 13, 15, 16, 17, 31, 32, 33, 64, 65, 100, 128, 129, 255, 256, 257, 511, 512, 513, 700)
        if n <= max_len
    ]
    seqs = [rng.integers(10, max_id, n).tolist() for n in lengths]

    async def send() -> list[np.ndarray]:
        async with httpx.AsyncClient(timeout=120) as client:

            async def one(batch: list[list[int]]) -> list[np.ndarray]:
                r = await client.post(
                    dep.frontend_url + "/v1/embeddings",
                    json={"model": "qwen3", "input": batch, "encoding_format": "base64"},
                )
                r.raise_for_status()
                return [decode_embedding(d["embedding"]) for d in r.json()["data"]]

            # Singles concurrently (batched together by the worker) and one mixed request.
            singles = await asyncio.gather(*(one([s]) for s in seqs))
            mixed = await one(seqs)
            return [v[0] for v in singles] + mixed

    served = asyncio.run(send())
    model = AutoModel.from_pretrained(model_dir, dtype=getattr(torch, dtype)).to(device).eval()
    want = []
    with torch.inference_mode():
        for s in seqs:
            hidden = (
                model(input_ids=torch.tensor([s], device=device), use_cache=False)
                .last_hidden_state[0, -1]
                .float()
            )
            want.append(torch.nn.functional.normalize(hidden, dim=-1).cpu().numpy())
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    want = want + want
    cos = [float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))) for a, b in zip(served, want)]
    # fp32 is where the path must be exact (graphs, padding, pooling: 0.9999999 on an H200).
    # In bf16 the reference and the served forward each round at 2**-8, in kernels chosen by
    # batch shape: 0.99986 eager, 0.99982 compiled there. vLLM's HF parity tests allow 1e-2.
    floor = 0.999 if dtype == "bfloat16" else 0.99999
    return {
        "lengths": lengths,
        "min_cosine": min(cos),
        "floor": floor,
        "passed": min(cos) >= floor,
        "cosines": cos,
    }


# -- the GPU's own limit: the engine's forward, replayed back to back ----------------------


class Replay:
    """The served forward (the same engine, compiled, its CUDA graphs) in this process.

    `per_forward` times back-to-back forwards of one (rows, 13 tokens) bucket with the
    batcher's pipelining (at most two in flight, the host filling the next while the device
    runs the last): the seconds a forward takes when nothing but the forward is there.
    `single` times one forward alone, call to vectors on the host: batch 1's latency.
    """

    def __init__(self, model_dir: Path, *, device: str, dtype: str, compile_: bool, max_batch: int) -> None:
        from embedlab.engines.base import EngineOptions
        from embedlab.engines.transformers import TransformersEngine

        self.engine = TransformersEngine(
            EngineOptions(
                model_path=model_dir,
                device=device,
                dtype=dtype,
                max_batch_size=max_batch,
                max_batch_tokens=MAX_BATCH_TOKENS,
                extra_args={"compile": compile_, "graph_widths": [16, 128]},
            )
        )
        started = time.monotonic()
        self.engine._load()
        self.load_s = time.monotonic() - started
        self.device = device
        graphs = self.engine._graphs.rows_by_width.get(16)
        # Without graphs (CPU), the rows the served batches are counted in.
        self.rows = list(graphs) if graphs else [1, 2, 4, 8, 16, 32, 64, 128, 256, max_batch]
        self.rows = sorted({r for r in self.rows if r <= max_batch})
        self.rng = np.random.default_rng(1)
        self.max_id = min(5000, self.engine._vocab_size)

    def seqs(self, rows: int, tokens: int) -> list[list[int]]:
        return [self.rng.integers(10, self.max_id, tokens).tolist() for _ in range(rows)]

    def per_forward(self, rows: int, tokens: int, seconds: float) -> float:
        seqs = self.seqs(rows, tokens)
        for _ in range(3):
            _wait(self.engine._forward(seqs))
        pending: list[Any] = []
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds or n < 4:
            pending.append(self.engine._forward(seqs))
            n += 1
            if len(pending) >= 2:  # the batcher's max_inflight
                _wait(pending.pop(0))
        for p in pending:
            _wait(p)
        return (time.perf_counter() - start) / n

    def single(self, tokens: int, count: int) -> dict[str, float]:
        seqs = self.seqs(1, tokens)
        times = []
        for i in range(count + 5):
            t = time.perf_counter()
            _wait(self.engine._forward(seqs))
            if i >= 5:
                times.append(1000 * (time.perf_counter() - t))
        return {"p50_ms": float(np.median(times)), "min_ms": float(min(times)), "forwards": count}

    def measure(self, *, tokens: int, seconds: float, singles: int) -> dict[str, Any]:
        per = {r: self.per_forward(r, tokens, seconds) for r in self.rows}
        out = {
            "tokens": tokens,
            "per_forward_ms": {str(r): 1000 * t for r, t in per.items()},
            "seq_per_s": {str(r): r / t for r, t in per.items()},
            "batch1": self.single(tokens, singles),
        }
        best = max(out["seq_per_s"].items(), key=lambda kv: kv[1])
        log(
            f"  graph replay {tokens} tokens: batch 1 alone {out['batch1']['p50_ms']:.2f} ms; back to back "
            + ", ".join(f"{r}: {v:,.0f}" for r, v in out["seq_per_s"].items())
            + f" seq/s (best {best[1]:,.0f} at {best[0]})"
        )
        return out

    def bucket(self, size: int) -> int:
        for r in self.rows:
            if r >= size:
                return r
        return self.rows[-1]


def limit_at(histogram: dict[int, int], replay: dict[str, Any], bucket: Callable[[int], int]) -> float | None:
    """Sequences per second the replayed forward gives for the batches a step served: the same
    batch sizes, each at its bucket's back-to-back time."""
    per = replay["per_forward_ms"]
    seconds = sum(n * per[str(bucket(size))] / 1000 for size, n in histogram.items())
    sequences = sum(size * n for size, n in histogram.items())
    return sequences / seconds if seconds else None


# -- the whole run -----------------------------------------------------------------------


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=["qwen3-embedding-0.6b", "tiny"], default="qwen3-embedding-0.6b")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument(
        "--model-dir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "embedlab-qwen3-0.6b-shape"
    )
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "gpu_short_inputs.json")
    parser.add_argument("--logs", type=Path, default=None, help="copy the worker's and frontend's logs here")
    parser.add_argument(
        "--quick", action="store_true", help="short steps, small references and load, for a dry run"
    )
    parser.add_argument("--profile", action="store_true", help="add the in-process engine profile")
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each loaded step")
    parser.add_argument("--c1-seconds", type=float, default=3.0, help="length of each c=1 step")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of every headline figure")
    parser.add_argument("--max-batch", type=int, default=512, help="the worker's --max-batch-size")
    parser.add_argument(
        "--compile", choices=["on", "off"], default="on", help="torch.compile (workers, replay)"
    )
    parser.add_argument("--api", type=int, default=API_PROCESSES, help="the worker's --api-processes")
    parser.add_argument(
        "--frontend-processes", type=int, default=FRONTEND_PROCESSES, help="the frontend's --processes"
    )
    parser.add_argument(
        "--api-also",
        type=int,
        action="append",
        default=[],
        metavar="N",
        help="a further worker with N ingest processes, at saturation each round (a side row)",
    )
    parser.add_argument(
        "--sysctl",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="after the rounds, set this (root) and repeat the saturation step; restored after",
    )
    parser.add_argument("--skip", action="append", default=[], choices=["plain", "st", "parity", "compiled"])
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    started = time.time()
    report: dict[str, Any] = {
        "machine": {
            "gpus": gpu_names(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "kernel": platform.release(),
            "sysctl": sysctls(),
            "cpu0_siblings": _read("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list"),
            "cpu_model": next(
                (
                    x.split(":", 1)[1].strip()
                    for x in _read("/proc/cpuinfo").splitlines()
                    if x.startswith("model name")
                ),
                "",
            ),
        },
        "command": " ".join(sys.argv),
    }
    try:
        import torch
        import transformers

        report["machine"].update(torch=torch.__version__, transformers=transformers.__version__)
    except ImportError:
        pass
    try:  # a required dependency the machine's image lacks: carried as a wheel where it is there
        import orjson

        report["machine"]["orjson"] = orjson.__version__
    except ImportError:
        report["machine"]["orjson"] = None
    quick = args.quick
    cuda = args.device == "cuda"
    shape = None if args.shape == "tiny" else args.shape
    t = time.time()
    model_dir = build_tiny_model(
        "qwen3",
        args.model_dir if shape else args.model_dir.with_name(args.model_dir.name + "-tiny"),
        shape=shape,
    )
    config = json.loads((model_dir / "config.json").read_text())
    device0 = "cuda:0" if cuda else "cpu"
    seconds = 1.0 if quick else args.seconds
    c1_seconds = 1.0 if quick else args.c1_seconds
    sweep = QUICK_SWEEP if quick else SWEEP
    saturation = sweep[-1]
    compile_ = args.compile == "on"
    front = args.frontend_processes
    # Enough different texts that no step repeats one: the fastest step's requests, twice over.
    counts = {13: 4096, 128: 2048} if quick else {13: 160_000, 128: 40_000}
    texts = {n: texts_of_length(model_dir, n, counts[n], seed=n) for n in LENGTHS}
    report["model"] = {"shape": args.shape, "build_s": time.time() - t, "dtype": args.dtype}
    report["setup"] = {
        "max_batch_size": args.max_batch,
        "max_batch_tokens": MAX_BATCH_TOKENS,
        "pipeline_min": PIPELINE_MIN,
        "compile": compile_,
        "api_processes": args.api,
        "frontend_processes": front,
        "inputs": "different texts of exactly 13 or 128 tokens in every request of a step; "
        "sentence-transformers gets texts from the same pool",
        "texts": {str(n): len(v) for n, v in texts.items()},
        "seconds_per_step": seconds,
        "seconds_per_c1_step": c1_seconds,
        "sweep": sweep,
        "saturation_concurrency": saturation,
        "rounds": args.rounds,
        "load_generator": "bench/loadgen.py run_bodies: a bare keep-alive HTTP/1.1 client, 4 processes, "
        "connections opened and used once before each step's clock starts",
    }

    def save() -> None:
        report["wall_s"] = time.time() - started
        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(args.out, json.dumps(report, indent=2, default=str))

    def stage(name: str, run: Callable[[], Any]) -> Any:
        log(f"== {name} ({time.time() - started:.0f} s in)")
        t0 = time.time()
        try:
            result = run()
        except Exception as exc:  # one failed stage must not cost the others' figures
            log(f"   {name} FAILED: {exc.__class__.__name__}: {exc}")
            report.setdefault("errors", {})[name] = f"{exc.__class__.__name__}: {exc}"
            result = None
        report.setdefault("stage_s", {})[name] = time.time() - t0
        save()
        return result

    if args.profile:
        report["profile"] = stage(
            "engine profile",
            lambda: engine_profile(
                model_dir,
                device=device0,
                dtype=args.dtype,
                quick=quick,
                max_id=min(5000, config["vocab_size"]),
            ),
        )

    # -- references, before the deployment: the plain forward (eager, then compiled as the
    # worker compiles), sentence-transformers' sweep, the replayed forward.
    max_id = min(5000, config["vocab_size"])
    plain_model: list[Any] = []

    def plain(compiled: bool) -> list[dict[str, float]]:
        import torch
        from transformers import AutoModel

        from embedlab.engines.transformers_tuning import compile_repeated_blocks

        if not plain_model:
            plain_model.append(
                AutoModel.from_pretrained(model_dir, dtype=getattr(torch, args.dtype)).to(device0).eval()
            )
        model = plain_model[0]
        if compiled:
            compile_repeated_blocks(model)  # the worker's own settings: regional, dynamic shapes
        rows = []
        for tokens in LENGTHS:
            for batch in QUICK_BATCHES if quick else BATCHES:
                rows.append(
                    {
                        **plain_forward(
                            model,
                            device=device0,
                            batch=batch,
                            tokens=tokens,
                            seconds=0.5 if quick else 1.5,
                            vocab=max_id,
                        ),
                        "compiled": compiled,
                    }
                )
                log(
                    f"  plain forward{' compiled' if compiled else ''} {tokens:>3} tokens, batch {batch:>4}: "
                    f"{rows[-1]['seq_per_s']:>9,.0f} seq/s"
                )
        return rows

    if "plain" not in args.skip:
        report["plain_forward"] = stage("plain forward, eager", lambda: plain(False))
        if "compiled" not in args.skip and compile_:
            report["plain_forward_compiled"] = stage("plain forward, compiled", lambda: plain(True))
    st: SentenceTransformers | None = None
    st_texts = texts[13][: 4096 if quick else 16384]
    if "st" not in args.skip:
        st = stage(
            "sentence-transformers load",
            lambda: SentenceTransformers(
                model_dir, device=device0, dtype=args.dtype, dim=config["hidden_size"]
            ),
        )
        if st is not None:
            st_batches = {
                13: (64, 256, 1024) if quick else ST_BATCHES_13,
                128: (64, 256) if quick else ST_BATCHES_128,
            }
            report["sentence_transformers"] = stage(
                "sentence-transformers sweep",
                lambda: [
                    st.measure(  # type: ignore[union-attr]
                        st_texts if n == 13 else texts[128][: max(2 * b, 4096 if not quick else 512)],
                        batch=b,
                        tokens=n,
                    )
                    for n in LENGTHS
                    for b in st_batches[n]
                ],
            )
    replay: Replay | None = stage(
        "replay engine load",
        lambda: Replay(
            model_dir, device=device0, dtype=args.dtype, compile_=compile_ and cuda, max_batch=args.max_batch
        ),
    )
    if replay is not None:
        report["replay_engine"] = {
            "load_s": replay.load_s,
            "rows": replay.rows,
            "graphs": len(replay.engine.info.get("cuda_graphs", [])),
            "compile": replay.engine.info.get("compile"),
        }

    # -- served ----------------------------------------------------------------------------

    def served() -> dict[str, Any]:
        out: dict[str, Any] = {"rows": [], "rounds": []}
        the_spec = spec(
            model_dir,
            device=args.device,
            dtype=args.dtype,
            compile_=compile_,
            max_batch=args.max_batch,
            api=args.api,
            frontend=front,
            also=tuple(args.api_also),
        )
        tmp = Path(tempfile.mkdtemp(prefix="gpu-bodies-"))
        bodies = {
            (13, 1): Bodies(tmp / "13x1", text_bodies(MODEL, texts[13], inputs=1, count=len(texts[13]))),
            (128, 1): Bodies(tmp / "128x1", text_bodies(MODEL, texts[128], inputs=1, count=len(texts[128]))),
            (128, 16): Bodies(
                tmp / "128x16", text_bodies(MODEL, texts[128], inputs=16, count=len(texts[128]) // 16)
            ),
            "hash": Bodies(tmp / "hash", text_bodies(HASH_MODEL, texts[13], inputs=1, count=len(texts[13]))),
            **{
                n: Bodies(
                    tmp / f"api{n}", text_bodies(also_name(n), texts[13], inputs=1, count=len(texts[13]))
                )
                for n in args.api_also
            },
        }
        try:
            with Deployment(the_spec) as dep:
                main_url = dep.system_urls[0]
                info = health(main_url)["engine_info"]
                out["startup_s"] = dep.startup_seconds
                out["engine_info"] = {k: v for k, v in info.items() if k not in ("batching", "ingest")}
                log(
                    f"  workers up in {dep.startup_seconds.get('total', 0):.1f} s: {len(info.get('cuda_graphs', []))} graphs, "
                    f"{info.get('graph_memory_mib', 0)} MiB, capture {info.get('graph_capture_s', 0)} s, compile {info.get('compile')}"
                )
                if "parity" not in args.skip:
                    out["parity"] = parity(
                        dep,
                        model_dir,
                        device=device0,
                        dtype=args.dtype,
                        max_id=max_id,
                        max_len=config["max_position_embeddings"],
                    )
                    log(f"  served vs direct forward: min cosine {out['parity']['min_cosine']:.6f}")
                url = dep.frontend_url

                def run(
                    label: str, key: Any, tokens: int, c: int, inputs: int, *, secs: float | None = None
                ) -> dict[str, Any]:
                    return step(
                        dep,
                        label=label,
                        url=url,
                        bodies=bodies[key],
                        tokens=tokens,
                        concurrency=c,
                        inputs=inputs,
                        seconds=secs or (c1_seconds if c == 1 else seconds),
                        system_url=None
                        if key == "hash"
                        else dep.system_urls[2 + args.api_also.index(key)]
                        if isinstance(key, int)
                        else main_url,
                        frontend_processes=front,
                    )

                run("warm-up", (13, 1), 13, saturation, 1, secs=1.0)
                run("warm-up", (128, 16), 128, 64, 16, secs=1.0)
                for r in range(1, args.rounds + 1):
                    log(f"-- round {r} of {args.rounds} (frontend x{front}, api x{args.api})")
                    row: dict[str, Any] = {"round": r, "frontend_processes": front, "api_processes": args.api}
                    if st is not None:
                        refs = [
                            st.measure(st_texts, batch=b, tokens=13)
                            for b in (ST_ROUND_QUICK if quick else ST_ROUND)
                        ]
                        row["sentence_transformers"] = refs
                        best = max(refs, key=lambda x: x["seq_per_s"])
                        row["st_best_seq_per_s"], row["st_best_batch"] = best["seq_per_s"], best["batch"]
                    if replay is not None:
                        row["replay"] = replay.measure(
                            tokens=13, seconds=0.1 if quick else 0.3, singles=20 if quick else 60
                        )
                    if plain_model and "compiled" not in args.skip and compile_:
                        row["plain_compiled_128"] = [
                            plain_forward(
                                plain_model[0],
                                device=device0,
                                batch=b,
                                tokens=128,
                                seconds=0.5 if quick else 1.5,
                                vocab=max_id,
                            )
                            for b in (QUICK_BATCHES if quick else BATCHES)
                        ]
                        log(
                            "  plain forward compiled 128 tokens: "
                            + ", ".join(
                                f"batch {x['batch']}: {x['seq_per_s']:,.0f}"
                                for x in row["plain_compiled_128"]
                            )
                        )
                    row["hash_c1"] = run("hash worker", "hash", 13, 1, 1)
                    row["steps"] = [run(f"round {r}", (13, 1), 13, c, 1) for c in sweep]
                    row["long"] = [
                        run(f"round {r}", (128, 16), 128, 64, 16),
                        # 2,048 sequences in flight: full batches of 512 with two forwards on the device
                        run(f"round {r}", (128, 16), 128, 128 if not quick else 8, 16),
                        run(f"round {r}", (128, 1), 128, 256 if not quick else 8, 1),
                    ]
                    row["also"] = [
                        {**run(f"round {r}, api x{n}", n, 13, saturation, 1), "api_processes": n}
                        for n in args.api_also
                    ]
                    out["rounds"].append(row)
                    save_partial(out)
                for assignment in args.sysctl:
                    out.setdefault("sysctl_variants", []).append(
                        sysctl_variant(assignment, lambda: run("saturation", (13, 1), 13, saturation, 1))
                    )
                if args.logs:
                    args.logs.mkdir(parents=True, exist_ok=True)
                    # The transformers worker's log and the frontend's, by their files' names.
                    for path in dep.log_paths.values():
                        if path.name in ("worker-0.log", "frontend.log"):
                            (args.logs / f"gpu-{path.name}").write_bytes(path.read_bytes()[-2_000_000:])
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return out

    def save_partial(out: dict[str, Any]) -> None:
        report["served"] = out
        save()

    report["served"] = stage("served", served) or report.get("served")
    report["targets"] = targets(report)
    report["saturation_profile"] = saturation_profile(report)
    for row in report["targets"]:
        log(
            f"  {row['target']:<44} goal {row['goal']:<24} measured {row['measured']}  {'met' if row['met'] else 'MISSED'}"
        )
    save()
    return 0


def sysctl_variant(assignment: str, again: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Set a sysctl, run the saturation step 3 times, put it back: a diagnostic, not a setting."""
    key, _, value = assignment.partition("=")
    path = Path("/proc/sys/" + key.replace(".", "/"))
    try:
        before = path.read_text().strip()
        path.write_text(value)
    except OSError as exc:
        log(f"  cannot set {key}: {exc}")
        return {"sysctl": assignment, "error": str(exc)}
    log(f"-- {key}: {before} -> {value}")
    try:
        rows = [again() for _ in range(3)]
    finally:
        path.write_text(before)
    return {"sysctl": assignment, "was": before, "rows": rows}


def _round_figures(rnd: dict[str, Any], saturation: int) -> dict[str, Any]:
    """One round's headline figures, each from that round's own references."""
    steps = {s["concurrency"]: s for s in rnd["steps"]}
    sat = steps.get(saturation)
    out: dict[str, Any] = {"round": rnd["round"], "frontend_processes": rnd["frontend_processes"]}
    replay = rnd.get("replay")
    if sat:
        out["served_seq_per_s"] = sat["seq_per_s"]
        out["served_mean_batch"] = sat["mean_batch"]
        if replay:
            hist = {int(k): v for k, v in sat["batch_histogram"].items()}
            out["limit_at_served_batches"] = limit_at(hist, replay, _bucketer(replay))
            out["limit_best"] = max(replay["seq_per_s"].values())
            if out["limit_at_served_batches"]:
                out["vs_limit"] = sat["seq_per_s"] / out["limit_at_served_batches"]
            out["vs_limit_best"] = sat["seq_per_s"] / out["limit_best"]
        if rnd.get("st_best_seq_per_s"):
            out["st_best_seq_per_s"] = rnd["st_best_seq_per_s"]
            out["st_best_batch"] = rnd["st_best_batch"]
            out["vs_st"] = sat["seq_per_s"] / rnd["st_best_seq_per_s"]
    c1 = steps.get(1)
    if c1:
        out["c1_p50_ms"] = c1["p50_ms"]
        out["hash_c1_p50_ms"] = rnd["hash_c1"]["p50_ms"]
        if replay:
            out["replay_batch1_ms"] = replay["batch1"]["p50_ms"]
            out["c1_over_floor_ms"] = c1["p50_ms"] - replay["batch1"]["p50_ms"] - rnd["hash_c1"]["p50_ms"]
    out["also"] = [
        {
            "api_processes": a["api_processes"],
            "seq_per_s": a["seq_per_s"],
            "p99_over_mean": a["p99_over_mean"],
            "vs_limit": a["seq_per_s"]
            / (limit_at({int(k): v for k, v in a["batch_histogram"].items()}, replay, _bucketer(replay)) or 1)
            if replay and a["batch_histogram"]
            else None,
        }
        for a in rnd.get("also") or []
    ]
    out["p99_over_mean"] = {str(s["concurrency"]): s["p99_over_mean"] for s in rnd["steps"]}
    out["worst_p99_over_mean"] = max((s["p99_over_mean"] or 0) for s in rnd["steps"])
    long = rnd.get("long") or []
    if long:
        best = max(long, key=lambda s: s["seq_per_s"])
        out["long_seq_per_s"] = best["seq_per_s"]
        out["long_how"] = f"c={best['concurrency']} x{best['inputs_per_request']}"
        compiled = rnd.get("plain_compiled_128")
        if compiled:
            ref = max(compiled, key=lambda x: x["seq_per_s"])
            out["plain_compiled_128_seq_per_s"] = ref["seq_per_s"]
            out["plain_compiled_128_batch"] = ref["batch"]
            out["long_vs_plain_compiled"] = best["seq_per_s"] / ref["seq_per_s"]
    return out


def _bucketer(replay: dict[str, Any]) -> Callable[[int], int]:
    rows = sorted(int(r) for r in replay["per_forward_ms"])

    def bucket(size: int) -> int:
        return next((r for r in rows if r >= size), rows[-1])

    return bucket


def targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Each goal of issue 33, marked met or missed here, from the alternating rounds."""
    served = report.get("served") or {}
    rounds = served.get("rounds") or []
    saturation = report["setup"]["saturation_concurrency"]
    figures = [_round_figures(r, saturation) for r in rounds]
    served["round_figures"] = figures
    front = report["setup"]["frontend_processes"]
    out: list[dict[str, Any]] = []

    def add(
        target: str,
        goal: str,
        values: list[float],
        ok: Callable[[float], bool],
        detail: str,
        *,
        every: bool = False,
    ) -> None:
        if not values:
            out.append(
                {"target": target, "goal": goal, "measured": None, "met": False, "detail": "not measured"}
            )
            return
        value = max(values) if every else median(values)
        met = all(ok(v) for v in values) if every else ok(value)
        out.append(
            {
                "target": target,
                "goal": goal,
                "measured": round(value, 3),
                "met": bool(met),
                "rounds": [round(v, 3) for v in values],
                "detail": detail,
            }
        )

    vs_limit = [f["vs_limit"] for f in figures if f.get("vs_limit")]
    add(
        f"13 tok, 1/request, c={saturation}, vs graph replay",
        f">= {TARGETS['vs_replay_limit']}x (served batches)",
        vs_limit,
        lambda v: v >= TARGETS["vs_replay_limit"],
        f"frontend x{front}; median of {len(vs_limit)} rounds; served "
        + ", ".join(f"{f.get('served_seq_per_s', 0):,.0f}" for f in figures)
        + " seq/s against the replayed forward at the same batch sizes "
        + ", ".join(f"{f.get('limit_at_served_batches') or 0:,.0f}" for f in figures)
        + " (at its best bucket "
        + ", ".join(f"{f.get('limit_best') or 0:,.0f}" for f in figures)
        + ")",
    )
    worst = [f["worst_p99_over_mean"] for f in figures]
    add(
        f"p99 / mean, every c up to {saturation}, every round",
        f"<= {TARGETS['p99_over_mean']}x",
        worst,
        lambda v: v <= TARGETS["p99_over_mean"],
        "worst step of each round; per step: "
        + "; ".join(
            f"round {f['round']}: " + ", ".join(f"c={c} {v:.1f}" for c, v in f["p99_over_mean"].items())
            for f in figures
        ),
        every=True,
    )
    over = [f["c1_over_floor_ms"] for f in figures if f.get("c1_over_floor_ms") is not None]
    add(
        "c=1 p50 over replay batch 1 + loopback trip",
        f"<= {TARGETS['c1_over_floor_ms']} ms",
        over,
        lambda v: v <= TARGETS["c1_over_floor_ms"],
        "served p50 "
        + ", ".join(f"{f.get('c1_p50_ms', 0):.2f}" for f in figures)
        + " ms; replay batch 1 "
        + ", ".join(f"{f.get('replay_batch1_ms', 0):.2f}" for f in figures)
        + " ms; hash worker through the frontend "
        + ", ".join(f"{f.get('hash_c1_p50_ms', 0):.2f}" for f in figures)
        + " ms",
    )
    c1 = [f["c1_p50_ms"] for f in figures if f.get("c1_p50_ms") is not None]
    add(
        "c=1 p50, 13 tokens",
        f"<= {TARGETS['p50_ms_c1_13_tokens']} ms",
        c1,
        lambda v: v <= TARGETS["p50_ms_c1_13_tokens"],
        "text, through the frontend, compiled",
    )
    vs_st = [f["vs_st"] for f in figures if f.get("vs_st")]
    add(
        f"13 tok, 1/request, c={saturation}, vs sentence-transformers",
        f">= {TARGETS['short_vs_sentence_transformers']}x",
        vs_st,
        lambda v: v >= TARGETS["short_vs_sentence_transformers"],
        "its best batch of "
        + ", ".join(map(str, ST_ROUND))
        + " each round: "
        + ", ".join(
            f"{f.get('st_best_seq_per_s', 0):,.0f} (batch {f.get('st_best_batch')})" for f in figures
        ),
    )
    long = [f["long_vs_plain_compiled"] for f in figures if f.get("long_vs_plain_compiled")]
    add(
        "128 tok served vs compiled plain forward",
        f">= {TARGETS['served_vs_plain_128_tokens']:.0%}",
        long,
        lambda v: v >= TARGETS["served_vs_plain_128_tokens"],
        "served "
        + ", ".join(f"{f.get('long_seq_per_s', 0):,.0f} ({f.get('long_how')})" for f in figures)
        + " vs the compiled plain forward "
        + ", ".join(
            f"{f.get('plain_compiled_128_seq_per_s', 0):,.0f} (batch {f.get('plain_compiled_128_batch')})"
            for f in figures
        ),
    )
    return out


def saturation_profile(report: dict[str, Any]) -> dict[str, Any]:
    """Where the time goes at saturation, per round: the client's tail, the batcher's queueing,
    the ingest processes' balance and doorbells, the TCP counters."""
    served = report.get("served") or {}
    saturation = report["setup"]["saturation_concurrency"]
    out = []
    for rnd in served.get("rounds") or []:
        sat = next((s for s in rnd["steps"] if s["concurrency"] == saturation), None)
        if not sat:
            continue
        server = sat.get("server") or {}
        ingest = server.get("ingest") or {}
        out.append(
            {
                "round": rnd["round"],
                "seq_per_s": sat["seq_per_s"],
                "mean_ms": sat["mean_ms"],
                "p50_ms": sat["p50_ms"],
                "p99_ms": sat["p99_ms"],
                "queued": server.get("queued"),
                "travelled": server.get("travelled"),
                "forward": server.get("forward"),
                "ingest_requests": ingest.get("requests"),
                "ingest_share_max_over_mean": ingest.get("share_max_over_mean"),
                "ingest_ms_answering": ingest.get("ms_answering"),
                "ingest_cores": (sat["cpu"].get("worker 0 ingest") or {}).get("each_process_cores"),
                "frontend_cores": [
                    *(sat["cpu"].get("frontend") or {}).get("each_process_cores", []),
                    *(sat["cpu"].get("frontend routing") or {}).get("each_process_cores", []),
                ],
                "engine_wakeups_per_request": ingest.get("engine_wakeups_per_request"),
                "engine_records_per_wakeup": ingest.get("engine_records_per_wakeup"),
                "polled": (ingest.get("engine_polled") or 0) + (ingest.get("ingest_polled") or 0),
                "unrung": (ingest.get("engine_unrung") or 0) + (ingest.get("ingest_unrung") or 0),
                "reply_travel_ms_mean": ingest.get("reply_travel_ms_mean"),
                "replies_over_5ms": ingest.get("replies_over_5ms"),
                "gc": server.get("gc"),
                "net": sat.get("net"),
                "tail": sat.get("tail"),
                "machine_busy_cores": sat["machine_busy_cores"],
                "gpu_busy": sat["gpu_busy"],
            }
        )
    return {"rounds": out}


if __name__ == "__main__":
    sys.exit(main())
