"""The paged KV cache: one preallocated pool of fixed-size blocks.

Token ``p`` of a sequence lives in slot ``block_table[p // block_size] *
block_size + p % block_size`` of every layer's key and value pools. Blocks come
from a free list; a sequence grows by appending tokens and shrinks by
truncating to a length, which is how rejected drafts are rolled back. Host-side
bookkeeping (block tables, lengths) lives here; the device holds only the pool.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import torch


class OutOfBlocksError(RuntimeError):
    """The pool has fewer free blocks than an append needs; nothing was changed."""


class KVCacheIntegrityError(RuntimeError):
    """The block bookkeeping contradicts itself: a bug, never a user error."""


@dataclass
class SequenceBlocks:
    block_ids: list[int] = field(default_factory=list)
    num_tokens: int = 0


def blocks_for(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


class PagedKVCache:
    """Keys and values of every layer for every sequence, in one block pool.

    ``pool`` is ``[num_layers, 2 (key, value), num_blocks, block_size,
    num_kv_heads, head_dim]``.
    """

    def __init__(
        self,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        num_blocks: int,
        block_size: int,
        dtype: torch.dtype,
        device: torch.device | str = "cpu",
    ):
        if num_blocks < 1 or block_size < 1:
            raise ValueError(
                f"need num_blocks >= 1 and block_size >= 1, got {num_blocks}, {block_size}"
            )
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.pool = torch.zeros(
            num_layers,
            2,
            num_blocks,
            block_size,
            num_kv_heads,
            head_dim,
            dtype=dtype,
            device=device,
        )
        self._free: deque[int] = deque(range(num_blocks))
        self._seqs: dict[int, SequenceBlocks] = {}

    @staticmethod
    def bytes_per_block(
        num_layers: int, num_kv_heads: int, head_dim: int, block_size: int, dtype: torch.dtype
    ) -> int:
        item = torch.empty((), dtype=dtype).element_size()
        return num_layers * 2 * block_size * num_kv_heads * head_dim * item

    def layer(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Key and value pools of one layer, each [num_blocks, block_size, Hkv, D]."""
        return self.pool[index, 0], self.pool[index, 1]

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    def __contains__(self, seq_id: int) -> bool:
        return seq_id in self._seqs

    def num_tokens(self, seq_id: int) -> int:
        """Tokens held for ``seq_id``; 0 for a sequence this cache does not know."""
        seq = self._seqs.get(seq_id)
        return 0 if seq is None else seq.num_tokens

    def block_table(self, seq_id: int) -> list[int]:
        return list(self._seqs[seq_id].block_ids)

    def blocks_needed(self, seq_id: int, num_new_tokens: int) -> int:
        """Free blocks that appending ``num_new_tokens`` to ``seq_id`` would take."""
        seq = self._seqs.get(seq_id, SequenceBlocks())
        return blocks_for(seq.num_tokens + num_new_tokens, self.block_size) - len(seq.block_ids)

    def append(self, seq_id: int, num_new_tokens: int) -> list[int]:
        """Grow ``seq_id`` by ``num_new_tokens`` and return their slots.

        A new ``seq_id`` starts empty. Raises OutOfBlocksError, changing
        nothing, when the pool cannot hold the new tokens.
        """
        needed = self.blocks_needed(seq_id, num_new_tokens)
        if needed > len(self._free):
            raise OutOfBlocksError(
                f"sequence {seq_id} needs {needed} more KV blocks, {len(self._free)} are free"
            )
        seq = self._seqs.setdefault(seq_id, SequenceBlocks())
        seq.block_ids.extend(self._free.popleft() for _ in range(needed))
        start = seq.num_tokens
        seq.num_tokens += num_new_tokens
        return self.slots(seq_id, start, seq.num_tokens)

    def slots(self, seq_id: int, start: int, end: int) -> list[int]:
        """Slots of token positions [start, end) of ``seq_id``."""
        ids, bs = self._seqs[seq_id].block_ids, self.block_size
        return [ids[p // bs] * bs + p % bs for p in range(start, end)]

    def truncate(self, seq_id: int, length: int) -> None:
        """Keep the first ``length`` tokens of ``seq_id`` and free the blocks past them."""
        seq = self._seqs[seq_id]
        if not 0 <= length <= seq.num_tokens:
            raise ValueError(
                f"cannot truncate sequence {seq_id} of {seq.num_tokens} tokens to {length}"
            )
        keep = blocks_for(length, self.block_size)
        self._free.extend(seq.block_ids[keep:])
        del seq.block_ids[keep:]
        seq.num_tokens = length

    def free(self, seq_id: int) -> bool:
        """Release every block of ``seq_id``; False if it was not known."""
        seq = self._seqs.pop(seq_id, None)
        if seq is None:
            return False
        self._free.extend(seq.block_ids)
        return True

    def check_integrity(self) -> None:
        """Raise KVCacheIntegrityError unless every block is free or owned by
        exactly one sequence, and every sequence owns exactly the blocks its
        length needs."""
        owner: dict[int, object] = {}
        for block in self._free:
            if block in owner:
                raise KVCacheIntegrityError(f"block {block} is on the free list twice")
            owner[block] = "free"
        for seq_id, seq in self._seqs.items():
            expected = blocks_for(seq.num_tokens, self.block_size)
            if len(seq.block_ids) != expected:
                raise KVCacheIntegrityError(
                    f"sequence {seq_id} holds {seq.num_tokens} tokens in "
                    f"{len(seq.block_ids)} blocks, needs {expected}"
                )
            for block in seq.block_ids:
                if block in owner:
                    raise KVCacheIntegrityError(
                        f"block {block} of sequence {seq_id} is also owned by {owner[block]}"
                    )
                owner[block] = f"sequence {seq_id}"
        if sorted(owner) != list(range(self.num_blocks)):
            lost = sorted(set(range(self.num_blocks)) - set(owner))
            stray = sorted(set(owner) - set(range(self.num_blocks)))
            raise KVCacheIntegrityError(f"blocks lost: {lost}; ids out of range: {stray}")
