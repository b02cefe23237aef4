"""Our Llama-family models give transformers' logits (float32, CPU) for a
prefill, for decoding token by token through the paged cache, for a batch of
decode steps, and for one ragged batch that mixes a prefill, a decode step
and a verify chunk: through the PyTorch kernels and (all but the token-by-token
decode) through the Triton ones, interpreted on the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from model_runtime.batch import SequenceChunk
from model_runtime.ops.triton_ops import TritonOps
from model_runtime.runner import ModelRunner
from tests.conftest import ARCHITECTURES, hf_logits, random_tokens, runner_of

TOLERANCE = 1e-4
SEQ_LEN = 20


def runner_for(folder: Path, ops: str, block_size: int = 4) -> ModelRunner:
    # A small block size makes every sequence span several blocks.
    runner = runner_of(folder, num_blocks=64, block_size=block_size, dtype="float32")
    if ops == "triton":
        config = runner.model.config
        runner.ops = TritonOps(
            runner.model.num_kv_heads_per_rank,
            config.num_attention_heads // config.num_key_value_heads,
        )
    return runner


@pytest.fixture(params=["torch", "triton"])
def ops(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def assert_close(ours: torch.Tensor, reference: torch.Tensor) -> None:
    assert ours.shape == reference.shape
    diff = (ours - reference).abs().max().item()
    assert diff < TOLERANCE, f"max abs difference {diff:.3g} >= {TOLERANCE}"


@pytest.fixture(params=sorted(ARCHITECTURES))
def case(
    request: pytest.FixtureRequest, checkpoints: dict[str, Path]
) -> tuple[Path, list[int], torch.Tensor]:
    folder = checkpoints[request.param]
    tokens = random_tokens(SEQ_LEN, seed=1)
    return folder, tokens, hf_logits(folder, tokens)


def test_reference_logits_are_not_trivial(case: tuple[Path, list[int], torch.Tensor]) -> None:
    # Logits that barely vary would let a broken runtime pass the tolerance.
    _, _, reference = case
    assert reference.std().item() > 0.3


def test_prefill_matches(case: tuple[Path, list[int], torch.Tensor], ops: str) -> None:
    folder, tokens, reference = case
    runner = runner_for(folder, ops)
    assert_close(runner.forward([SequenceChunk(1, tokens, num_logits=SEQ_LEN)]), reference)


def test_decode_through_paged_cache_matches(case: tuple[Path, list[int], torch.Tensor]) -> None:
    # Through the PyTorch path; the Triton one decodes in the ragged batch below
    # (token by token it would take the interpreter a minute).
    folder, tokens, reference = case
    runner = runner_for(folder, "torch")
    steps = [runner.forward([SequenceChunk(7, tokens[:3], num_logits=3)])]
    steps += [runner.forward([SequenceChunk(7, [t])]) for t in tokens[3:]]
    assert_close(torch.cat(steps), reference)


def test_ragged_batch_of_prefill_decode_and_verify_matches(
    case: tuple[Path, list[int], torch.Tensor], ops: str
) -> None:
    folder, tokens, reference = case
    other = random_tokens(SEQ_LEN, seed=2)
    other_reference = hf_logits(folder, other)
    runner = runner_for(folder, ops)
    # Sequence 1 already holds 13 tokens and decodes one more; sequence 2
    # holds 9 and verifies 6 (last token + 5 drafts); sequence 3 is new.
    runner.forward([SequenceChunk(1, tokens[:13]), SequenceChunk(2, other[:9])])
    logits = runner.forward(
        [
            SequenceChunk(3, tokens[:11], num_logits=2),
            SequenceChunk(1, tokens[13:14]),
            SequenceChunk(2, other[9:15], num_logits=6),
        ]
    )
    expected = torch.cat([reference[9:11], reference[13:14], other_reference[9:15]])
    assert_close(logits, expected)


def test_a_batch_of_decode_steps_matches(
    case: tuple[Path, list[int], torch.Tensor], ops: str
) -> None:
    folder, tokens, reference = case
    runner = runner_for(folder, ops)
    runner.forward([SequenceChunk(1, tokens[:12]), SequenceChunk(2, tokens[:17])])
    logits = runner.forward([SequenceChunk(1, tokens[12:13]), SequenceChunk(2, tokens[17:18])])
    assert_close(logits, torch.cat([reference[12:13], reference[17:18]]))


def test_half_precision_stays_close_to_float32(qwen3_checkpoint: Path) -> None:
    tokens = random_tokens(SEQ_LEN, seed=3)
    reference = hf_logits(qwen3_checkpoint, tokens)
    for name, dtype in (("bfloat16", torch.bfloat16), ("float16", torch.float16)):
        runner = runner_of(qwen3_checkpoint, num_blocks=16, dtype=name)
        assert runner.model.lm_head.weight.dtype == dtype
        logits = runner.forward([SequenceChunk(1, tokens, num_logits=SEQ_LEN)]).float()
        assert (logits - reference).abs().max().item() < 0.1 * reference.abs().max().item()
