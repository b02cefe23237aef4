"""The realistic-shape pair of benchmarks/shapes.py, built at a tiny width,
with a draft as wide as the target and with a narrower one: its acceptance is
set by one scale, and it loads like any checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from benchmarks.shapes import bundled_tokenizer, save, set_scale, speculative_pair
from specserve import LLM, SamplingParams

TINY = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=6,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    vocab_size=512,
    tie_word_embeddings=False,
)
# Half the width, half the inner size, fewer query heads per key/value head.
NARROW = {**TINY, "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2}
DRAFT_LAYERS = 2


@pytest.fixture(scope="module", params=[None, NARROW], ids=["same-width", "narrow"])
def pair(request: pytest.FixtureRequest) -> tuple[torch.nn.Module, torch.nn.Module, dict]:
    target, draft = speculative_pair(
        TINY, DRAFT_LAYERS, eos=0, dtype=torch.float32, draft_shape=request.param
    )
    return target, draft, {}


def logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits[0]


def test_at_scale_zero_the_draft_computes_the_targets_logits(pair: tuple) -> None:
    target, draft, base = pair
    set_scale(target, DRAFT_LAYERS, 0.0, base)
    ids = torch.randint(0, TINY["vocab_size"], (1, 24))
    torch.testing.assert_close(logits(target, ids), logits(draft, ids), rtol=1e-4, atol=1e-4)


def test_a_larger_scale_moves_the_target_away_from_its_draft(pair: tuple) -> None:
    target, draft, base = pair
    ids = torch.randint(0, TINY["vocab_size"], (1, 64))
    set_scale(target, DRAFT_LAYERS, 5.0, base)
    agree = (logits(target, ids).argmax(-1) == logits(draft, ids).argmax(-1)).float().mean()
    assert agree < 0.9


def test_the_draft_is_written_into_the_targets_first_layers(pair: tuple) -> None:
    target, draft, _ = pair
    width = draft.config.hidden_size
    assert len(draft.model.layers) == DRAFT_LAYERS
    assert len(target.model.layers) == TINY["num_hidden_layers"]
    embedding = target.model.embed_tokens.weight
    torch.testing.assert_close(embedding[:, :width], draft.model.embed_tokens.weight)
    assert not embedding[:, width:].any()
    torch.testing.assert_close(target.lm_head.weight[:, :width], draft.lm_head.weight)


def test_a_draft_wider_than_its_target_is_refused() -> None:
    wide = {**TINY, "hidden_size": 128}
    with pytest.raises(ValueError, match="no wider than the target"):
        speculative_pair(TINY, DRAFT_LAYERS, eos=0, dtype=torch.float32, draft_shape=wide)


def test_a_saved_pair_at_scale_zero_accepts_every_greedy_draft(pair: tuple, tmp_path: Path) -> None:
    target, draft, base = pair
    set_scale(target, DRAFT_LAYERS, 0.0, base)
    tokenizer = bundled_tokenizer()
    target_dir = save(target, tmp_path / "target", tokenizer)
    draft_dir = save(draft, tmp_path / "draft", tokenizer)
    spec = {"model": str(draft_dir), "num_speculative_tokens": 3}
    llm = LLM(str(target_dir), dtype="float32", max_model_len=128, speculative_config=spec)
    params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    llm.generate([{"prompt_token_ids": [5, 9, 33, 2]}], params, use_tqdm=False)
    metrics = llm.speculation_stats()
    assert metrics["num_draft_tokens"] > 0
    assert metrics["acceptance_rate"] == 1.0


def test_a_pair_written_at_a_scale_loads_with_the_shapes_asked_for(tmp_path: Path) -> None:
    from benchmarks.shapes import save_pair
    from model_runtime.config import ModelConfig

    target_dir, draft_dir = save_pair(tmp_path, 0.0, DRAFT_LAYERS, TINY, NARROW)
    target, draft = ModelConfig.from_pretrained(target_dir), ModelConfig.from_pretrained(draft_dir)
    assert (target.hidden_size, target.num_hidden_layers) == (64, 6)
    assert (draft.hidden_size, draft.num_hidden_layers) == (32, DRAFT_LAYERS)
