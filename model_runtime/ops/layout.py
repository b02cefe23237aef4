"""Where a ragged batch sits: built on the host from the block tables, before
any backend turns it into the device tensors its attention reads."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate


@dataclass(frozen=True)
class BatchLayout:
    """B sequences with T new tokens in all, in batch order."""

    starts: list[int]  # [B] tokens each sequence held before this step
    query_lens: list[int]  # [B] new tokens of each sequence
    tables: list[list[int]]  # [B][blocks] each sequence's block table
    slots: list[int]  # [T] pool slot of each new token
    block_size: int

    @property
    def seq_lens(self) -> list[int]:
        """[B] tokens each sequence holds once this step's are written."""
        return [s + n for s, n in zip(self.starts, self.query_lens, strict=True)]

    @property
    def query_starts(self) -> list[int]:
        """[B + 1] where each sequence's new tokens start among the T, then T."""
        return list(accumulate(self.query_lens, initial=0))

    @property
    def max_query_len(self) -> int:
        return max(self.query_lens)

    @property
    def width(self) -> int:
        """Block-table width: the most blocks any sequence holds."""
        return max(len(t) for t in self.tables)

    def padded_tables(self, width: int | None = None) -> list[list[int]]:
        """[B, width] block tables, padded with block 0."""
        width = width or self.width
        return [t + [0] * (width - len(t)) for t in self.tables]
