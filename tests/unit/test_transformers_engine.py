"""The transformers engine's pooling equals a direct, unpadded forward of the same model."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from embedlab.engines import EngineOptions, InvalidInput, check_dimensions, create_engine

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TEXTS = ["a short one", "a somewhat longer sentence about routing embeddings across workers", "mid length text here"]


def direct(model_dir: Path, text: str, pooling: str) -> np.ndarray:
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    model = transformers.AutoModel.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = tokenizer(text, return_tensors="pt")
    with torch.inference_mode():
        hidden = model(**ids).last_hidden_state[0]
    vector = hidden.mean(dim=0) if pooling == "mean" else hidden[-1]
    return torch.nn.functional.normalize(vector, dim=-1).numpy()


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


def test_qwen3_tokenizer_appends_endoftext(tiny_models: dict[str, Path]) -> None:
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_models["qwen3"])
    ids = tokenizer("hello")["input_ids"]
    assert ids[-1] == tokenizer.convert_tokens_to_ids("<|endoftext|>")


def test_dimensions_and_length_are_client_errors(tiny_models: dict[str, Path]) -> None:
    async def run() -> None:
        engine = create_engine("transformers", EngineOptions(model_path=tiny_models["bert"], device="cpu", max_model_len=8))
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
