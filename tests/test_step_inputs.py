"""A step padded to its bucket, as a CUDA graph replays it, gives the
unpadded step's logits and writes the keys and values of its own tokens
only; and which batches a captured step takes. (The padded forward runs the
Triton kernels through the interpreter; capture and replay need a GPU.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from model_runtime.batch import SequenceChunk
from model_runtime.graphs import padded_forward
from model_runtime.kernels.paged_attention import paged_attention, query_block, split_counts
from model_runtime.kv_cache import blocks_for
from model_runtime.ops import triton_ops
from model_runtime.ops.triton_ops import TritonOps
from model_runtime.runner import WARM_UP_SEQ, ModelRunner
from model_runtime.step_inputs import (
    MAX_GRAPH_TOKENS,
    StepInputs,
    StepShape,
    buckets_up_to,
    shape_for,
    startup_shapes,
)
from tests.conftest import random_tokens, runner_of


@pytest.fixture
def runner(qwen3_checkpoint: Path) -> ModelRunner:
    runner = runner_of(qwen3_checkpoint, num_blocks=64, block_size=4, dtype="float32")
    config = runner.model.config
    runner.ops = TritonOps(
        runner.model.num_kv_heads_per_rank, config.num_attention_heads // config.num_key_value_heads
    )
    for seq, length in ((1, 9), (2, 5), (3, 13), (4, 7)):
        runner.forward([SequenceChunk(seq, random_tokens(length, seq))])
    return runner


# Padding tokens compute on whatever memory held (their rows are dropped).
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")


def padded_and_eager(
    runner: ModelRunner,
    chunks: list[SequenceChunk],
    token_ids: torch.Tensor | None = None,
    inputs: StepInputs | None = None,
) -> tuple[StepShape, torch.Tensor, torch.Tensor]:
    """(shape, padded logits, eager logits), after checking that the padded
    step wrote what the eager one wrote (up to rounding: the matmuls see
    more rows) and nothing else."""
    cache = runner.kv_cache
    batch = runner.plan(chunks)  # both runs write the same slots
    before = cache.pool.clone()
    prepared = runner.to_device(batch)
    if token_ids is not None:
        prepared.input_ids = token_ids
    eager = runner.execute(prepared)
    eager_pool = cache.pool.clone()
    cache.pool.copy_(before)

    shape = shape_for(batch, buckets_up_to(8))
    assert shape is not None
    width = blocks_for(runner.max_positions, cache.block_size)
    inputs = inputs or StepInputs(8, width, runner.device)
    inputs.load(shape, batch, token_ids)
    assert isinstance(runner.ops, TritonOps)
    logits = padded_forward(runner.model, cache, runner.ops, inputs, shape, runner.max_positions)
    written = eager_pool != before
    assert torch.equal(cache.pool[~written], before[~written])
    assert torch.allclose(cache.pool, eager_pool, atol=1e-5)
    return shape, logits[: len(batch.logits_indices)], eager


def test_a_padded_decode_step_gives_the_eager_logits_and_writes_nothing_else(
    runner: ModelRunner,
) -> None:
    chunks = [SequenceChunk(seq, [7 * seq]) for seq in (1, 2, 3)]
    shape, padded, eager = padded_and_eager(runner, chunks)
    assert shape == StepShape(4, 1, False)  # three sequences padded to four
    assert torch.allclose(padded, eager, atol=1e-5)


def test_a_padded_verify_step_gives_the_eager_logits(runner: ModelRunner) -> None:
    chunks = [
        SequenceChunk(1, [3, 4, 5, 6], num_logits=4),
        SequenceChunk(3, [8, 9], num_logits=2),  # fewer drafts: ragged
        SequenceChunk(4, [10, 11, 12], num_logits=3),
    ]
    shape, padded, eager = padded_and_eager(runner, chunks)
    assert shape == StepShape(4, 4, True)  # a padding sequence and padding tokens
    assert torch.allclose(padded, eager, atol=1e-5)


def test_a_smaller_batch_after_a_larger_one_reads_nothing_stale(runner: ModelRunner) -> None:
    width = blocks_for(runner.max_positions, runner.kv_cache.block_size)
    inputs = StepInputs(8, width, runner.device)  # reused, as a replayed graph's are
    larger = [SequenceChunk(seq, [seq]) for seq in (3, 1, 4, 2)]
    padded_and_eager(runner, larger, inputs=inputs)
    for seq in (1, 2, 3, 4):
        runner.truncate(seq, runner.kv_cache.num_tokens(seq) - 1)
    shape, padded, eager = padded_and_eager(runner, larger[1:], inputs=inputs)
    assert shape == StepShape(4, 1, False)
    assert torch.allclose(padded, eager, atol=1e-5)


def test_a_draft_first_step_of_one_or_two_tokens_gives_the_eager_logits(
    runner: ModelRunner,
) -> None:
    chunks = [SequenceChunk(1, [1, 2]), SequenceChunk(2, [3])]
    shape, padded, eager = padded_and_eager(runner, chunks)
    assert shape == StepShape(2, 2, False)
    assert torch.allclose(padded, eager, atol=1e-5)


def test_a_draft_step_takes_its_tokens_from_the_device(runner: ModelRunner) -> None:
    chunks = [SequenceChunk(seq, [0]) for seq in (2, 3)]  # the tokens only count them
    shape, padded, eager = padded_and_eager(runner, chunks, torch.tensor([11, 12]))
    for seq in (2, 3):
        runner.truncate(seq, runner.kv_cache.num_tokens(seq) - 1)
    reference = runner.forward([SequenceChunk(2, [11]), SequenceChunk(3, [12])])
    assert shape == StepShape(2, 1, False)
    assert torch.allclose(padded, reference, atol=1e-5)
    assert torch.allclose(eager, reference, atol=1e-5)


def test_only_decode_draft_and_verify_batches_fit_a_captured_step(runner: ModelRunner) -> None:
    buckets = buckets_up_to(8)

    def shape(chunks: list[SequenceChunk]) -> StepShape | None:
        batch = runner.plan(chunks)
        for c in chunks:
            runner.kv_cache.truncate(
                c.seq_id, runner.kv_cache.num_tokens(c.seq_id) - len(c.token_ids)
            )
        return shape_for(batch, buckets)

    # a draft's first step: one or two new tokens, the last one's logits
    assert shape([SequenceChunk(1, [1, 2]), SequenceChunk(2, [3])]) == StepShape(2, 2, False)
    assert shape([SequenceChunk(s, [1]) for s in range(1, 4)]) == StepShape(4, 1, False)
    assert shape([SequenceChunk(1, [1, 2, 3], num_logits=3)]) == StepShape(1, 3, True)
    assert shape([SequenceChunk(9, random_tokens(7, 9))]) is None  # a prefill runs eagerly
    too_many = [SequenceChunk(s, [1]) for s in range(10, 19)]
    assert shape(too_many) is None  # nine sequences, more than the largest bucket


def test_a_verifying_runner_captures_every_k_and_the_drafts_catch_up_at_startup() -> None:
    buckets = buckets_up_to(64)
    shapes = set(startup_shapes(buckets, query_len=6))  # a target verifying up to 5 drafts
    for b in buckets:
        assert StepShape(b, 1, False) in shapes  # decode, k = 0
        assert StepShape(b, 2, False) in shapes  # a draft catching up two tokens
        for q in range(2, 7):
            assert StepShape(b, q, True) in shapes  # verify k = q - 1
    assert len(shapes) == len(buckets) * (2 + 5)


def test_a_decoding_runner_captures_only_decode_steps_and_no_shape_past_the_token_limit() -> None:
    buckets = buckets_up_to(256)
    assert startup_shapes(buckets, 1) == [StepShape(b, 1, False) for b in reversed(buckets)]
    shapes = startup_shapes(buckets, 16)
    assert all(s.tokens <= MAX_GRAPH_TOKENS for s in shapes if s.every_logit)
    assert shapes[0].rows == max(s.rows for s in shapes)  # largest first: it sets the pool


def test_startup_compiles_every_attention_variant_an_eager_step_can_pick_and_no_cache_changes(
    runner: ModelRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The tile size and the split count are compile-time constants of the
    # kernel: one not compiled at startup stalls a catch-up mid-run (0.5 s seen
    # on an H100 when a draft caught up at batch 2 on longer sequences).
    ops = runner.ops
    assert isinstance(ops, TritonOps)
    compiled: set[tuple[int, int]] = set()

    def recording(q: torch.Tensor, *args: Any) -> torch.Tensor:
        max_query_len, num_splits = args[5], args[8]
        compiled.add((query_block(max_query_len, ops.group), num_splits))
        return paged_attention(q, *args)

    monkeypatch.setattr(triton_ops, "paged_attention", recording)
    free, held = runner.kv_cache.num_free_blocks, runner.kv_cache.num_tokens(1)
    runner.compile_attention_variants()
    assert runner.kv_cache.num_free_blocks == free and runner.kv_cache.num_tokens(1) == held
    assert WARM_UP_SEQ not in runner.kv_cache
    longest = min(runner.max_positions, runner.limits.max_tokens)
    for batch in (1, 2, 3, 4, 8, 16, 64, 256):
        for max_q in range(1, longest + 1):
            for max_keys in {max_q, 64, 65, 129, runner.max_positions}:
                if max_keys >= max_q:
                    picked = (query_block(max_q, ops.group), ops.num_splits(batch, max_q, max_keys))
                    assert picked in compiled, (batch, max_q, max_keys)


def test_an_eager_runner_compiles_the_attention_variants_before_serving_and_captures_nothing(
    runner: ModelRunner,
) -> None:
    # enforce_eager: every step is eager and picks a variant, so each would
    # otherwise compile the first time a round meets it.
    before, before_s = runner.counts.eager, runner.counts.eager_s
    runner.ready_steps(max_batch=4, query_len=6, enforce_eager=True)
    assert runner.graphs is None
    assert runner.counts.eager - before >= len(split_counts(runner.max_positions))
    assert runner.counts.eager_s > before_s  # the compiles' seconds count with them


def test_the_attention_kernel_compiles_nothing_new_for_a_longer_table_or_query() -> None:
    # Triton specialises integer arguments equal to 1 or divisible by 16 into
    # kernel variants; the block table's width and the query tile count vary
    # with the batch, so a variant per value would compile mid-run (half a
    # second, seen on the GPU when a draft caught up after rounds without drafts).
    # The interpreter keeps no specialisation: ask the compiled kernel's.
    script = (
        "from model_runtime.kernels.paged_attention import _attend_tile as f;"
        "print(sorted(p.name for p in f.params if p.do_not_specialize))"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "['q_tiles', 'stride_bt']"
