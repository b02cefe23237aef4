"""The paged KV cache: appending, truncating (the rollback of rejected drafts),
freeing, and the integrity check."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from model_runtime.batch import SequenceChunk
from model_runtime.kv_cache import KVCacheIntegrityError, OutOfBlocksError, PagedKVCache
from tests.conftest import random_tokens, runner_of


def small_cache(num_blocks: int = 8, block_size: int = 4) -> PagedKVCache:
    return PagedKVCache(
        num_layers=1,
        num_kv_heads=1,
        head_dim=2,
        num_blocks=num_blocks,
        block_size=block_size,
        dtype=torch.float32,
    )


def test_append_returns_the_slots_of_the_new_positions() -> None:
    cache = small_cache()
    first = cache.append(1, 6)
    table = cache.block_table(1)
    assert len(table) == 2
    assert first == [table[0] * 4 + i for i in range(4)] + [table[1] * 4, table[1] * 4 + 1]
    assert cache.append(1, 3) == [table[1] * 4 + 2, table[1] * 4 + 3, cache.block_table(1)[2] * 4]
    assert cache.num_tokens(1) == 9


def test_truncate_frees_only_the_blocks_past_the_new_length() -> None:
    cache = small_cache()
    cache.append(1, 9)  # 3 blocks
    cache.truncate(1, 5)
    assert cache.num_tokens(1) == 5 and len(cache.block_table(1)) == 2
    assert cache.num_free_blocks == 6
    cache.truncate(1, 0)
    assert cache.num_free_blocks == 8
    cache.check_integrity()


def test_truncate_past_the_end_is_refused() -> None:
    cache = small_cache()
    cache.append(1, 3)
    with pytest.raises(ValueError, match="cannot truncate"):
        cache.truncate(1, 4)


def test_append_beyond_the_pool_changes_nothing() -> None:
    cache = small_cache(num_blocks=2)
    cache.append(1, 5)
    with pytest.raises(OutOfBlocksError, match="needs 1 more KV blocks, 0 are free"):
        cache.append(1, 4)
    assert cache.num_tokens(1) == 5
    cache.check_integrity()


def test_integrity_check_catches_a_block_owned_twice() -> None:
    cache = small_cache()
    cache.append(1, 4)
    cache.append(2, 4)
    cache._seqs[2].block_ids[0] = cache._seqs[1].block_ids[0]
    with pytest.raises(KVCacheIntegrityError, match="also owned by sequence 1"):
        cache.check_integrity()


def test_integrity_check_catches_a_lost_block() -> None:
    cache = small_cache()
    cache.append(1, 4)
    cache._seqs[1].block_ids.clear()
    cache._seqs[1].num_tokens = 0
    with pytest.raises(KVCacheIntegrityError, match="lost"):
        cache.check_integrity()


def test_integrity_check_catches_a_length_without_blocks() -> None:
    cache = small_cache()
    cache.append(1, 4)
    cache._seqs[1].num_tokens = 5
    with pytest.raises(KVCacheIntegrityError, match="needs 2"):
        cache.check_integrity()


def test_truncate_then_append_reproduces_the_logits(qwen3_checkpoint: Path) -> None:
    runner = runner_of(qwen3_checkpoint, num_blocks=32, block_size=4, dtype="float32")
    prefix, accepted, rejected = random_tokens(10, 4), random_tokens(3, 5), random_tokens(5, 6)
    runner.forward([SequenceChunk(1, prefix)])
    verify = runner.forward([SequenceChunk(1, accepted + rejected, num_logits=8)])
    # Reject the last 5 drafts, then append the other 5 tokens again.
    runner.truncate(1, len(prefix) + len(accepted))
    again = runner.forward([SequenceChunk(1, rejected, num_logits=5)])
    assert torch.allclose(again, verify[3:], atol=1e-5)
    # And different tokens after the rollback see the rolled-back context only.
    runner.truncate(1, len(prefix))
    fresh = runner.forward([SequenceChunk(2, prefix + accepted, num_logits=3)])
    assert torch.allclose(
        runner.forward([SequenceChunk(1, accepted, num_logits=3)]), fresh, atol=1e-5
    )
    runner.kv_cache.check_integrity()


def test_every_block_is_free_after_all_sequences_are_freed(qwen3_checkpoint: Path) -> None:
    runner = runner_of(qwen3_checkpoint, num_blocks=32, block_size=4, dtype="float32")
    runner.forward([SequenceChunk(s, random_tokens(3 + 4 * s, s)) for s in range(4)])
    runner.forward([SequenceChunk(s, [5, 6]) for s in range(4)])
    assert runner.kv_cache.num_free_blocks < 32
    runner.kv_cache.check_integrity()
    for s in range(4):
        assert runner.free(s)
    assert runner.kv_cache.num_free_blocks == 32
    runner.kv_cache.check_integrity()


def test_a_batch_that_does_not_fit_leaves_every_sequence_as_it_was(qwen3_checkpoint: Path) -> None:
    runner = runner_of(qwen3_checkpoint, num_blocks=4, block_size=4, dtype="float32")
    runner.forward([SequenceChunk(1, random_tokens(6, 1))])
    with pytest.raises(OutOfBlocksError):
        runner.forward([SequenceChunk(1, [3]), SequenceChunk(2, random_tokens(12, 2))])
    assert runner.kv_cache.num_tokens(1) == 6 and 2 not in runner.kv_cache
    runner.kv_cache.check_integrity()


def test_bad_chunks_are_refused_with_their_reason(qwen3_checkpoint: Path) -> None:
    runner = runner_of(
        qwen3_checkpoint, num_blocks=16, block_size=4, dtype="float32", max_model_len=16
    )
    with pytest.raises(ValueError, match="outside the vocabulary"):
        runner.forward([SequenceChunk(1, [1, 100000])])
    with pytest.raises(ValueError, match="maximum model length 16"):
        runner.forward([SequenceChunk(1, random_tokens(17, 1))])
    with pytest.raises(ValueError, match="appears twice"):
        runner.forward([SequenceChunk(1, [1]), SequenceChunk(1, [2])])
    with pytest.raises(ValueError, match="at least one new token"):
        SequenceChunk(1, [])
    assert runner.kv_cache.num_free_blocks == 16
