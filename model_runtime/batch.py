"""A ragged batch, as the runner lays it out: the chunks callers send, the
host lists built from them, and the device tensors an eager forward reads."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from model_runtime.layers.attention import ForwardContext
from model_runtime.ops.layout import BatchLayout


@dataclass(frozen=True)
class SequenceChunk:
    """The new tokens of one sequence in a ragged batch.

    They are appended after the tokens the cache already holds for ``seq_id``
    (none for a new sequence). Logits come back for the last ``num_logits`` of
    them: 1 for a prefill or a decode step, k+1 to verify k drafts.
    """

    seq_id: int
    token_ids: Sequence[int]
    num_logits: int = 1

    def __post_init__(self) -> None:
        if not self.token_ids:
            raise ValueError(f"sequence {self.seq_id}: a chunk needs at least one new token")
        if not 0 <= self.num_logits <= len(self.token_ids):
            raise ValueError(
                f"sequence {self.seq_id}: num_logits must be in [0, {len(self.token_ids)}], "
                f"got {self.num_logits}"
            )


@dataclass(frozen=True)
class BatchLimits:
    """What one batch call may hold: new tokens (prompts, appended tokens and
    drafts) and sequences. Bounds the time and memory one caller can take."""

    max_tokens: int = 1 << 62
    max_seqs: int = 1 << 62


@dataclass(frozen=True)
class HostBatch:
    """A batch laid out on the host: T new tokens of B sequences."""

    input_ids: list[int]  # [T]
    positions: list[int]  # [T]
    logits_indices: list[int]  # [R] the tokens whose logits come back
    layout: BatchLayout

    @property
    def one_logit_each(self) -> bool:
        """Whether exactly each sequence's last token has logits (decode, drafting)."""
        ends = self.layout.query_starts[1:]
        return self.logits_indices == [end - 1 for end in ends]

    @property
    def every_logit(self) -> bool:
        """Whether every new token has logits (verifying drafts)."""
        return len(self.logits_indices) == len(self.input_ids)


def host_batch(
    chunks: Sequence[SequenceChunk],
    starts: list[int],
    slots: list[list[int]],
    tables: list[list[int]],
    block_size: int,
) -> HostBatch:
    """The host lists of ``chunks``, whose sequences held ``starts`` tokens
    and now write theirs to ``slots`` through ``tables``."""
    input_ids: list[int] = []
    positions: list[int] = []
    logits_indices: list[int] = []
    for chunk, start in zip(chunks, starts, strict=True):
        n, offset = len(chunk.token_ids), len(input_ids)
        input_ids.extend(chunk.token_ids)
        positions.extend(range(start, start + n))
        logits_indices.extend(range(offset + n - chunk.num_logits, offset + n))
    layout = BatchLayout(
        starts=starts,
        query_lens=[len(c.token_ids) for c in chunks],
        tables=tables,
        slots=[s for chunk_slots in slots for s in chunk_slots],
        block_size=block_size,
    )
    return HostBatch(input_ids, positions, logits_indices, layout)


@dataclass
class PreparedBatch:
    """A batch on the device, ready for an eager forward."""

    input_ids: torch.Tensor  # [T]
    positions: torch.Tensor  # [T]
    logits_indices: torch.Tensor  # [R]
    context: ForwardContext
