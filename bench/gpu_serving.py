"""GPU workers on short inputs: plain forward, sentence-transformers and embedlab, side by side.

Measured in one call, on one machine, with a random-weight Qwen3-Embedding-0.6B-shaped model:
- a plain batched transformers forward (bf16, eager) at 13 and 128 tokens, batch 64/256/1024;
- sentence-transformers `encode` on the same model dir (LAST pooling, normalize) at the
  same batches, on texts that tokenize to exactly 13 and 128 tokens;
- embedlab served through the embedded frontend (`--processes 4`) on the SAME texts: three
  transformers workers on the one GPU, with 4, 2 and 1 ingest processes (`--api-processes`),
  CUDA graphs and torch.compile; 1 input per request at c=1 to 1024, 16 per request at c=64;
- the same 13-token load past the frontend, and through frontends of 1 and 2 processes;
- sentence-transformers and the served path in alternating rounds (3 or more), the ratio
  of each round, their median and range;
- per step the CPU per request of every process by role, the GPU's busy share (NVML) and
  the batch-size histogram; served vectors against an unpadded forward, and the 4-ingest
  worker's vectors against the 1-ingest worker's.

`--profile` adds the in-process engine profile: back-to-back forwards of each path
(transformers' own masks, ours eager, CUDA graphs, graphs + compile) timed on the host and
on the device, a torch-profiler summary of the device's idle gaps, and a check with
`torch.cuda.set_sync_debug_mode("error")` that no forward synchronises.

    python bench/gpu_serving.py --out bench/results/gpu_short_inputs.json        # on the GPU machine
    python bench/gpu_serving.py --shape tiny --device cpu --quick                # a CPU dry run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import httpx  # noqa: E402
import numpy as np  # noqa: E402
from gpu_served import ExtraFrontend, log, step, text_bodies, wait_listed  # noqa: E402

from embedlab import Deployment, DeploymentSpec, WorkerSpec  # noqa: E402
from embedlab.cluster.ports import reserve_port  # noqa: E402
from embedlab.engines.tiny import build_tiny_model  # noqa: E402
from embedlab.jsonio import write_text_atomic  # noqa: E402
from embedlab.serving.openai import decode_embedding  # noqa: E402

LENGTHS = (13, 128)
BATCHES = (64, 256, 1024)
ST_ROUND_BATCHES = (256, 1024)
# (tokens, concurrency, inputs per request) through the frontend
MATRIX = [
    (13, 1, 1),
    (13, 64, 1),
    (13, 256, 1),
    (13, 512, 1),
    (13, 768, 1),
    (13, 1024, 1),
    (13, 64, 16),
    (128, 1, 1),
    (128, 64, 1),
    (128, 256, 1),
    (128, 64, 16),
]
QUICK_MATRIX = {
    "cpu": [(13, 1, 1), (13, 64, 1), (13, 8, 16), (128, 8, 16)],
    "cuda": [(13, 1, 1), (13, 512, 1), (13, 64, 16), (128, 64, 16)],
}
API_PROCESSES = (6, 4, 2, 1)  # ingest processes of each worker; the first is the main worker
PROFILE_BATCH = 256  # the in-process profile's largest batch
FRONTEND_PROCESSES = 6  # the deployment's; rows for 1, 2 and 4 come from frontends beside it
EXTRA_FRONTENDS = (1, 2, 4)
# A partial batch of this many goes behind the forward in flight (the engine's pipeline_min):
# graph replays cost little to launch, and the device need not idle between forwards.
PIPELINE_MIN = 64
TARGETS = {
    "short_vs_sentence_transformers": 2.0,
    "p50_ms_c1_13_tokens": 4.0,
    "served_vs_plain_128_tokens": 1.0,
    "two_gpus_vs_one": 1.9,
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
    """Texts the model's tokenizer turns into exactly `tokens` ids (end-of-text included)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    base = len(tokenizer("", add_special_tokens=True)["input_ids"])
    words = sorted({w for w in (REPO / "README.md").read_text().split() if w.isalpha() and w.isascii()})
    single = [w for w in words if len(tokenizer(" " + w, add_special_tokens=False)["input_ids"]) == 1][:400]
    rng = np.random.default_rng(seed)
    # Each word after a space is one token; the leading space keeps the first one so too.
    texts = ["".join(" " + w for w in rng.choice(single, tokens - base)) for _ in range(count)]
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
        self.st.encode(texts[: batch * 2], batch_size=batch)  # warm-up
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
    api: tuple[int, ...],
    frontend: int,
) -> DeploymentSpec:
    args = (
        "--dtype",
        dtype,
        "--max-batch-size",
        str(max_batch),
        "--max-batch-tokens",
        str(256 * 128),
        "--batch-wait-ms",
        "2",
        "--engine-arg",
        f"compile={'true' if compile_ else 'false'}",
        "--engine-arg",
        f"pipeline_min={PIPELINE_MIN}",
    )
    return DeploymentSpec(
        workers=tuple(
            WorkerSpec(
                model=model_name(n, api),
                engine="transformers",
                model_path=model_dir,
                device=None if device == "cuda" else "cpu",
                extra_args=(*args, "--api-processes", str(n)),
            )
            for n in api
        ),
        frontend_args=("--processes", str(frontend)),
        startup_timeout=900,
    )


def model_name(api_processes: int, api: tuple[int, ...]) -> str:
    return "qwen3" if api_processes == api[0] else f"qwen3-api{api_processes}"


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


def same_as_single_process(dep: Deployment, texts: list[str], api: tuple[int, ...]) -> dict[str, Any]:
    """The main worker's vectors against the one-ingest-process worker's, one request at a time."""
    main, single = model_name(api[0], api), model_name(1, api)
    diffs = []
    with httpx.Client(timeout=60) as client:
        for text in texts:
            got = []
            for model in (main, single):
                r = client.post(
                    dep.frontend_url + "/v1/embeddings",
                    json={"model": model, "input": text, "encoding_format": "base64"},
                )
                r.raise_for_status()
                got.append(decode_embedding(r.json()["data"][0]["embedding"]))
            diffs.append(float(np.max(np.abs(got[0] - got[1]))))
    return {"requests": len(texts), "identical": sum(d == 0 for d in diffs), "max_abs_diff": max(diffs)}


# -- the whole run -----------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=["qwen3-embedding-0.6b", "tiny"], default="qwen3-embedding-0.6b")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument(
        "--model-dir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "embedlab-qwen3-0.6b-shape"
    )
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "gpu_short_inputs.json")
    parser.add_argument(
        "--quick", action="store_true", help="short steps and a reduced matrix, for a dry run"
    )
    parser.add_argument("--profile", action="store_true", help="add the in-process engine profile")
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each load step")
    parser.add_argument(
        "--rounds", type=int, default=3, help="alternating sentence-transformers/served rounds"
    )
    parser.add_argument("--max-batch", type=int, default=512, help="the workers' --max-batch-size")
    parser.add_argument("--compile", choices=["on", "off"], default="on", help="torch.compile in the workers")
    parser.add_argument(
        "--api",
        default=",".join(map(str, API_PROCESSES)),
        help="--api-processes of each worker (comma-separated, 1 among them); the first is the main worker",
    )
    parser.add_argument(
        "--frontend-processes",
        type=int,
        default=FRONTEND_PROCESSES,
        help="the deployment frontend's --processes",
    )
    parser.add_argument("--skip", action="append", default=[], choices=["plain", "st", "parity", "extra"])
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    started = time.time()
    report: dict[str, Any] = {
        "machine": {"gpus": gpu_names(), "cpus": os.cpu_count(), "python": platform.python_version()},
        "command": " ".join(sys.argv),
    }
    try:
        import torch
        import transformers

        report["machine"].update(torch=torch.__version__, transformers=transformers.__version__)
    except ImportError:
        pass
    shape = None if args.shape == "tiny" else args.shape
    t = time.time()
    model_dir = build_tiny_model(
        "qwen3",
        args.model_dir if shape else args.model_dir.with_name(args.model_dir.name + "-tiny"),
        shape=shape,
    )
    config = json.loads((model_dir / "config.json").read_text())
    device0 = "cuda:0" if args.device == "cuda" else "cpu"
    max_id = min(5000, config["vocab_size"])
    seconds = 2.0 if args.quick else args.seconds
    count = 1024 if args.quick else 8192
    texts = {n: texts_of_length(model_dir, n, count, seed=n) for n in LENGTHS}
    api = tuple(int(n) for n in args.api.split(","))
    front = args.frontend_processes
    report["model"] = {"shape": args.shape, "build_s": time.time() - t, "dtype": args.dtype}
    report["setup"] = {
        "max_batch_size": args.max_batch,
        "max_batch_tokens": 256 * 128,
        "pipeline_min": PIPELINE_MIN,
        "compile": args.compile == "on",
        "api_processes": list(api),
        "frontend_processes": front,
        "inputs": "text of exactly 13 or 128 tokens, to the server and to sentence-transformers alike",
        "seconds_per_step": seconds,
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
                model_dir, device=device0, dtype=args.dtype, quick=args.quick, max_id=max_id
            ),
        )
    if "plain" not in args.skip:

        def plain() -> list[dict[str, float]]:
            import torch
            from transformers import AutoModel

            model = AutoModel.from_pretrained(model_dir, dtype=getattr(torch, args.dtype)).to(device0).eval()
            rows = []
            for tokens in LENGTHS:
                for batch in BATCHES:
                    rows.append(
                        plain_forward(
                            model,
                            device=device0,
                            batch=batch,
                            tokens=tokens,
                            seconds=1.0 if args.quick else 2.0,
                            vocab=max_id,
                        )
                    )
                    log(
                        f"  plain forward {tokens:>3} tokens, batch {batch:>4}: {rows[-1]['seq_per_s']:>9,.0f} seq/s"
                    )
            del model
            if device0.startswith("cuda"):
                torch.cuda.empty_cache()
            return rows

        report["plain_forward"] = stage("plain forward", plain)
    st: SentenceTransformers | None = None
    if "st" not in args.skip:
        st = stage(
            "sentence-transformers load",
            lambda: SentenceTransformers(
                model_dir, device=device0, dtype=args.dtype, dim=config["hidden_size"]
            ),
        )
        if st is not None:
            report["sentence_transformers"] = stage(
                "sentence-transformers",
                lambda: [
                    st.measure(texts[n][: max(4 * b, 2048 if n > 100 else 4096)], batch=b, tokens=n)  # type: ignore[union-attr]
                    for n in LENGTHS
                    for b in BATCHES
                ],
            )

    def served() -> dict[str, Any]:
        out: dict[str, Any] = {"rows": []}
        the_spec = spec(
            model_dir,
            device=args.device,
            dtype=args.dtype,
            compile_=args.compile == "on",
            max_batch=args.max_batch,
            api=api,
            frontend=front,
        )
        with Deployment(the_spec) as dep:
            main_url = dep.system_urls[0]
            info = health(main_url)["engine_info"]
            out["startup_s"] = dep.startup_seconds
            out["engine_info"] = {k: v for k, v in info.items() if k != "batching"}
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
                out["vs_single_process"] = same_as_single_process(dep, texts[13][:32] + texts[128][:32], api)
                log(f"  {api[0]} ingest processes vs 1: {out['vs_single_process']}")
            url = dep.frontend_url + "/v1/embeddings"

            def run(
                label: str,
                target: str,
                tokens: int,
                c: int,
                inputs: int,
                model: str = "qwen3",
                system: str = main_url,
                extra: dict[str, Any] | None = None,
            ) -> dict[str, Any]:
                bodies = text_bodies(model, texts[tokens], inputs=inputs, count=8)
                return step(
                    dep,
                    label=label,
                    url=target,
                    bodies=bodies,
                    tokens=tokens,
                    concurrency=c,
                    inputs=inputs,
                    seconds=seconds,
                    system_url=system,
                    extra=extra,
                )

            run("warm-up", url, 13, 64, 1)
            for tokens, c, inputs in QUICK_MATRIX[args.device] if args.quick else MATRIX:
                out["rows"].append(run(f"frontend x{front}, api x{api[0]}", url, tokens, c, inputs))
            short = [
                r
                for r in out["rows"]
                if r["tokens"] == 13 and r["inputs_per_request"] == 1 and r["concurrency"] > 1
            ]
            best_c = max(short, key=lambda r: r["seq_per_s"])["concurrency"]
            out["best_concurrency"] = best_c
            log(f"  best concurrency for 13 tokens x1: {best_c}")
            if "extra" not in args.skip:
                for i, n in enumerate(api[1:], start=1):
                    out["rows"].append(
                        run(
                            f"frontend x{front}, api x{n}",
                            url,
                            13,
                            best_c,
                            1,
                            model=model_name(n, api),
                            system=dep.system_urls[i],
                        )
                    )
                worker_url = health(main_url)["url"]
                out["rows"].append(
                    run(f"direct, api x{api[0]}", worker_url + "/v1/embeddings", 13, best_c, 1)
                )
                # c=1 controls: the single-process worker, and the main one past the frontend.
                if 1 in api:
                    out["rows"].append(
                        run(
                            f"frontend x{front}, api x1",
                            url,
                            13,
                            1,
                            1,
                            model=model_name(1, api),
                            system=dep.system_urls[api.index(1)],
                        )
                    )
                out["rows"].append(run(f"direct, api x{api[0]}", worker_url + "/v1/embeddings", 13, 1, 1))
                for k in EXTRA_FRONTENDS:
                    with ExtraFrontend(
                        dep, processes=k, worker_url=worker_url, model="qwen3", port=reserve_port("127.0.0.1")
                    ) as extra:
                        wait_listed(extra.url, "qwen3")
                        run(f"warm-up frontend x{k}", extra.url + "/v1/embeddings", 13, 64, 1)
                        out["rows"].append(
                            run(
                                f"frontend x{k}, api x{api[0]}",
                                extra.url + "/v1/embeddings",
                                13,
                                best_c,
                                1,
                                extra={f"frontend-x{k}": extra.proc},
                            )
                        )
            if st is not None:
                out["rounds"] = []
                for r in range(args.rounds):
                    refs = [st.measure(texts[13], batch=b, tokens=13) for b in ST_ROUND_BATCHES]
                    ref = max(refs, key=lambda x: x["seq_per_s"])
                    row = run(f"round {r + 1}", url, 13, best_c, 1)
                    out["rounds"].append(
                        {
                            "round": r + 1,
                            "sentence_transformers": refs,
                            "st_best_seq_per_s": ref["seq_per_s"],
                            "st_best_batch": ref["batch"],
                            "served": row,
                            "ratio": row["seq_per_s"] / ref["seq_per_s"],
                        }
                    )
                    log(
                        f"  round {r + 1}: served {row['seq_per_s']:,.0f} / ST {ref['seq_per_s']:,.0f} (batch {ref['batch']}) = {out['rounds'][-1]['ratio']:.2f}x"
                    )
            for name, path in dep.log_paths.items():
                if name.startswith("worker-0") or name == "frontend":
                    (args.out.parent / f"gpu-{name}.log").write_bytes(path.read_bytes()[-200_000:])
        return out

    report["served"] = stage("served", served)
    report["targets"] = targets(report, main=f"frontend x{front}, api x{api[0]}")
    for row in report["targets"]:
        log(
            f"  {row['target']:<34} goal {row['goal']:<10} measured {row['measured']}  {'met' if row['met'] else 'NOT met'}"
        )
    save()
    return 0


def targets(report: dict[str, Any], *, main: str) -> list[dict[str, Any]]:
    served = report.get("served") or {}
    rows = served.get("rows", [])
    ours = [r for r in rows if r["path"] == main]
    plain = report.get("plain_forward") or []
    out = []

    def add(target: str, goal: str, measured: float | None, met: bool | None, detail: str) -> None:
        out.append(
            {
                "target": target,
                "goal": goal,
                "measured": None if measured is None else round(measured, 3),
                "met": bool(met),
                "detail": detail,
            }
        )

    rounds = served.get("rounds") or []
    if rounds:
        ratios = [r["ratio"] for r in rounds]
        median = statistics.median(ratios)
        add(
            "13 tok, 1/request vs ST best",
            f">= {TARGETS['short_vs_sentence_transformers']}x",
            median,
            median >= TARGETS["short_vs_sentence_transformers"],
            f"median of {len(ratios)} alternating rounds, range {min(ratios):.2f}-{max(ratios):.2f}x; served "
            f"{statistics.median(r['served']['seq_per_s'] for r in rounds):,.0f} seq/s at c={served['best_concurrency']} vs ST "
            f"{statistics.median(r['st_best_seq_per_s'] for r in rounds):,.0f} (best batch of {', '.join(map(str, ST_ROUND_BATCHES))})",
        )
    c1 = [r for r in ours if r["tokens"] == 13 and r["concurrency"] == 1 and r["inputs_per_request"] == 1]
    if c1:
        p50 = c1[0]["p50_ms"]
        add(
            "c=1 p50, 13 tokens",
            f"<= {TARGETS['p50_ms_c1_13_tokens']} ms",
            p50,
            p50 <= TARGETS["p50_ms_c1_13_tokens"],
            "text, through the frontend, compiled",
        )
    long = [r for r in ours if r["tokens"] == 128]
    plain128 = [r for r in plain if r["tokens"] == 128]
    if long and plain128:
        best, ref = max(long, key=lambda r: r["seq_per_s"]), max(plain128, key=lambda r: r["seq_per_s"])
        ratio = best["seq_per_s"] / ref["seq_per_s"]
        add(
            "128 tok served vs plain forward",
            f">= {TARGETS['served_vs_plain_128_tokens']:.0%}",
            ratio,
            ratio >= TARGETS["served_vs_plain_128_tokens"],
            f"served {best['seq_per_s']:,.0f} seq/s (c={best['concurrency']} x{best['inputs_per_request']}) vs plain "
            f"{ref['seq_per_s']:,.0f} at batch {ref['batch']}",
        )
    return out


if __name__ == "__main__":
    sys.exit(main())
