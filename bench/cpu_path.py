"""The transformers engine on CPU, this tree against a baseline tree, side by side.

CUDA graphs, pinned buffers and compile never run on CPU; this checks that the CPU path
(batcher, padding, mask-free attention inputs) is no slower than the baseline's. Each
measurement runs in a fresh interpreter with PYTHONPATH set to one tree, the trees
alternating, and the median of the rounds is kept.

    git archive main embedlab | tar -x -C /tmp/embedlab-main
    python bench/cpu_path.py --baseline /tmp/embedlab-main [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# (name, arch, concurrency, inputs per request, tokens per input, requests)
CASES = (
    ("bert c=1", "bert", 1, 1, 12, 300),
    ("bert c=32", "bert", 32, 1, 12, 1500),
    ("qwen3 c=1", "qwen3", 1, 1, 12, 300),
    ("qwen3 c=32", "qwen3", 32, 1, 12, 1500),
    ("qwen3 c=32 mixed lengths", "qwen3", 32, 1, 0, 1500),
    ("qwen3 c=4 x16", "qwen3", 4, 16, 48, 200),
)

CHILD = r"""
import asyncio, json, sys, time
import embedlab
assert embedlab.__file__.startswith(sys.argv[7]), (embedlab.__file__, sys.argv[7])
import numpy as np
from embedlab.engines import EngineOptions, create_engine
from embedlab.engines.tiny import cached_tiny_model

arch, concurrency, inputs, tokens, requests, cache = sys.argv[1], *map(int, sys.argv[2:6]), sys.argv[6]
model = cached_tiny_model(arch, cache_dir=cache)

async def main():
    engine = create_engine("transformers", EngineOptions(model_path=model, device="cpu"))
    await engine.start()
    rng = np.random.default_rng(0)
    def body():
        return [rng.integers(10, 200, tokens or int(rng.integers(4, 120))).tolist() for _ in range(inputs)]
    bodies = [body() for _ in range(requests)]
    for b in bodies[:20]:
        await engine.embed(b)
    latencies, next_index = [], 0
    async def lane():
        nonlocal next_index
        while next_index < requests:
            b = bodies[next_index]; next_index += 1
            t = time.perf_counter(); await engine.embed(b); latencies.append(time.perf_counter() - t)
    start = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(concurrency)))
    elapsed = time.perf_counter() - start
    await engine.close()
    print(json.dumps({"seq_per_s": requests * inputs / elapsed, "p50_ms": 1000 * float(np.median(latencies))}))

asyncio.run(main())
"""


def measure(tree: Path, case: tuple[str, str, int, int, int, int], cache: str) -> dict[str, float]:
    _, arch, concurrency, inputs, tokens, requests = case
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            arch,
            str(concurrency),
            str(inputs),
            str(tokens),
            str(requests),
            cache,
            str(tree),
        ],
        # cwd is the tree too: `python -c` puts the working directory first on sys.path.
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--baseline", type=Path, required=True, help="a tree holding the baseline's embedlab/"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--cache", default=os.environ.get("EMBEDLAB_TEST_MODEL_CACHE", "/tmp/embedlab-cpu-path-models")
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    trees = {"baseline": args.baseline.resolve(), "this": REPO}
    rows = []
    for case in CASES:
        runs: dict[str, list[dict[str, float]]] = {"baseline": [], "this": []}
        for _ in range(args.rounds):
            for name, tree in trees.items():
                runs[name].append(measure(tree, case, args.cache))
        row = {"case": case[0]}
        for name in trees:
            row[f"{name}_seq_per_s"] = statistics.median(r["seq_per_s"] for r in runs[name])
            row[f"{name}_p50_ms"] = statistics.median(r["p50_ms"] for r in runs[name])
        row["throughput_ratio"] = row["this_seq_per_s"] / row["baseline_seq_per_s"]
        rows.append(row)
        print(
            f"{row['case']:<26} baseline {row['baseline_seq_per_s']:>8,.0f} seq/s p50 {row['baseline_p50_ms']:6.2f} ms | "
            f"this {row['this_seq_per_s']:>8,.0f} seq/s p50 {row['this_p50_ms']:6.2f} ms | {row['throughput_ratio']:.2f}x",
            flush=True,
        )
    if args.out:
        from embedlab.jsonio import write_text_atomic

        write_text_atomic(args.out, json.dumps({"rounds": args.rounds, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
