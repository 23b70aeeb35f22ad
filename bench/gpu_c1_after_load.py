"""Diagnosis: c=1 latency of multi-process workers before and after a saturating load.

Three compiled transformers workers on one GPU, each reached directly: 6 ingest processes
with `pipeline_min=64` ("pm"), 6 without ("nopm"), and 1 process with it ("pm1"). Each is
probed at c=1 twice, then "pm" alone takes 3 s at c=512, then all three are probed again.
Prints one line per probe (no JSON); `docs/benchmarks.md` quotes the result.

    python bench/gpu_c1_after_load.py          # on the GPU machine, hey on the PATH
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import httpx  # noqa: E402
from gpu_serving import texts_of_length  # noqa: E402

from embedlab import Deployment, DeploymentSpec, WorkerSpec  # noqa: E402
from embedlab.engines.tiny import build_tiny_model  # noqa: E402

BASE = ("--dtype", "bfloat16", "--max-batch-size", "512", "--max-batch-tokens", "32768")
BASE += ("--engine-arg", "compile=true")
PIPELINE = ("--engine-arg", "pipeline_min=64")


def hey(url: str, body: str, concurrency: int, seconds: float) -> str:
    argv = ["hey", "-z", f"{seconds:g}s", "-c", str(concurrency), "-m", "POST", "-T", "application/json"]
    out = subprocess.run([*argv, "-d", body, url], capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    rps = float(next(x for x in lines if "Requests/sec" in x).split()[-1])
    p50, p90 = (float(next(x for x in lines if f"{q}%" in x).split()[2]) for q in (50, 90))
    return f"rps {rps:8.0f}  p50 {1000 * p50:5.1f} ms  p90 {1000 * p90:5.1f} ms"


def main() -> int:
    model = build_tiny_model("qwen3", Path("/tmp/embedlab-qwen3-0.6b-shape"), shape="qwen3-embedding-0.6b")
    workers = (
        WorkerSpec(
            model="pm",
            engine="transformers",
            model_path=model,
            extra_args=(*BASE, *PIPELINE, "--api-processes", "6"),
        ),
        WorkerSpec(
            model="nopm", engine="transformers", model_path=model, extra_args=(*BASE, "--api-processes", "6")
        ),
        WorkerSpec(
            model="pm1",
            engine="transformers",
            model_path=model,
            extra_args=(*BASE, *PIPELINE, "--api-processes", "1"),
        ),
    )
    text = texts_of_length(model, 13, 4, 13)[0]
    with Deployment(DeploymentSpec(workers=workers, startup_timeout=900)) as dep:
        urls = {
            w.model: httpx.get(u + "/health").json()["url"] + "/v1/embeddings"
            for w, u in zip(workers, dep.system_urls)
        }
        bodies = {m: json.dumps({"model": m, "input": text, "encoding_format": "base64"}) for m in urls}
        for m in urls:
            hey(urls[m], bodies[m], 64, 2)  # warm-up
        for r in range(2):
            for m in urls:
                print(f"round {r} {m:5} c=1 {hey(urls[m], bodies[m], 1, 3)}", flush=True)
        print("after c=512 on pm:", hey(urls["pm"], bodies["pm"], 512, 3), flush=True)
        for m in urls:
            print(f"again {m:5} c=1 {hey(urls[m], bodies[m], 1, 3)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
