"""A real model from a local directory through torch: AutoModel + AutoTokenizer + pooling.

The forward path never waits for the device, so the host queues one batch while the
device computes the last:

- Attention inputs are built from the batch's lengths on the device. A causal model with
  right padding needs no mask at all (a real token never sees the padding after it), so
  none is passed, and SDPA runs its causal kernel; a bidirectional model gets a prebuilt
  4-D key-padding mask. Either way transformers' own mask code, which reads the mask on
  the host (`padding_mask.all()`), never runs.
- Inputs go to the device from pinned host buffers and vectors come back into them, each
  copy asynchronous; an event says when a batch's vectors are home.
- On CUDA, forwards of a few (rows, width) buckets are captured as CUDA graphs at start-up
  and replayed with the batch padded to the bucket: one launch instead of ~1,600. Shapes
  past the buckets, or past the graph memory budget, run eagerly on the same no-sync path.
- `--engine-arg compile=true` compiles the repeated blocks (the decoder layers) with
  torch.compile before capture, so the graphs replay fused kernels.
- With LAST pooling on a causal model the last decoder layer runs only at each row's
  last token (`last_token.py`; `--engine-arg last_token_only=false` turns it off): the
  other positions' outputs of that layer are never read.

On CPU none of the CUDA machinery runs: a forward pads to the longest sequence in its
batch, and takes the same mask-free inputs as on CUDA.
"""

from __future__ import annotations

import asyncio
import logging
import queue
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import EngineError
from .base import POOLINGS, Embeddings, EngineOptions, model_dir
from .batching import BatchShapes, Deferred, DynamicBatcher
from .cuda_graphs import GraphSet, Slot, SlotVectors, graph_shapes
from .models import resolve_model_path, serving_defaults
from .preprocess import IngestSpec, check_lengths, check_token_ids, token_ingest_spec
from .transformers_tuning import TransformersTuning, compile_repeated_blocks, pool

if TYPE_CHECKING:
    import torch

log = logging.getLogger("embedlab.engines.transformers")

# Batches narrower than this run the last layer whole. There the pruned layer, which runs
# uncompiled, costs more launches than its saved work: on an H200, CUDA-graph replays at
# 13 tokens (width 16) gave 17,160 against 17,548 seq/s at 64 rows and 21,120 against
# 21,345 at 128; at 128 tokens, 3,889 against 3,842 at 256 rows (bench/gpu_diagnose.py).
LAST_TOKEN_MIN_WIDTH = 17


class TransformersEngine:
    name = "transformers"
    supports_dimensions = False

    def __init__(self, options: EngineOptions) -> None:
        if options.model_path is None:
            raise EngineError("the transformers engine needs --model-path DIR (a local model directory)")
        self.options = options
        self.tuning = TransformersTuning.parse(options.extra_args)
        self.model_path = resolve_model_path(options.model_path)
        own = serving_defaults(self.model_path)
        self.pooling = (options.pooling or own.pooling).lower()
        self.normalize = own.normalize if options.normalize is None else options.normalize
        if self.pooling not in POOLINGS:
            raise EngineError(f"unsupported pooling {options.pooling!r}; choose from {', '.join(POOLINGS)}")
        self.dim = 0
        self.max_model_len = 0
        self._model: Any = None
        self._tokenizer: Any = None
        self._device: Any = None
        self._pad_id = 0
        self._vocab_size = 0
        # How attention sees padding: "causal" (no mask), "key_padding" (4-D mask built
        # here), or "transformers" (a 2-D mask through transformers' own code, which
        # syncs; the fallback for models where neither of ours is known to be right).
        self.attention = "transformers"
        self._mask_mapping: dict[str, None] = {}
        self._last: Any = None  # the LastTokenLayer in place of the model's last layer, if any
        self._graphs = GraphSet()
        self._slots: queue.SimpleQueue[Slot] = queue.SimpleQueue()
        self._batcher: DynamicBatcher | None = None
        self.info: dict[str, Any] = {}

    # -- start-up -----------------------------------------------------------------------

    async def start(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._load)
        widths = tuple(sorted({w for _, w in self._graphs.graphs}))
        rows = tuple(sorted({r for r, _ in self._graphs.graphs}))
        self._batcher = DynamicBatcher(
            self._forward,
            max_batch_size=self.options.max_batch_size,
            max_batch_tokens=self.options.max_batch_tokens,
            wait_ms=self.options.batch_wait_ms,
            max_inflight=self.tuning.max_inflight,
            pipeline_min=self.tuning.pipeline_min,
            shapes=BatchShapes(widths=widths, rows=rows),
            inline=self._replays if self._graphs else None,
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
        dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[
            self.options.dtype
        ]
        try:
            self._tokenizer = AutoTokenizer.from_pretrained(self.model_path)
            model = AutoModel.from_pretrained(self.model_path, dtype=dtype)
        except (OSError, ValueError, KeyError) as exc:
            raise EngineError(f"could not load the model in {self.model_path}: {exc}") from exc
        self._device = torch.device(device)
        self._model = model.to(self._device).eval()
        config = model.config
        self.dim = int(config.hidden_size)
        self._vocab_size = int(config.vocab_size)
        limit = int(getattr(config, "max_position_embeddings", 512) or 512)
        self.max_model_len = min(self.options.max_model_len or limit, limit)
        pad = self._tokenizer.pad_token_id
        self._pad_id = int(pad if pad is not None else 0)
        self.attention = self._choose_attention()
        if self.tuning.last_token_only and self.pooling == "last" and self.attention == "causal":
            self._last_token_only()
        self.info = {
            "device": str(self._device),
            "dtype": self.options.dtype,
            "pooling": self.pooling,
            "normalize": self.normalize,
            "attention": self.attention,
            "last_token_only": self._last is not None,
            "compile": self.tuning.compile,
            "cuda_graphs": [],
        }
        if self._device.type == "cuda":
            tokens = max(
                self.options.max_batch_tokens,
                self.max_model_len,
                self.options.max_batch_size * max(self.tuning.graph_widths),
            )
            # One slot more than the batcher keeps in flight: filling the next batch never
            # waits for the device to finish with a slot.
            for _ in range(self.tuning.max_inflight + 1):
                self._slots.put(Slot(tokens=tokens, rows=self.options.max_batch_size, dim=self.dim))
            if self.tuning.compile:
                compile_repeated_blocks(self._model)
            if self.tuning.cuda_graphs and self.attention != "transformers":
                self._capture_or_fall_back()
        log.info(
            "loaded %s: dim %d, pooling %s, %s on %s, max_model_len %d, attention %s",
            self.model_path,
            self.dim,
            self.pooling,
            self.options.dtype,
            device,
            self.max_model_len,
            self.attention,
        )

    def _choose_attention(self) -> str:
        """Pick the no-sync attention inputs this model supports, proven on a padded probe."""
        import torch

        flags = {bool(m.is_causal) for m in self._model.modules() if hasattr(m, "is_causal")}
        layer_types = set(getattr(self._model.config, "layer_types", None) or ["full_attention"])
        implementation = getattr(self._model.config, "_attn_implementation", None)
        if flags == {True} and layer_types == {"full_attention"}:
            # Models of this family take a prepared mask per layer type, and None means
            # "plain causal" to their SDPA path. Sliding-window layers would need a real mask.
            candidate = "causal"
            self._mask_mapping = {"full_attention": None}
        elif flags == {False} and implementation in ("sdpa", "eager"):
            candidate = "key_padding"
        else:
            return "transformers"
        # The probe: two right-padded sequences through our inputs and through transformers'
        # own 2-D-mask path. Any model that disagrees (or refuses a prepared mask) keeps
        # transformers' path.
        lengths = [5, 3]
        ids = torch.full((2, 5), self._pad_id, dtype=torch.int64)
        gen = torch.Generator().manual_seed(0)
        for row, n in enumerate(lengths):
            ids[row, :n] = torch.randint(min(10, self._vocab_size - 1), self._vocab_size, (n,), generator=gen)
        ids = ids.to(self._device)
        lens = torch.tensor(lengths, device=self._device)
        try:
            with torch.inference_mode():
                self.attention = candidate
                ours = self._compute(ids, lens, padded=True)
                self.attention = "transformers"
                theirs = self._compute(ids, lens, padded=True)
        except Exception as exc:  # a model that takes no prepared mask: keep its own path
            log.info(
                "attention inputs %s not accepted by this model (%s); using transformers' masks",
                candidate,
                exc,
            )
            return "transformers"
        cosine = torch.nn.functional.cosine_similarity(ours.float(), theirs.float(), dim=-1).min().item()
        if cosine < 0.999:
            log.warning(
                "attention inputs %s disagree with transformers' (cosine %.5f); using transformers' masks",
                candidate,
                cosine,
            )
            return "transformers"
        return candidate

    def _last_token_only(self) -> None:
        """Run the last layer at the pooled token only, if a padded probe gives the same vectors."""
        import torch

        from .last_token import unwrap_last_layer, wrap_last_layer

        lengths = [LAST_TOKEN_MIN_WIDTH + 3, 9, 1]  # wide enough to take the pruned path
        ids = torch.full((3, lengths[0]), self._pad_id, dtype=torch.int64)
        gen = torch.Generator().manual_seed(1)
        for row, n in enumerate(lengths):
            ids[row, :n] = torch.randint(min(10, self._vocab_size - 1), self._vocab_size, (n,), generator=gen)
        ids = ids.to(self._device)
        lens = torch.tensor(lengths, device=self._device)
        with torch.inference_mode():
            full = self._compute(ids, lens, padded=True)
            wrapper = wrap_last_layer(self._model)
            if wrapper is None:
                return
            try:
                self._last = wrapper
                ours = self._compute(ids, lens, padded=True)
                cosine = (
                    torch.nn.functional.cosine_similarity(ours.float(), full.float(), dim=-1).min().item()
                )
            except Exception as exc:  # a layer that is not what it looked like: the full forward
                cosine, reason = float("nan"), f"{exc.__class__.__name__}: {exc}"
            else:
                reason = f"cosine {cosine:.5f}"
        if not cosine >= 0.999:
            self._last = None
            unwrap_last_layer(self._model, wrapper)
            log.warning(
                "the last layer at the pooled token only disagrees (%s); computing it in full", reason
            )

    def _capture_or_fall_back(self) -> None:
        """Capture; if that fails, serve without compile, then without graphs, and say so."""
        import torch

        for attempt in ("as configured", "without compile"):
            try:
                self._capture()
                return
            except Exception as exc:  # a worker that serves slower beats one that does not start
                log.warning("CUDA graph capture failed (%s): %s: %s", attempt, exc.__class__.__name__, exc)
                self.info.setdefault("graph_capture_errors", []).append(
                    f"{attempt}: {exc.__class__.__name__}: {exc}"
                )
                self._graphs.clear()
                torch.cuda.synchronize()
                if not self.tuning.compile or attempt != "as configured":
                    return
                for block in self._model.modules():
                    if getattr(block, "_compiled_call_impl", None) is not None:
                        block._compiled_call_impl = None
                self.info["compile"] = False

    def _capture(self) -> None:
        shapes = graph_shapes(
            max_batch_size=self.options.max_batch_size,
            max_batch_tokens=self.options.max_batch_tokens,
            widths=self.tuning.graph_widths,
            max_model_len=self.max_model_len,
        )
        if not shapes:
            return
        captured = self._graphs.capture(
            lambda ids, lengths: self._compute(ids, lengths, padded=True),
            device=self._device,
            shapes=shapes,
            pad_id=self._pad_id,
            memory_mb=self.tuning.graph_memory_mb,
        )
        self.info.update(captured)
        skipped = captured["graphs_skipped_for_memory"]
        log.info(
            "captured %d CUDA graphs in %.1f s, %.0f MiB of device memory; buckets (width: rows) %s%s",
            len(self._graphs),
            captured["graph_capture_s"],
            captured["graph_memory_mib"],
            "; ".join(f"{w}: {','.join(map(str, rs))}" for w, rs in self._graphs.rows_by_width.items()),
            f"; over the {self.tuning.graph_memory_mb} MiB budget, eager: {skipped}" if skipped else "",
        )

    async def close(self) -> None:
        if self._batcher is not None:
            await self._batcher.close()

    def describe(self) -> dict[str, Any]:
        """What `/health` shows: device, attention inputs, captured buckets, batch histogram."""
        return {**self.info, "batching": self._batcher.stats() if self._batcher is not None else None}

    # -- requests -----------------------------------------------------------------------

    def tokenize(self, inputs: Sequence[str] | Sequence[Sequence[int]]) -> list[list[int]]:
        if isinstance(inputs[0], str):
            seqs = [list(ids) for ids in self._tokenizer(list(inputs), add_special_tokens=True)["input_ids"]]
        else:
            seqs = [list(ids) for ids in inputs]
            check_token_ids(seqs, self._vocab_size)
        check_lengths(seqs, self.max_model_len)
        return seqs

    async def embed(
        self, inputs: Sequence[str] | Sequence[Sequence[int]], *, dimensions: int | None = None
    ) -> Embeddings:
        if self._batcher is None:
            raise EngineError("the transformers engine was not started")
        seqs = self.tokenize(inputs)
        vectors = await self._batcher.submit(seqs)
        return Embeddings(vectors=vectors, prompt_tokens=sum(len(s) for s in seqs))

    # -- the engine side of ingest processes (--api-processes > 1) -----------------------

    @property
    def owns_device(self) -> bool:
        """Whether request handling in other processes pays: a device to keep fed."""
        return self._device is not None and self._device.type == "cuda"

    def ingest_spec(self) -> IngestSpec:
        return token_ingest_spec(self, tokenizer=self._tokenizer, vocab_size=self._vocab_size)

    def submit_ids(
        self, seqs: Sequence[Sequence[int]], *, since: float | None = None
    ) -> asyncio.Future[np.ndarray]:
        """Checked token ids from an ingest process into the batcher; the future holds their vectors.

        `since`: when the ingest process sent them (monotonic), for the batcher's queueing figures.
        """
        if self._batcher is None:
            raise EngineError("the transformers engine was not started")
        return self._batcher.submit_nowait(seqs, since=since)

    # -- the forward path ---------------------------------------------------------------

    def _compute(self, ids: torch.Tensor, lengths: torch.Tensor, *, padded: bool) -> torch.Tensor:
        """Pooled, optionally normalised float32 vectors of right-padded `ids` [rows, width].

        Nothing here reads a device value on the host, so it queues without waiting and
        can be captured in a CUDA graph.
        """
        import torch

        width = ids.shape[1]
        valid = None
        if self.pooling == "mean" or (padded and self.attention != "causal"):
            valid = torch.arange(width, device=ids.device) < lengths[:, None]
        if self.attention == "causal":
            attention: Any = self._mask_mapping
        elif self.attention == "key_padding":
            if not padded:
                attention = None
            else:
                assert valid is not None  # set above: padded and not causal
                if getattr(self._model.config, "_attn_implementation", None) == "sdpa":
                    attention = valid[:, None, None, :]
                else:  # eager attention adds its mask to the scores
                    attention = (~valid[:, None, None, :]).to(self._model.dtype) * torch.finfo(
                        self._model.dtype
                    ).min
        else:
            attention = valid.to(torch.int64) if valid is not None else None
        last_only = self._last is not None and width >= LAST_TOKEN_MIN_WIDTH
        if self._last is not None:
            self._last.lengths = lengths if last_only else None
        # No KV cache: decoder configs default to filling one, which an embedding never reads.
        hidden = self._model(input_ids=ids, attention_mask=attention, use_cache=False).last_hidden_state
        # With the last layer at the pooled token only, its one position is that token.
        pooled = (hidden[:, 0] if last_only else pool(hidden, lengths, valid, self.pooling)).float()
        if self.normalize:
            pooled = torch.nn.functional.normalize(pooled, p=2, dim=-1)
        return pooled

    def bucket_vectors(self, seqs: Sequence[Sequence[int]], *, rows: int, width: int) -> np.ndarray:
        """`seqs` padded to a (rows, width) bucket and run eagerly, as that bucket's graph would be.

        For parity checks on any device: padding rows and columns must not move a vector.
        """
        import torch

        if not len(seqs) <= rows or max(len(s) for s in seqs) > width:
            raise ValueError(
                f"{len(seqs)} sequences of up to {max(len(s) for s in seqs)} tokens do not fit ({rows}, {width})"
            )
        ids_np = np.empty((rows, width), dtype=np.int64)
        lengths_np = np.empty(rows, dtype=np.int64)
        self._fill(ids_np, lengths_np, seqs)
        with torch.inference_mode():
            ids = torch.from_numpy(ids_np).to(self._device)
            lengths = torch.from_numpy(lengths_np).to(self._device)
            return self._compute(ids, lengths, padded=True)[: len(seqs)].cpu().numpy()

    def _fill(self, ids: np.ndarray, lengths: np.ndarray, seqs: Sequence[Sequence[int]]) -> None:
        """Right-pad `seqs` into `ids` [rows, width]; rows past them get one pad token each."""
        ids.fill(self._pad_id)
        lengths.fill(1)  # padding rows: their vectors are dropped
        for row, seq in enumerate(seqs):
            ids[row, : len(seq)] = seq
            lengths[row] = len(seq)

    def _replays(self, count: int, longest: int) -> bool:
        """Whether a batch of this shape is a graph replay (queued on the event loop)."""
        return self._graphs.bucket(count, longest) is not None

    def _forward(self, seqs: Sequence[Sequence[int]]) -> np.ndarray | Deferred:
        import torch

        count = len(seqs)
        longest = max(len(s) for s in seqs)
        with torch.inference_mode():
            if self._device.type != "cuda":
                ids_np = np.empty((count, longest), dtype=np.int64)
                lengths_np = np.empty(count, dtype=np.int64)
                self._fill(ids_np, lengths_np, seqs)
                padded = bool(lengths_np.min() < longest)
                return self._compute(
                    torch.from_numpy(ids_np), torch.from_numpy(lengths_np), padded=padded
                ).numpy()
            graph = self._graphs.bucket(count, longest)
            rows, width = (graph.rows, graph.width) if graph is not None else (count, longest)
            slot = self._slots.get()
            try:
                lengths_np = slot.lengths[:rows]
                self._fill(slot.ids[: rows * width].reshape(rows, width), lengths_np, seqs)
                ids_host = slot.ids_t[: rows * width].view(rows, width)
                if graph is not None:
                    out = self._graphs.replay(graph, ids_host, slot.lengths_t[:rows])
                else:
                    ids = ids_host.to(self._device, non_blocking=True)
                    lengths = slot.lengths_t[:rows].to(self._device, non_blocking=True)
                    out = self._compute(ids, lengths, padded=bool(lengths_np.min() < longest))
                slot.out_t[:count].copy_(out[:count], non_blocking=True)
                slot.done.record()
            except BaseException:
                self._slots.put(slot)
                raise
            return SlotVectors(self._slots, slot, count)
