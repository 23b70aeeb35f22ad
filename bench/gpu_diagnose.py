"""Where a served request's CPU goes on the GPU machine: py-spy profiles at saturation, and
what the frontend's routing processes spend per request with the GPU out of the way.

- `frontend`: N hash workers (one model) behind `embedlab frontend --processes 4`, so the
  routing processes are the bound: their CPU per request at c=768, 13-token texts, plus
  a py-spy profile of one routing process;
- `gpu`: the deployment of `gpu_serving.py` (compiled transformers worker, 6 ingest
  processes): 13 tokens x1 at c=768 with py-spy on a routing process, an ingest process
  and the engine process; 128 tokens x16 at c=64 for a short and a long step, with each
  step's batch histogram.

Diagnostics for issue 33, not a bench of record:

    python bench/gpu_diagnose.py --part frontend --part gpu --out DIR   # on the GPU machine
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from gpu_served import Bodies, log, roles, step, text_bodies  # noqa: E402

from embedlab import Deployment, DeploymentSpec, WorkerSpec  # noqa: E402


def profile(pid: int, seconds: float, path: Path) -> subprocess.Popen[bytes] | None:
    spy = shutil.which("py-spy")
    if spy is None:
        return None
    return subprocess.Popen(
        [spy, "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", "200"]
        + ["--format", "raw", "--output", str(path), "--nonblocking", "--function"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def summarize(path: Path, top: int = 45) -> str:
    """Self and inclusive sample shares per function of a py-spy raw (collapsed) profile."""
    if not path.exists():
        return f"{path.name}: no profile\n"
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        # thread name first in py-spy's raw output; keep function (file:line) parts
        own[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    out = [f"== {path.name}: {total} samples", "-- self"]
    out += [f"{100 * n / total:5.1f}%  {f}" for f, n in own.most_common(top)]
    out += ["-- inclusive"]
    out += [f"{100 * n / total:5.1f}%  {f}" for f, n in incl.most_common(top)]
    return "\n".join(out) + "\n"


def run_step(dep: Deployment, bodies: Bodies, **kw: Any) -> dict[str, Any]:
    row = step(dep, url=dep.frontend_url, bodies=bodies, frontend_processes=4, **kw)
    return {
        k: row[k]
        for k in (
            "path",
            "tokens",
            "concurrency",
            "inputs_per_request",
            "seq_per_s",
            "p50_ms",
            "mean_ms",
            "p99_ms",
            "mean_batch",
            "batch_histogram",
            "cpu",
            "machine_busy_cores",
            "gpu_busy",
        )
    }


def with_profiles(
    dep: Deployment, bodies: Bodies, targets: dict[str, int], out: Path, tag: str, **kw: Any
) -> dict[str, Any]:
    seconds = kw["seconds"]
    spies = {name: profile(pid, seconds - 1, out / f"{tag}-{name}.txt") for name, pid in targets.items()}
    row = run_step(dep, bodies, **kw)
    for name, spy in spies.items():
        if spy is not None:
            _, err = spy.communicate(timeout=60)
            if spy.returncode:
                log(f"  py-spy {name}: rc {spy.returncode}: {err.decode()[-300:]}")
    return row


def frontend_part(out: Path, hash_workers: int, seconds: float) -> dict[str, Any]:
    spec = DeploymentSpec(
        workers=tuple(
            WorkerSpec(model="hash", engine="hash", extra_args=("--dim", "1024")) for _ in range(hash_workers)
        ),
        frontend_args=("--processes", "4"),
    )
    tmp = Path(tempfile.mkdtemp(prefix="diag-"))
    texts = [f"alpha {i} beta {i * 7 % 1000} gamma {i % 97} delta" for i in range(200_000)]
    bodies = Bodies(tmp / "hash", text_bodies("hash", texts, inputs=1, count=len(texts)))
    rows = []
    try:
        with Deployment(spec) as dep:
            run_step(
                dep,
                bodies,
                label="warm-up",
                tokens=13,
                concurrency=768,
                inputs=1,
                seconds=1.5,
                system_url=None,
            )
            for _ in range(2):
                rows.append(
                    run_step(
                        dep,
                        bodies,
                        label=f"hash x{hash_workers}",
                        tokens=13,
                        concurrency=768,
                        inputs=1,
                        seconds=seconds,
                        system_url=None,
                    )
                )
            groups = roles(dep)
            targets = {"fe-owner": groups["frontend"][0], "fe-replica": groups["frontend routing"][0]}
            targets["hash-worker"] = groups["worker 0"][0]
            rows.append(
                with_profiles(
                    dep,
                    bodies,
                    targets,
                    out,
                    "hash",
                    label="profiled",
                    tokens=13,
                    concurrency=768,
                    inputs=1,
                    seconds=seconds,
                    system_url=None,
                )
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"rows": rows}


def gpu_part(out: Path, seconds: float) -> dict[str, Any]:
    import gpu_serving as gs

    from embedlab.engines.tiny import build_tiny_model

    model_dir = build_tiny_model(
        "qwen3", Path("/tmp/embedlab-qwen3-0.6b-shape"), shape="qwen3-embedding-0.6b"
    )
    texts = {n: gs.texts_of_length(model_dir, n, c, seed=n) for n, c in ((13, 100_000), (128, 20_000))}
    spec = gs.spec(
        model_dir, device="cuda", dtype="bfloat16", compile_=True, max_batch=512, api=6, frontend=4
    )
    tmp = Path(tempfile.mkdtemp(prefix="diag-"))
    bodies = {
        13: Bodies(tmp / "13", text_bodies("qwen3", texts[13], inputs=1, count=len(texts[13]))),
        128: Bodies(tmp / "128", text_bodies("qwen3", texts[128], inputs=16, count=len(texts[128]) // 16)),
    }
    rows = []
    try:
        with Deployment(spec) as dep:
            sys_url = dep.system_urls[0]
            run_step(
                dep,
                bodies[13],
                label="warm-up",
                tokens=13,
                concurrency=768,
                inputs=1,
                seconds=1.5,
                system_url=sys_url,
            )
            run_step(
                dep,
                bodies[128],
                label="warm-up",
                tokens=128,
                concurrency=64,
                inputs=16,
                seconds=1.5,
                system_url=sys_url,
            )
            groups = roles(dep)
            targets = {
                "fe-replica": groups["frontend routing"][0],
                "ingest": groups["worker 0 ingest"][0],
                "engine": groups["worker 0"][0],
            }
            rows.append(
                run_step(
                    dep,
                    bodies[13],
                    label="13x1",
                    tokens=13,
                    concurrency=768,
                    inputs=1,
                    seconds=seconds,
                    system_url=sys_url,
                )
            )
            rows.append(
                with_profiles(
                    dep,
                    bodies[13],
                    targets,
                    out,
                    "gpu13",
                    label="13x1 profiled",
                    tokens=13,
                    concurrency=768,
                    inputs=1,
                    seconds=seconds,
                    system_url=sys_url,
                )
            )
            for secs in (4.0, 12.0, 4.0):
                rows.append(
                    run_step(
                        dep,
                        bodies[128],
                        label=f"128x16 {secs:g}s",
                        tokens=128,
                        concurrency=64,
                        inputs=16,
                        seconds=secs,
                        system_url=sys_url,
                    )
                )
            rows.append(
                run_step(
                    dep,
                    bodies[128],
                    label="128x16 c=128",
                    tokens=128,
                    concurrency=128,
                    inputs=16,
                    seconds=4.0,
                    system_url=sys_url,
                )
            )
            rows.append(
                with_profiles(
                    dep,
                    bodies[128],
                    {"engine": targets["engine"]},
                    out,
                    "gpu128",
                    label="128x16 profiled",
                    tokens=128,
                    concurrency=64,
                    inputs=16,
                    seconds=seconds,
                    system_url=sys_url,
                )
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"rows": rows}


def engine_part(seconds: float) -> dict[str, Any]:
    """The served forward with and without the last layer at the pooled token only, against
    the compiled plain forward, in this process: back-to-back seq/s per bucket."""
    import gpu_serving as gs
    import torch
    from transformers import AutoModel

    from embedlab.engines.base import EngineOptions
    from embedlab.engines.tiny import build_tiny_model
    from embedlab.engines.transformers import TransformersEngine
    from embedlab.engines.transformers_tuning import compile_repeated_blocks

    model_dir = build_tiny_model(
        "qwen3", Path("/tmp/embedlab-qwen3-0.6b-shape"), shape="qwen3-embedding-0.6b"
    )
    out: dict[str, Any] = {}
    engines = {}
    for pruned in (True, False):
        engine = TransformersEngine(
            EngineOptions(
                model_path=model_dir,
                device="cuda:0",
                dtype="bfloat16",
                max_batch_size=512,
                max_batch_tokens=gs.MAX_BATCH_TOKENS,
                extra_args={"compile": True, "graph_widths": [16, 128], "last_token_only": pruned},
            )
        )
        engine._load()
        engines[pruned] = engine
        log(f"engine last_token_only={pruned}: info {engine.info.get('last_token_only')}")
    rng = np.random.default_rng(5)
    seqs = [rng.integers(10, 5000, int(n)).tolist() for n in rng.integers(1, 120, 64)]
    a = engines[True].bucket_vectors(seqs, rows=64, width=128)
    b = engines[False].bucket_vectors(seqs, rows=64, width=128)
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    out["pruned_vs_full_min_cosine"] = float(cos.min())
    log(f"pruned vs full, 64 mixed lengths: min cosine {cos.min():.6f}")
    for pruned, engine in engines.items():
        replay = gs.Replay.__new__(gs.Replay)
        replay.engine, replay.rng, replay.max_id = engine, np.random.default_rng(1), 5000
        rows = {13: (64, 128, 192, 256, 512), 128: (128, 256)}
        res = {}
        for tokens, rs in rows.items():
            for r in rs:
                res[f"{r}x{tokens}"] = r / replay.per_forward(r, tokens, seconds)
        out[f"replay_last_token_only_{pruned}"] = res
        log(f"replay last_token_only={pruned}: " + ", ".join(f"{k}: {v:,.0f}" for k, v in res.items()))
    del engines
    torch.cuda.empty_cache()
    model = AutoModel.from_pretrained(model_dir, dtype=torch.bfloat16).to("cuda:0").eval()
    compile_repeated_blocks(model)
    plain = {}
    for tokens, batches in ((128, (256, 512, 1024)), (13, (256, 1024))):
        for batch in batches:
            plain[f"{batch}x{tokens}"] = gs.plain_forward(
                model, device="cuda:0", batch=batch, tokens=tokens, seconds=1.5, vocab=5000
            )["seq_per_s"]
    out["plain_compiled"] = plain
    log("plain compiled: " + ", ".join(f"{k}: {v:,.0f}" for k, v in plain.items()))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", action="append", choices=["frontend", "gpu", "engine"], default=[])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--hash-workers", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"started": time.time()}
    prof_dir = Path(tempfile.mkdtemp(prefix="spy-"))
    if "frontend" in args.part:
        report["frontend"] = frontend_part(prof_dir, args.hash_workers, args.seconds)
    if "gpu" in args.part:
        report["gpu"] = gpu_part(prof_dir, args.seconds)
    if "engine" in args.part:
        report["engine"] = engine_part(min(args.seconds, 1.0))
    summary = "".join(summarize(p) for p in sorted(prof_dir.glob("*.txt")))
    (args.out / f"profiles{args.tag}.txt").write_text(summary)
    (args.out / f"diagnose{args.tag}.json").write_text(json.dumps(report, indent=1, default=str))
    for part in ("frontend", "gpu"):
        for row in (report.get(part) or {}).get("rows", []):
            cpu = row["cpu"]
            fe = sum(cpu.get(k, {}).get("ms_per_request", 0) for k in ("frontend", "frontend routing"))
            ing = (cpu.get("worker 0 ingest") or {}).get("ms_per_request", 0)
            log(
                f"{part:8} {row['path']:<16} {row['tokens']:>3} c={row['concurrency']:<4} x{row['inputs_per_request']:<2} "
                f"{row['seq_per_s']:>9,.0f} seq/s  p99/mean {row['p99_ms'] / row['mean_ms']:.2f}  batch {row['mean_batch']:.0f}  "
                f"frontend {fe:.3f} ms/req ({[round(x, 2) for x in cpu.get('frontend routing', {}).get('each_process_cores', [])]} "
                f"+ {cpu.get('frontend', {}).get('cores', 0):.2f})  ingest {ing:.3f} ms/req  machine {row['machine_busy_cores']:.1f}"
            )
            if row["tokens"] == 128:
                log(f"         histogram {row['batch_histogram']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
