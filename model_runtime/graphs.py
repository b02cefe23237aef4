"""CUDA graphs of the forward steps that repeat: decoding, drafting, verifying.

One graph per step shape (``model_runtime.step_inputs``): decode shapes are
captured for every batch-size bucket when the runner is built, largest first,
and with them, for a runner that verifies or drafts (``capture_query_len``),
the verify shapes of every k and a draft's catch-up shape; any other shape
that fits is captured the first time it comes. Prefills, mixed batches and
verify steps of more than MAX_GRAPH_TOKENS tokens run eagerly. The graphs
share one memory pool, taken from what the KV budget leaves
(``gpu_memory_utilization``'s remainder and the activation reserve), and one
logits buffer they all write: a replay returns a view of it, valid until the
runner's next forward. So a shape costs its kernels' launches, not a copy of
the [rows, vocab] logits held for good.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import torch

from model_runtime.batch import HostBatch
from model_runtime.kv_cache import PagedKVCache, blocks_for
from model_runtime.layers.attention import ForwardContext
from model_runtime.models.llama import LlamaForCausalLM
from model_runtime.ops.triton_ops import TritonOps
from model_runtime.specs import MAX_QUERY_LEN
from model_runtime.step_counts import StepCounts
from model_runtime.step_inputs import (
    MAX_GRAPH_TOKENS,
    StepInputs,
    StepShape,
    buckets_up_to,
    shape_for,
    startup_shapes,
)

logger = logging.getLogger(__name__)


@dataclass
class _Graph:
    graph: torch.cuda.CUDAGraph
    logits: torch.Tensor  # [rows, V], a view of the shared logits buffer


def padded_forward(
    model: LlamaForCausalLM,
    kv_cache: PagedKVCache,
    ops: TritonOps,
    inputs: StepInputs,
    shape: StepShape,
    max_positions: int,
) -> torch.Tensor:
    """The forward of whatever batch ``inputs`` holds for ``shape``: logits
    [shape.rows, V] (what a graph captures, and what it replays)."""
    splits = ops.num_splits(shape.batch, shape.query_len, max_positions)
    views = inputs.views(shape, splits)
    context = ForwardContext(kv_cache, views.metadata, ops)
    hidden = model(views.input_ids, views.positions, context, views.logits_rows)
    return model.compute_logits(hidden, ops)


class StepGraphs:
    """The captured steps of one runner's model and cache."""

    def __init__(
        self,
        model: LlamaForCausalLM,
        kv_cache: PagedKVCache,
        ops: TritonOps,
        max_positions: int,
        max_batch: int,
        counts: StepCounts,
    ):
        self.model = model
        self.counts = counts
        self.kv_cache = kv_cache
        self.ops = ops
        self.max_positions = max_positions
        self.buckets = buckets_up_to(max_batch)
        device = model.lm_head.weight.device
        width = blocks_for(max_positions, kv_cache.block_size)
        self.inputs = StepInputs(max_batch, width, device)
        self._pool = torch.cuda.graph_pool_handle()
        self._graphs: dict[StepShape, _Graph] = {}
        most_rows = max(max_batch, min(MAX_GRAPH_TOKENS, max_batch * MAX_QUERY_LEN))
        vocab, dtype = model.config.vocab_size, model.lm_head.weight.dtype  # the whole vocabulary
        self._logits = torch.empty(most_rows, vocab, dtype=dtype, device=device)

    def capture_startup(self, query_len: int = 1) -> None:
        """Capture the startup shapes (``startup_shapes``), largest first: the
        pool's memory is then set by the first."""
        start = time.monotonic()
        shapes = startup_shapes(self.buckets, query_len)
        for shape in shapes:
            self._capture(shape)
        logger.info(
            "captured %d CUDA graphs (batch up to %d, up to %d new tokens each) in %.1f s",
            len(shapes),
            self.buckets[-1],
            query_len,
            time.monotonic() - start,
        )

    @torch.inference_mode()
    def run(self, batch: HostBatch, token_ids: torch.Tensor | None = None) -> torch.Tensor | None:
        """Replay the graph ``batch`` fits and return its logits [R, V]; None
        when none fits. ``token_ids`` [T] (on the device) replace the batch's."""
        shape = shape_for(batch, self.buckets)
        if shape is None:
            return None
        if shape not in self._graphs:
            started = time.monotonic()
            self._capture(shape)
            took = time.monotonic() - started
            self.counts.captured += 1
            self.counts.capture_s += took
            logger.info("captured the CUDA graph of %s in %.2f s", shape, took)
        self.counts.replayed += 1
        self.inputs.load(shape, batch, token_ids)
        graph = self._graphs[shape]
        graph.graph.replay()
        return graph.logits[: len(batch.logits_indices)]

    def _capture(self, shape: StepShape) -> None:
        out = self._logits[: shape.rows]

        def step() -> torch.Tensor:
            logits = padded_forward(
                self.model, self.kv_cache, self.ops, self.inputs, shape, self.max_positions
            )
            return out.copy_(logits)

        self.inputs.clear(shape)
        with torch.inference_mode():
            step()  # compiles the kernels outside the capture
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            # thread_local: another runner of this process (a draft stepping on
            # the overlap thread) may allocate and launch while this captures.
            with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
                logits = step()
        self._graphs[shape] = _Graph(graph, logits)
