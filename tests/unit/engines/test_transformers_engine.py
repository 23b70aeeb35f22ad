"""The transformers engine's vectors equal a direct, unpadded forward of the same model.

Every padding a served batch can get is covered on CPU: padding to the longest sequence
(the CPU path), and padding rows and columns to each (rows, width) bucket a CUDA worker
captures as a graph, which runs the same device function the graph replays.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from embedlab.engines import EngineOptions, InvalidInput, check_dimensions, create_engine
from embedlab.errors import EngineError

from ...requires import missing

try:
    import torch
    import transformers
except ImportError as exc:  # the `torch` extra, which `make test` installs
    missing(exc.name or "torch", f"{exc.name} does not import: the `torch` extra brings it ({exc})")

from embedlab.engines.cuda_graphs import GRAPH_WIDTHS, graph_shapes  # noqa: E402
from embedlab.engines.transformers import TransformersEngine, TransformersTuning  # noqa: E402

TEXTS = [
    "a short one",
    "a somewhat longer sentence about routing embeddings across workers",
    "mid length text here",
]


def direct(model_dir: Path, text: str, pooling: str) -> np.ndarray:
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    model = transformers.AutoModel.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = tokenizer(text, return_tensors="pt")
    with torch.inference_mode():
        hidden = model(**ids).last_hidden_state[0]
    vector = hidden.mean(dim=0) if pooling == "mean" else hidden[-1]
    return torch.nn.functional.normalize(vector, dim=-1).numpy()


def direct_ids(model: object, seqs: list[list[int]], pooling: str) -> np.ndarray:
    """One unpadded forward per sequence: the reference every served vector must match."""
    out = []
    with torch.inference_mode():
        for seq in seqs:
            hidden = model(input_ids=torch.tensor([seq])).last_hidden_state[0].float()  # type: ignore[operator]
            vector = {"mean": hidden.mean(dim=0), "last": hidden[-1], "cls": hidden[0]}[pooling]
            out.append(torch.nn.functional.normalize(vector, dim=-1).numpy())
    return np.stack(out)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


async def served(model_dir: Path, texts: list[str], **options: object) -> np.ndarray:
    engine = create_engine("transformers", EngineOptions(model_path=model_dir, device="cpu", **options))  # type: ignore[arg-type]
    await engine.start()
    try:
        # Concurrent requests, so they share one padded batch.
        results = await asyncio.gather(*(engine.embed([t]) for t in texts))
    finally:
        await engine.close()
    return np.concatenate([r.vectors for r in results])


@pytest.mark.parametrize("arch,pooling", [("bert", "mean"), ("qwen3", "last")])
def test_pooling_matches_direct_forward(tiny_models: dict[str, Path], arch: str, pooling: str) -> None:
    model_dir = tiny_models[arch]
    got = asyncio.run(served(model_dir, TEXTS))  # pooling from the model's marker
    want = np.stack([direct(model_dir, t, pooling) for t in TEXTS])
    np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("arch,attention", [("bert", "key_padding"), ("qwen3", "causal")])
def test_attention_inputs_are_our_own(tiny_models: dict[str, Path], arch: str, attention: str) -> None:
    """Both tiny models take the mask-free path, not transformers' syncing mask code."""

    async def run() -> str:
        engine = create_engine("transformers", EngineOptions(model_path=tiny_models[arch], device="cpu"))
        await engine.start()
        try:
            return engine.attention  # type: ignore[attr-defined,no-any-return]
        finally:
            await engine.close()

    assert asyncio.run(run()) == attention


@pytest.mark.parametrize(
    "arch,pooling,dtype,floor",
    [
        ("qwen3", "last", "float32", 0.99999),
        ("bert", "mean", "float32", 0.99999),
        ("bert", "cls", "float32", 0.99999),
        ("qwen3", "mean", "float32", 0.99999),
        ("qwen3", "last", "bfloat16", 0.9999),
    ],
)
def test_every_graph_bucket_matches_direct_forward(
    tiny_models: dict[str, Path], arch: str, pooling: str, dtype: str, floor: float
) -> None:
    """Each (rows, width) bucket, filled with sequences of mixed lengths and padded in both
    directions, gives the vectors of one unpadded forward per sequence."""
    model_dir = tiny_models[arch]
    options = EngineOptions(
        model_path=model_dir,
        device="cpu",
        dtype=dtype,
        pooling=pooling,
        max_batch_size=32,
        max_batch_tokens=2048,
    )
    engine = TransformersEngine(options)
    engine._load()
    model = transformers.AutoModel.from_pretrained(model_dir, dtype=getattr(torch, dtype)).eval()
    shapes = graph_shapes(
        max_batch_size=32, max_batch_tokens=2048, widths=GRAPH_WIDTHS, max_model_len=engine.max_model_len
    )
    assert {w for _, w in shapes} == {w for w in GRAPH_WIDTHS if w <= engine.max_model_len}
    rng = np.random.default_rng(0)
    previous: dict[int, int] = {}
    for rows, width in shapes:
        # The batches that land in this bucket: more rows than the bucket below it holds,
        # and a longest sequence longer than the width below (one sequence fills the width).
        count = int(rng.integers(previous.get(width, 0) + 1, rows + 1))
        previous[width] = rows
        narrower = max([w for w in GRAPH_WIDTHS if w < width], default=0)
        lengths = rng.integers(1, width + 1, count)
        lengths[0] = int(rng.integers(narrower + 1, width + 1))
        seqs = [rng.integers(10, engine._vocab_size, n).tolist() for n in lengths]
        got = engine.bucket_vectors(seqs, rows=rows, width=width)
        want = direct_ids(model, seqs, pooling)
        worst = cosines(got, want).min()
        assert worst >= floor, f"bucket ({rows}, {width}): cosine {worst:.6f} < {floor}"


@pytest.mark.parametrize(
    "arch,pooling,extra,pruned",
    [
        ("qwen3", "last", {}, True),
        ("qwen3", "last", {"last_token_only": False}, False),
        ("qwen3", "mean", {}, False),  # mean reads every position of the last layer
        ("bert", "cls", {}, False),  # bidirectional: every position sees every other
    ],
)
def test_last_layer_runs_at_the_pooled_token_only_where_that_is_exact(
    tiny_models: dict[str, Path], arch: str, pooling: str, extra: dict[str, object], pruned: bool
) -> None:
    """The pruned last layer is used exactly where LAST pooling on a causal model reads one
    position, and there its vectors match the full layer's across a padded batch."""
    options = EngineOptions(model_path=tiny_models[arch], device="cpu", pooling=pooling, extra_args=extra)
    engine = TransformersEngine(options)
    engine._load()
    assert engine.info["last_token_only"] is pruned
    assert (
        (type(engine._model.layers[-1]).__name__ == "LastTokenLayer") is pruned if arch == "qwen3" else True
    )
    if not pruned:
        return
    full = TransformersEngine(
        EngineOptions(
            model_path=tiny_models[arch], device="cpu", pooling=pooling, extra_args={"last_token_only": False}
        )
    )
    full._load()
    rng = np.random.default_rng(3)
    seqs = [rng.integers(10, engine._vocab_size, int(n)).tolist() for n in rng.integers(1, 60, 9)]
    got = engine.bucket_vectors(seqs, rows=16, width=64)
    want = full.bucket_vectors(seqs, rows=16, width=64)
    assert cosines(got, want).min() >= 0.99999


def test_served_batches_of_mixed_lengths_match_direct_forward(tiny_models: dict[str, Path]) -> None:
    """Through embed(): requests of many lengths and sizes batched together, some split."""
    model_dir = tiny_models["qwen3"]
    rng = np.random.default_rng(1)
    requests = [
        [rng.integers(10, 200, int(n)).tolist() for n in rng.integers(1, 90, int(k))]
        for k in rng.integers(1, 12, 24)
    ]

    async def run() -> list[np.ndarray]:
        engine = create_engine(
            "transformers",
            EngineOptions(model_path=model_dir, device="cpu", max_batch_size=8, max_batch_tokens=512),
        )
        await engine.start()
        try:
            results = await asyncio.gather(*(engine.embed(r) for r in requests))
            stats = engine.describe()["batching"]  # type: ignore[attr-defined]
        finally:
            await engine.close()
        assert stats["sequences"] == sum(len(r) for r in requests)
        assert max(int(k) for k in stats["batch_sizes"]) <= 8
        return [r.vectors for r in results]

    got = asyncio.run(run())
    model = transformers.AutoModel.from_pretrained(model_dir, dtype=torch.float32).eval()
    for vectors, request in zip(got, requests):
        assert vectors.shape[0] == len(request)
        assert cosines(vectors, direct_ids(model, request, "last")).min() >= 0.99999


def test_tuning_flags_are_checked() -> None:
    assert TransformersTuning.parse({"compile": "true", "graph_widths": [32, 16]}) == TransformersTuning(
        compile=True, graph_widths=(16, 32)
    )
    with pytest.raises(EngineError, match="unknown --engine-arg"):
        TransformersTuning.parse({"cuda_graph": True})
    with pytest.raises(EngineError, match="graph_widths"):
        TransformersTuning.parse({"graph_widths": [0]})
    with pytest.raises(EngineError, match="true or false"):
        TransformersTuning.parse({"cuda_graphs": "maybe"})
    assert TransformersTuning.parse({"last_token_only": "false"}).last_token_only is False
    assert TransformersTuning.parse({}).last_token_only is True


def test_graph_shapes_stay_within_the_token_budget() -> None:
    shapes = graph_shapes(
        max_batch_size=256, max_batch_tokens=32768, widths=GRAPH_WIDTHS, max_model_len=32768
    )
    assert (256, 16) in shapes and (256, 128) in shapes and (64, 512) in shapes
    assert all(r * w <= 32768 for r, w in shapes)
    assert max(r for r, w in shapes if w == 512) == 64
    assert shapes == sorted(shapes, key=lambda s: (s[0] * s[1], s[1]))


def test_qwen3_tokenizer_appends_endoftext(tiny_models: dict[str, Path]) -> None:
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_models["qwen3"])
    ids = tokenizer("hello")["input_ids"]
    assert ids[-1] == tokenizer.convert_tokens_to_ids("<|endoftext|>")


def test_dimensions_and_length_are_client_errors(tiny_models: dict[str, Path]) -> None:
    async def run() -> None:
        engine = create_engine(
            "transformers", EngineOptions(model_path=tiny_models["bert"], device="cpu", max_model_len=8)
        )
        await engine.start()
        try:
            # Refused where requests enter the engine (the workers' handlers), not in embed().
            with pytest.raises(InvalidInput, match="does not support 'dimensions'") as refused:
                check_dimensions(engine, 8)
            assert (refused.value.param, refused.value.code) == ("dimensions", "unsupported_parameter")
            with pytest.raises(InvalidInput, match="maximum of 8"):
                await engine.embed(["word " * 20])
            with pytest.raises(InvalidInput, match="vocabulary"):
                await engine.embed([[10**9]])
        finally:
            await engine.close()

    asyncio.run(run())
