"""The fixed-address inputs of a captured step, and how a batch is padded into them.

A step shape (``StepShape``) holds B sequences (a bucket) with up to Q new
tokens each, and asks for the logits of either each sequence's last token
(decode and draft steps) or every token (verifying drafts). A batch that fits
is padded to it: padding tokens write nowhere (slot -1) and padding sequences
have no new tokens, so attention skips them.

Every shape reads its inputs at fixed offsets of one device buffer, which one
copy from a (pinned) host buffer fills each step; the block tables go to a
fixed-width table with one more copy. Nothing here is CUDA-only, so the
padding is tested on the CPU (``model_runtime.graphs`` captures and replays).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from model_runtime.batch import HostBatch
from model_runtime.ops.triton_ops import TritonMetadata
from model_runtime.specs import MAX_QUERY_LEN

BATCH_BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256)
# The most tokens of a verify shape: each keeps [tokens, vocab] logits alive,
# and larger verify steps are compute-bound anyway.
MAX_GRAPH_TOKENS = 1024


@dataclass(frozen=True)
class StepShape:
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


def buckets_up_to(max_batch: int) -> list[int]:
    return [b for b in BATCH_BUCKETS if b < max_batch] + [max_batch]


def startup_shapes(buckets: list[int], query_len: int) -> list[StepShape]:
    """The shapes captured when a runner is built, largest first: decode steps
    of every bucket and, when ``query_len`` > 1, a draft's first step catching
    up two tokens and verify steps of 2..``query_len`` tokens per sequence
    (those within MAX_GRAPH_TOKENS)."""
    shapes = [StepShape(b, 1, False) for b in buckets]
    if query_len > 1:
        shapes += [StepShape(b, 2, False) for b in buckets]
        verify = (StepShape(b, q, True) for b in buckets for q in range(2, query_len + 1))
        shapes += [s for s in verify if s.tokens <= MAX_GRAPH_TOKENS]
    return sorted(shapes, key=lambda s: (s.rows, s.tokens), reverse=True)


def shape_for(batch: HostBatch, buckets: list[int]) -> StepShape | None:
    """The step shape a batch fits, if any: a decode or draft step (one logit
    per sequence, at most 2 new tokens each) or a verify step (every logit)."""
    layout = batch.layout
    size, longest = len(layout.query_lens), layout.max_query_len
    if size > buckets[-1] or longest > MAX_QUERY_LEN:
        return None
    if batch.one_logit_each and longest <= 2:
        every = False
    elif batch.every_logit:
        every = longest > 1
    else:
        return None
    bucket = next(b for b in buckets if b >= size)
    shape = StepShape(bucket, longest, every)
    return shape if not every or shape.tokens <= MAX_GRAPH_TOKENS else None


@dataclass
class StepViews:
    """One shape's inputs: views of the fixed buffers."""

    input_ids: torch.Tensor  # [tokens]
    positions: torch.Tensor  # [tokens]
    logits_rows: torch.Tensor  # [rows]
    metadata: TritonMetadata


class StepInputs:
    """The fixed buffers every captured shape reads, for batches of up to
    ``max_batch`` sequences and ``width`` blocks each."""

    def __init__(self, max_batch: int, width: int, device: torch.device):
        size = StepShape(max_batch, MAX_QUERY_LEN, True).offsets()[-1] + max_batch * width
        pinned = device.type == "cuda"
        # Two host buffers, used by turns: a step's inputs are packed while the
        # copy of the step before may still wait behind that step's forward on
        # the stream; only the copy of the step two back must have read its
        # buffer, and it has long since. (With one buffer every step waited for
        # the previous step's forward: a sync between a draft's k steps.)
        self._host = [torch.zeros(size, dtype=torch.int64, pin_memory=pinned) for _ in range(2)]
        self._host_np = [host.numpy() for host in self._host]
        self._copied = [torch.cuda.Event() if pinned else None for _ in range(2)]
        self._turn = 0
        self._device = torch.zeros(size, dtype=torch.int64, device=device)
        self._tables = torch.zeros(max_batch, width, dtype=torch.int64, device=device)

    def views(self, shape: StepShape, num_splits: int) -> StepViews:
        ids, positions, slots, rows, lens, starts, _ = shape.offsets()
        inputs = self._device
        return StepViews(
            input_ids=inputs[ids : ids + shape.tokens],
            positions=inputs[positions : positions + shape.tokens],
            logits_rows=inputs[rows : rows + shape.rows],
            metadata=TritonMetadata(
                slot_mapping=inputs[slots : slots + shape.tokens],
                block_tables=self._tables[: shape.batch],
                seq_lens=inputs[lens : lens + shape.batch],
                query_starts=inputs[starts : starts + shape.batch + 1],
                max_query_len=shape.query_len,
                num_splits=num_splits,
            ),
        )

    def clear(self, shape: StepShape) -> None:
        """An empty batch of ``shape``: nothing to attend to, nowhere to write."""
        _, _, slots, _, _, _, end = shape.offsets()
        self._device[:end].zero_()
        self._device[slots : slots + shape.tokens].fill_(-1)

    def load(
        self, shape: StepShape, batch: HostBatch, token_ids: torch.Tensor | None = None
    ) -> None:
        """Pad ``batch`` to ``shape`` into the buffers; ``token_ids`` [T] (on the
        device) replace its tokens."""
        turn, self._turn = self._turn, 1 - self._turn
        copied = self._copied[turn]
        if copied is not None:
            copied.synchronize()  # the copy out of this buffer two steps ago is done
        used = self._pack(shape, batch, self._host_np[turn])
        self._device[:used].copy_(self._host[turn][:used], non_blocking=True)
        if copied is not None:
            copied.record()
        size, width = len(batch.layout.query_lens), batch.layout.width
        base = shape.offsets()[-1]
        tables = self._device[base : base + size * width].view(size, width)
        self._tables[:size, :width].copy_(tables)
        if token_ids is not None:
            self._device[: len(batch.input_ids)].copy_(token_ids)

    @staticmethod
    def _pack(shape: StepShape, batch: HostBatch, host: np.ndarray) -> int:
        """Write ``batch`` padded to ``shape`` into ``host``; the length written."""
        layout = batch.layout
        ids, positions, slots, rows, lens, starts, tables = shape.offsets()
        tokens, size = len(batch.input_ids), len(layout.query_lens)
        for offset, values, pad in (
            (ids, batch.input_ids, 0),
            (positions, batch.positions, 0),
            (slots, layout.slots, -1),
        ):
            host[offset : offset + tokens] = values
            host[offset + tokens : offset + shape.tokens] = pad
        host[rows : rows + len(batch.logits_indices)] = batch.logits_indices
        host[rows + len(batch.logits_indices) : rows + shape.rows] = 0
        host[lens : lens + size] = layout.seq_lens
        host[lens + size : lens + shape.batch] = 0
        host[starts : starts + size + 1] = layout.query_starts
        host[starts + size + 1 : starts + shape.batch + 1] = tokens
        flat = [block for table in layout.padded_tables() for block in table]
        host[tables : tables + len(flat)] = flat
        return tables + len(flat)
