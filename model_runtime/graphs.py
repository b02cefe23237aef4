"""CUDA graphs of the forward steps that repeat: decoding, drafting, verifying.

A graph holds the forward of B sequences with up to Q new tokens each, and
returns logits either for each sequence's last token (decode and draft steps)
or for every token (verifying drafts). Decode graphs are captured for every
batch-size bucket when the runner is built; the others the first time a step
of their shape comes. A step is padded to its bucket: padding tokens write
nowhere (slot -1) and padding sequences have no new tokens, so attention
skips them. Prefills and mixed batches run eagerly.

Every graph reads its inputs at fixed offsets of one device buffer, which one
copy from a pinned host buffer fills each step (the block tables go to a
fixed-width table with one more copy); the graphs share one memory pool. The
logits a replay returns live in that pool: they are valid until the runner's
next forward.
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
from model_runtime.ops.triton_ops import TritonMetadata, TritonOps

logger = logging.getLogger(__name__)

BATCH_BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256)
# The most new tokens per sequence a graph takes: a verify of 15 drafts.
MAX_QUERY_LEN = 16


@dataclass(frozen=True)
class GraphKey:
    batch: int  # sequences, a bucket
    query_len: int  # most new tokens of one sequence
    every_logit: bool  # logits for every token, else for each sequence's last

    @property
    def tokens(self) -> int:
        return self.batch * self.query_len

    @property
    def rows(self) -> int:
        return self.tokens if self.every_logit else self.batch

    def offsets(self) -> list[int]:
        """Where input_ids, positions, slots, logits rows, seq_lens, query
        starts and the block tables start in the input buffer."""
        sizes = [self.tokens] * 3 + [self.rows, self.batch, self.batch + 1]
        starts = [0]
        for size in sizes:
            starts.append(starts[-1] + size)
        return starts


@dataclass
class _Graph:
    graph: torch.cuda.CUDAGraph
    logits: torch.Tensor  # [rows, V], in the graphs' pool


class StepGraphs:
    """The captured steps of one runner's model and cache."""

    def __init__(
        self,
        model: LlamaForCausalLM,
        kv_cache: PagedKVCache,
        ops: TritonOps,
        max_positions: int,
        max_batch: int,
    ):
        self.model = model
        self.kv_cache = kv_cache
        self.ops = ops
        self.max_positions = max_positions
        self.buckets = [b for b in BATCH_BUCKETS if b < max_batch] + [max_batch]
        device = model.lm_head.weight.device
        width = blocks_for(max_positions, kv_cache.block_size)
        largest = GraphKey(max_batch, MAX_QUERY_LEN, True)
        size = largest.offsets()[-1] + max_batch * width
        self._host = torch.zeros(size, dtype=torch.int64, pin_memory=True)
        self._host_np = self._host.numpy()
        self._inputs = torch.zeros(size, dtype=torch.int64, device=device)
        self._tables = torch.zeros(max_batch, width, dtype=torch.int64, device=device)
        self._copied = torch.cuda.Event()
        self._pool = torch.cuda.graph_pool_handle()
        self._graphs: dict[GraphKey, _Graph] = {}

    def key_for(self, batch: HostBatch) -> GraphKey | None:
        """The graph a batch fits, if any."""
        layout = batch.layout
        size = len(layout.query_lens)
        if size > self.buckets[-1] or layout.max_query_len > MAX_QUERY_LEN:
            return None
        if batch.every_logit:
            query_len = layout.max_query_len
        elif batch.one_logit_each:
            query_len = 1 if layout.max_query_len == 1 else 2 if layout.max_query_len == 2 else 0
        else:
            return None
        if query_len == 0:
            return None
        bucket = next(b for b in self.buckets if b >= size)
        return GraphKey(bucket, query_len, batch.every_logit and query_len > 1)

    def capture_decode(self) -> None:
        """Capture the decode step of every bucket, largest first (they share a pool)."""
        start = time.monotonic()
        for bucket in reversed(self.buckets):
            self._capture(GraphKey(bucket, 1, False))
        logger.info(
            "captured %d CUDA graphs of decode steps (batch up to %d) in %.1f s",
            len(self.buckets),
            self.buckets[-1],
            time.monotonic() - start,
        )

    @torch.inference_mode()
    def run(self, batch: HostBatch, token_ids: torch.Tensor | None = None) -> torch.Tensor | None:
        """Replay the graph ``batch`` fits and return its logits [R, V]; None
        when none fits. ``token_ids`` [T] (on the device) replace the batch's."""
        key = self.key_for(batch)
        if key is None:
            return None
        if key not in self._graphs:
            started = time.monotonic()
            self._capture(key)
            logger.info("captured the CUDA graph of %s in %.2f s", key, time.monotonic() - started)
        width = batch.layout.width
        used = self._pack(key, batch)
        self._inputs[:used].copy_(self._host[:used], non_blocking=True)
        self._copied.record()
        size = len(batch.layout.query_lens)
        base = key.offsets()[-1]
        self._tables[:size, :width].copy_(
            self._inputs[base : base + size * width].view(size, width)
        )
        if token_ids is not None:
            self._inputs[: len(batch.input_ids)].copy_(token_ids)
        graph = self._graphs[key]
        graph.graph.replay()
        return graph.logits[: len(batch.logits_indices)]

    def _pack(self, key: GraphKey, batch: HostBatch) -> int:
        """Write ``batch`` padded to ``key`` into the pinned buffer; its length."""
        self._copied.synchronize()  # the last step's copy has read the buffer
        layout, host = batch.layout, self._host_np
        ids, positions, slots, rows, lens, starts, tables = key.offsets()
        tokens, size = len(batch.input_ids), len(layout.query_lens)
        for offset, values, pad in (
            (ids, batch.input_ids, 0),
            (positions, batch.positions, 0),
            (slots, layout.slots, -1),
        ):
            host[offset : offset + tokens] = values
            host[offset + tokens : offset + key.tokens] = pad
        host[rows : rows + len(batch.logits_indices)] = batch.logits_indices
        host[rows + len(batch.logits_indices) : rows + key.rows] = 0
        host[lens : lens + size] = layout.seq_lens
        host[lens + size : lens + key.batch] = 0
        query_starts = [0]
        for n in layout.query_lens:
            query_starts.append(query_starts[-1] + n)
        host[starts : starts + size + 1] = query_starts
        host[starts + size + 1 : starts + key.batch + 1] = tokens
        flat = [block for table in layout.padded_tables() for block in table]
        host[tables : tables + len(flat)] = flat
        return tables + len(flat)

    def _capture(self, key: GraphKey) -> None:
        ids, positions, slots, rows, lens, starts, end = key.offsets()
        inputs = self._inputs
        inputs[:end].zero_()
        inputs[slots : slots + key.tokens].fill_(-1)  # the dummy batch writes nowhere
        splits = self.ops.num_splits(key.batch, key.query_len, self.max_positions)
        metadata = TritonMetadata(
            slot_mapping=inputs[slots : slots + key.tokens],
            block_tables=self._tables[: key.batch],
            seq_lens=inputs[lens : lens + key.batch],
            query_starts=inputs[starts : starts + key.batch + 1],
            max_query_len=key.query_len,
            num_splits=splits,
        )
        context = ForwardContext(self.kv_cache, metadata, self.ops)

        def step() -> torch.Tensor:
            hidden = self.model(
                inputs[ids : ids + key.tokens],
                inputs[positions : positions + key.tokens],
                context,
                inputs[rows : rows + key.rows],
            )
            return self.model.compute_logits(hidden)

        with torch.inference_mode():
            step()  # compiles the kernels outside the capture
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool):
                logits = step()
        self._graphs[key] = _Graph(graph, logits)
