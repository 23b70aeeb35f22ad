"""Serving a Qwen3-Embedding-0.6B-shaped model on GPUs: both scenarios, then load.

Measured in one call, side by side:
- a plain batched forward (batch 64 x 128 tokens, bf16): the reference throughput;
- two transformers workers (one per GPU) behind the embedded frontend: both scenarios,
  then 128-token inputs at several concurrencies and inputs per request;
- one worker behind the frontend at the best setting, for the 2-worker scaling ratio.

    python bench/gpu_serving.py --out bench/results/gpu_h200x2.json           # on the GPU machine
    python bench/gpu_serving.py --shape tiny --device cpu --quick             # a CPU dry run
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from loadgen import body_for, run_load  # noqa: E402

from embedlab import Deployment, DeploymentSpec, WorkerSpec, multi_model_dispatch, same_model_load_balance  # noqa: E402
from embedlab.engines.tiny import build_tiny_model  # noqa: E402

TOKENS = 128


def plain_forward(model_dir: Path, *, device: str, dtype: str, batch: int, tokens: int, seconds: float = 5.0) -> dict[str, float]:
    """Tokens per second of a bare batched forward: the ceiling a server can approach."""
    import torch
    from transformers import AutoModel

    torch_dtype = getattr(torch, dtype)
    model = AutoModel.from_pretrained(model_dir, dtype=torch_dtype).to(device).eval()
    ids = torch.randint(10, min(5000, model.config.vocab_size), (batch, tokens), device=device)
    mask = torch.ones_like(ids)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    with torch.inference_mode():
        for _ in range(3):
            model(input_ids=ids, attention_mask=mask)
        sync()
        n = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            model(input_ids=ids, attention_mask=mask)
            n += 1
        sync()
        elapsed = time.perf_counter() - start
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return {"batch": batch, "tokens": tokens, "forwards": n, "tokens_per_s": n * batch * tokens / elapsed}


def reference_vector(model_dir: Path, ids: list[int], *, device: str, dtype: str) -> "list[float]":
    """LAST-pooled, normalised vector of one sequence by a direct forward, to check what is served."""
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(model_dir, dtype=getattr(torch, dtype)).to(device).eval()
    with torch.inference_mode():
        hidden = model(input_ids=torch.tensor([ids], device=device)).last_hidden_state[0, -1].float()
    vector = torch.nn.functional.normalize(hidden, dim=-1).cpu().tolist()
    del model
    return vector


def served_vector(url: str, model: str, ids: list[int]) -> "list[float]":
    import httpx

    body = httpx.post(url + "/v1/embeddings", json={"model": model, "input": [ids]}, timeout=120).json()
    return body["data"][0]["embedding"]


def gpu_names() -> list[str]:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
        return [l.strip() for l in out.stdout.splitlines() if l.strip()]
    except (OSError, subprocess.SubprocessError):
        return []


def spec(model_dir: Path, names: list[str], *, device: str, dtype: str, max_batch: int) -> DeploymentSpec:
    args = ("--dtype", dtype, "--max-batch-size", str(max_batch), "--max-batch-tokens", str(max_batch * TOKENS), "--batch-wait-ms", "2")
    workers = tuple(
        WorkerSpec(model=name, engine="transformers", model_path=model_dir, device=None if device == "cuda" else "cpu", extra_args=args)
        for name in names
    )
    return DeploymentSpec(workers=workers, startup_timeout=600)


def load_matrix(dep: Deployment, model: str, settings: list[tuple[int, int]], requests_for: int, max_id: int) -> list[dict[str, float]]:
    rows = []
    for concurrency, inputs in settings:
        body = body_for(model, inputs=inputs, tokens=TOKENS, text="", base64=True, seed=concurrency, max_id=max_id)
        # Enough requests to reach steady state, but a c=1 run need not take minutes.
        n = max(concurrency * 4, min(requests_for // inputs, 150 * concurrency))
        result = run_load(dep.frontend_url + "/v1/embeddings", body, requests=n, concurrency=concurrency, inputs_per_request=inputs,
                          processes=min(8, concurrency))
        row = {"concurrency": concurrency, "inputs_per_request": inputs, "requests": result.requests, "failed": result.failed,
               "rps": result.rps, "p50_ms": result.p50_ms, "p99_ms": result.p99_ms,
               "tokens_per_s": result.inputs_per_second * TOKENS}
        print(f"  c={concurrency:<4} inputs={inputs:<3} {result.row()}  {row['tokens_per_s']:,.0f} tok/s", flush=True)
        rows.append(row)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=["qwen3-embedding-0.6b", "tiny"], default="qwen3-embedding-0.6b")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--model-dir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "embedlab-qwen3-0.6b-shape")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "gpu_serving.json")
    parser.add_argument("--quick", action="store_true", help="small numbers, for a dry run")
    parser.add_argument("--max-batch", type=int, default=256, help="the workers' largest dynamic batch (sequences)")
    args = parser.parse_args()
    started = time.time()
    report: dict[str, object] = {"machine": {"gpus": gpu_names(), "cpus": os.cpu_count(), "python": platform.python_version()}}
    shape = None if args.shape == "tiny" else args.shape
    t = time.time()
    model_dir = build_tiny_model("qwen3", args.model_dir, shape=shape)
    report["model"] = {"shape": args.shape, "dir": str(model_dir), "build_s": time.time() - t, "dtype": args.dtype}
    device0 = "cuda:0" if args.device == "cuda" else "cpu"
    max_id = min(5000, json.loads((model_dir / "config.json").read_text())["vocab_size"])
    reference = plain_forward(model_dir, device=device0, dtype=args.dtype, batch=64, tokens=TOKENS, seconds=2 if args.quick else 6)
    report["plain_forward"] = reference
    print(f"plain forward, batch 64 x {TOKENS}: {reference['tokens_per_s']:,.0f} tokens/s", flush=True)

    requests_for = 256 if args.quick else 4096
    # (concurrency, inputs per request). Saturating a GPU at batch 256 takes about four
    # batches of sequences in flight per worker.
    settings = [(1, 1), (8, 1)] if args.quick else [(1, 1), (32, 1), (128, 1), (32, 8), (128, 8), (32, 32), (64, 32), (128, 16)]
    with Deployment(spec(model_dir, ["qwen3-a", "qwen3-b"], device=args.device, dtype=args.dtype, max_batch=args.max_batch)) as dep:
        report["startup_s_two_models"] = dep.startup_seconds
        multi = multi_model_dispatch(dep, requests_per_burst=10)
        print(multi.summary(), flush=True)
    with Deployment(spec(model_dir, ["qwen3", "qwen3"], device=args.device, dtype=args.dtype, max_batch=args.max_batch)) as dep:
        report["startup_s"] = dep.startup_seconds
        same = same_model_load_balance(dep)
        print(same.summary(), flush=True)
        import numpy as np

        probe = list(range(10, 10 + TOKENS))
        got = np.array(served_vector(dep.frontend_url, "qwen3", probe))
        want = np.array(reference_vector(model_dir, probe, device=device0, dtype=args.dtype))
        cosine = float(got @ want / (np.linalg.norm(got) * np.linalg.norm(want)))
        report["served_vs_direct_cosine"] = cosine
        print(f"served vector vs direct forward: cosine {cosine:.5f}", flush=True)
        report["scenarios"] = {"same_model": same.to_json(), "multi_model": multi.to_json()}
        print("two workers behind the frontend:", flush=True)
        two = load_matrix(dep, "qwen3", settings, requests_for, max_id)
    best = max(two, key=lambda r: r["tokens_per_s"])
    with Deployment(spec(model_dir, ["qwen3"], device=args.device, dtype=args.dtype, max_batch=args.max_batch)) as dep:
        print("one worker behind the frontend:", flush=True)
        one = load_matrix(dep, "qwen3", [(best["concurrency"] // 2 or 1, best["inputs_per_request"]), (best["concurrency"], best["inputs_per_request"])], requests_for // 2, max_id)
    one_best = max(one, key=lambda r: r["tokens_per_s"])
    per_gpu = best["tokens_per_s"] / 2
    report["load_two_workers"] = two
    report["load_one_worker"] = one
    report["summary"] = {
        "plain_forward_tokens_per_s": reference["tokens_per_s"],
        "served_tokens_per_s_two_workers": best["tokens_per_s"],
        "served_per_gpu_over_plain": per_gpu / reference["tokens_per_s"],
        "one_worker_tokens_per_s": one_best["tokens_per_s"],
        "two_over_one": best["tokens_per_s"] / one_best["tokens_per_s"],
        "p50_ms_at_c1": next(r["p50_ms"] for r in two if r["concurrency"] == 1 and r["inputs_per_request"] == 1),
        "scenarios_passed": same.passed and multi.passed,
        "served_vs_direct_cosine": report["served_vs_direct_cosine"],
        "wall_s": time.time() - started,
    }
    print(json.dumps(report["summary"], indent=2), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str))
    return 0 if report["summary"]["scenarios_passed"] else 1  # type: ignore[index]


if __name__ == "__main__":
    sys.exit(main())
