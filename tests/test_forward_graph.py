"""The decode and verify forward traces as one graph: no host synchronisation
and no control flow that depends on tensor values, so that CUDA graphs can
capture it for fixed batch sizes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from model_runtime.batch import SequenceChunk
from tests.conftest import random_tokens, runner_of


# Mistral has a sliding window, Qwen3 q/k norms: both paths must stay traceable.
@pytest.mark.parametrize("arch", ["MistralForCausalLM", "Qwen3ForCausalLM"])
def test_verify_step_compiles_without_graph_breaks(checkpoints: dict[str, Path], arch: str) -> None:
    runner = runner_of(checkpoints[arch], num_blocks=32, block_size=4, dtype="float32")
    runner.forward([SequenceChunk(1, random_tokens(9, 1)), SequenceChunk(2, random_tokens(5, 2))])
    batch = runner.prepare([SequenceChunk(1, [3, 4, 5], 3), SequenceChunk(2, [6, 7, 8], 3)])

    # fullgraph=True raises on any graph break (.item(), data-dependent if, ...).
    compiled = torch.compile(runner.execute, backend="eager", fullgraph=True)
    with torch.inference_mode():
        logits = compiled(batch)
    assert logits.shape == (6, runner.vocab_size)
