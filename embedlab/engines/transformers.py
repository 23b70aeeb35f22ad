"""A real model from a local directory through torch: AutoModel + AutoTokenizer + pooling."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..errors import EngineError
from .base import POOLINGS, Embeddings, EngineOptions, InvalidInput, check_length, model_dir
from .batching import Deferred, DynamicBatcher
from .tiny import default_pooling

if TYPE_CHECKING:
    import torch

log = logging.getLogger("embedlab.engines.transformers")


def pool(hidden: "torch.Tensor", mask: "torch.Tensor", pooling: str) -> "torch.Tensor":
    """Pool right-padded hidden states [batch, seq, dim] with their attention mask."""
    import torch

    if pooling == "cls":
        return hidden[:, 0]
    if pooling == "last":
        last = mask.sum(dim=1) - 1
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
    weights = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)


class TransformersEngine:
    name = "transformers"
    supports_dimensions = False

    def __init__(self, options: EngineOptions) -> None:
        if options.model_path is None:
            raise EngineError("the transformers engine needs --model-path DIR (a local model directory)")
        self.options = options
        self.model_path = Path(options.model_path)
        self.pooling = (options.pooling or default_pooling(self.model_path)).lower()
        if self.pooling not in POOLINGS:
            raise EngineError(f"unsupported pooling {options.pooling!r}; choose from {', '.join(POOLINGS)}")
        self.dim = 0
        self.max_model_len = 0
        self._model: Any = None
        self._tokenizer: Any = None
        self._device: Any = None
        self._pad_id = 0
        self._vocab_size = 0
        self._batcher: DynamicBatcher | None = None

    async def start(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._load)
        self._batcher = DynamicBatcher(
            self._forward,
            max_batch_size=self.options.max_batch_size,
            max_batch_tokens=self.options.max_batch_tokens,
            wait_ms=self.options.batch_wait_ms,
        )
        self._batcher.start()

    def _load(self) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        model_dir(self.model_path)
        device = self.options.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise EngineError("--device cuda was asked for, but torch sees no CUDA device")
        dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[self.options.dtype]
        try:
            self._tokenizer = AutoTokenizer.from_pretrained(self.model_path)
            model = AutoModel.from_pretrained(self.model_path, dtype=dtype)
        except (OSError, ValueError, KeyError) as exc:
            raise EngineError(f"could not load the model in {self.model_path}: {exc}") from exc
        self._device = torch.device(device)
        self._model = model.to(self._device).eval()
        config = model.config
        self.dim = int(getattr(config, "hidden_size"))
        self._vocab_size = int(getattr(config, "vocab_size"))
        limit = int(getattr(config, "max_position_embeddings", 512) or 512)
        self.max_model_len = min(self.options.max_model_len or limit, limit)
        pad = self._tokenizer.pad_token_id
        self._pad_id = int(pad if pad is not None else 0)
        log.info(
            "loaded %s: dim %d, pooling %s, %s on %s, max_model_len %d",
            self.model_path, self.dim, self.pooling, self.options.dtype, device, self.max_model_len,
        )

    async def close(self) -> None:
        if self._batcher is not None:
            await self._batcher.close()

    def tokenize(self, inputs: Sequence[str] | Sequence[Sequence[int]]) -> list[list[int]]:
        if isinstance(inputs[0], str):
            seqs = [list(ids) for ids in self._tokenizer(list(inputs), add_special_tokens=True)["input_ids"]]
        else:
            seqs = [list(ids) for ids in inputs]  # type: ignore[arg-type]
            for i, ids in enumerate(seqs):
                if max(ids) >= self._vocab_size:
                    raise InvalidInput(f"input[{i}] has a token id outside the vocabulary (size {self._vocab_size})")
        for i, ids in enumerate(seqs):
            check_length(len(ids), self.max_model_len, i)
        return seqs

    async def embed(self, inputs: Sequence[str] | Sequence[Sequence[int]], *, dimensions: int | None = None) -> Embeddings:
        if self._batcher is None:
            raise EngineError("the transformers engine was not started")
        seqs = self.tokenize(inputs)
        vectors = await self._batcher.submit(seqs)
        return Embeddings(vectors=vectors, prompt_tokens=sum(len(s) for s in seqs))

    def _forward(self, seqs: list[list[int]]) -> "np.ndarray | Deferred":
        import torch

        # Oversized requests run in chunks, so one huge request cannot exhaust memory.
        step = self.options.max_batch_size
        if len(seqs) > step:
            parts = [self._forward(seqs[i : i + step]) for i in range(0, len(seqs), step)]
            return np.concatenate([p.wait() if isinstance(p, Deferred) else p for p in parts])
        width = max(len(s) for s in seqs)
        # Build on numpy: one small torch tensor per row costs more than the copy itself.
        ids_np = np.full((len(seqs), width), self._pad_id, dtype=np.int64)
        lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
        for row, seq in enumerate(seqs):
            ids_np[row, : len(seq)] = seq
        mask_np = (np.arange(width)[None, :] < lengths[:, None]).astype(np.int64)
        ids = torch.from_numpy(ids_np).to(self._device)
        mask = torch.from_numpy(mask_np).to(self._device)
        with torch.inference_mode():
            hidden = self._model(input_ids=ids, attention_mask=mask).last_hidden_state
            pooled = pool(hidden, mask, self.pooling).float()
            if self.options.normalize:
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=-1)
            if self._device.type == "cuda":
                return _DeviceCopy(pooled)
        return pooled.cpu().numpy()


class _DeviceCopy(Deferred):
    """An asynchronous copy to pinned host memory, queued behind the batch's kernels."""

    def __init__(self, pooled: "torch.Tensor") -> None:
        import torch

        self.host = torch.empty(pooled.shape, dtype=pooled.dtype, pin_memory=True)
        self.host.copy_(pooled, non_blocking=True)
        self.done = torch.cuda.Event()
        self.done.record()

    def wait(self) -> np.ndarray:
        self.done.synchronize()
        return self.host.numpy()
