"""CUDA graphs of a forward, one per (rows, width) bucket, and the pinned buffers batches travel in.

A transformers forward of a short batch is ~1,600 kernel launches from Python, which take
longer than the kernels themselves. Captured once as a graph, it is one launch. A graph
replays fixed shapes, so a batch pads its rows and its length up to the smallest bucket
that holds it. All graphs share one memory pool: they replay one at a time on one
stream, and their outputs stay referenced, so one graph's temporaries may reuse
another's memory.

Batches reach the device from pinned host buffers (`Slot`) and their vectors come back
into them, each copy asynchronous; an event marks when a batch's vectors are home, and
a thread waits on it (`SlotVectors.wait`), never the event loop.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .batching import Deferred

if TYPE_CHECKING:
    import torch

# Length buckets. Short queries, the traffic graphs are for, fall in the first; anything
# longer than the last runs eagerly, where launching is cheap next to the work.
GRAPH_WIDTHS = (16, 32, 64, 128, 256, 512)
# Row buckets: powers of two, with midpoints from 64 up, where the load is heavy enough
# for padded rows to cost device time; each bucket costs a capture at start-up.
GRAPH_ROWS = (1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024)

# (ids [rows, width], lengths [rows]) -> vectors [rows, dim] float32, on the device
Compute = Callable[["torch.Tensor", "torch.Tensor"], "torch.Tensor"]


def graph_shapes(
    *, max_batch_size: int, max_batch_tokens: int, widths: Sequence[int], max_model_len: int
) -> list[tuple[int, int]]:
    """The (rows, width) buckets a CUDA worker captures, smallest first.

    Rows follow GRAPH_ROWS up to the largest batch; a bucket never holds more padded
    tokens than a batch may (but every width gets at least one row).
    """
    rows_ladder = [r for r in GRAPH_ROWS if r < max_batch_size] + [max_batch_size]
    return sorted(
        (
            (r, w)
            for w in widths
            if w <= max_model_len
            for r in rows_ladder
            if r * w <= max(max_batch_tokens, w)
        ),
        key=lambda s: (s[0] * s[1], s[1]),
    )


@dataclass(slots=True)
class Graph:
    rows: int
    width: int
    graph: Any  # torch.cuda.CUDAGraph
    ids: torch.Tensor  # static input, a row-prefix view of the width's buffer
    out: torch.Tensor  # static output [rows, dim] float32


class GraphSet:
    """The captured buckets, the static inputs they read, and a batch's bucket."""

    def __init__(self) -> None:
        self.graphs: dict[tuple[int, int], Graph] = {}
        self.rows_by_width: dict[int, list[int]] = {}  # ascending widths, ascending rows
        self.lengths: Any = None  # static lengths [max rows], shared by every graph

    def __len__(self) -> int:
        return len(self.graphs)

    def clear(self) -> None:
        self.graphs.clear()
        self.rows_by_width.clear()

    def shapes(self) -> list[list[int]]:
        return [[r, w] for w, rows in self.rows_by_width.items() for r in rows]

    def capture(
        self, compute: Compute, *, device: Any, shapes: Sequence[tuple[int, int]], pad_id: int, memory_mb: int
    ) -> dict[str, Any]:
        """Capture `shapes` in order until the graphs hold `memory_mb`; returns what to report."""
        import torch

        started = time.monotonic()
        self.clear()
        self.lengths = torch.ones(max(r for r, _ in shapes), dtype=torch.int64, device=device)
        buffers = {
            w: torch.full(
                (max(r for r, ww in shapes if ww == w), w), pad_id, dtype=torch.int64, device=device
            )
            for w in sorted({w for _, w in shapes})
        }
        mempool = torch.cuda.graph_pool_handle()
        torch.cuda.synchronize()
        base = torch.cuda.memory_reserved(device)
        side = torch.cuda.Stream(device)
        skipped: list[list[int]] = []
        with torch.inference_mode():
            for rows, width in shapes:
                if torch.cuda.memory_reserved(device) - base > memory_mb << 20:
                    skipped.append([rows, width])
                    continue
                ids = buffers[width][:rows]
                lengths = self.lengths[:rows]
                lengths.fill_(width)
                # Warm-up on a side stream: lazy initialisation (cuBLAS handles, compiled
                # kernels for a new shape) must happen outside the capture.
                side.wait_stream(torch.cuda.current_stream(device))
                with torch.cuda.stream(side):
                    compute(ids, lengths)
                torch.cuda.current_stream(device).wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=mempool):
                    out = compute(ids, lengths)
                self.graphs[(rows, width)] = Graph(rows=rows, width=width, graph=graph, ids=ids, out=out)
        torch.cuda.synchronize()
        for rows, width in sorted(self.graphs, key=lambda s: (s[1], s[0])):
            self.rows_by_width.setdefault(width, []).append(rows)
        return {
            "cuda_graphs": self.shapes(),
            "graph_memory_mib": round((torch.cuda.memory_reserved(device) - base) / (1 << 20), 1),
            "graph_capture_s": round(time.monotonic() - started, 2),
            "graphs_skipped_for_memory": skipped,
        }

    def bucket(self, count: int, longest: int) -> Graph | None:
        """The smallest captured bucket that holds `count` sequences of up to `longest` tokens."""
        for width, rows_list in self.rows_by_width.items():
            if width >= longest:
                for rows in rows_list:
                    if rows >= count:
                        return self.graphs[(rows, width)]
                return None
        return None

    def replay(self, graph: Graph, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Queue `graph` on pinned host inputs (its bucket's shape); returns its static output."""
        graph.ids.copy_(ids, non_blocking=True)
        self.lengths[: graph.rows].copy_(lengths, non_blocking=True)
        graph.graph.replay()  # releases the GIL: a launch into a full device queue blocks
        return graph.out


class Slot:
    """Pinned host buffers for one batch in flight: its input ids and lengths, its vectors."""

    def __init__(self, *, tokens: int, rows: int, dim: int) -> None:
        import torch

        self.ids_t = torch.empty(tokens, dtype=torch.int64, pin_memory=True)
        self.lengths_t = torch.empty(rows, dtype=torch.int64, pin_memory=True)
        self.out_t = torch.empty((rows, dim), dtype=torch.float32, pin_memory=True)
        self.ids = self.ids_t.numpy()
        self.lengths = self.lengths_t.numpy()
        self.out = self.out_t.numpy()
        # Blocking: its waiter sleeps in the driver. A spinning wait (the default with more
        # cores than GPUs) holds a core per worker for as long as the device is busy.
        self.done = torch.cuda.Event(blocking=True)


class SlotVectors(Deferred):
    """A batch's vectors on their way into its slot; `wait()` returns them and frees the slot."""

    def __init__(self, slots: queue.SimpleQueue[Slot], slot: Slot, count: int) -> None:
        self.slots = slots
        self.slot = slot
        self.count = count

    def wait(self) -> np.ndarray:
        try:
            self.slot.done.synchronize()  # releases the GIL while it waits
            return self.slot.out[: self.count].copy()
        finally:
            self.slots.put(self.slot)
