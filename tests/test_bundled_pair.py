"""The trained demo pair that ships with the package: where its names resolve,
that both runtimes load it with the same logits, that it writes Python, and
that the draft agrees with the target far more often than chance."""

from __future__ import annotations

import ast
import sysconfig
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import specserve
from model_runtime.batch import SequenceChunk
from model_runtime.errors import CheckpointError
from model_runtime.resolve import BUNDLED_MODELS
from specserve.commands.generate import GenerateConfig, generate
from tests.conftest import runner_of

TARGET, DRAFT = "specserve/demo-target", "specserve/demo-draft"


def sample_text(num_tokens: int) -> list[int]:
    """Tokens of a standard-library file, as a user's code prompt would be."""
    text = (Path(sysconfig.get_paths()["stdlib"]) / "functools.py").read_text()
    tokenizer = AutoTokenizer.from_pretrained(specserve.resolve_model(TARGET))
    return list(tokenizer.encode(text)[:num_tokens])


def test_bundled_names_resolve_to_folders_inside_the_package() -> None:
    for name in (TARGET, DRAFT):
        folder = specserve.resolve_model(name)
        assert folder == BUNDLED_MODELS[name]
        assert (folder / "config.json").is_file()


def test_an_existing_folder_wins_over_a_bundled_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "specserve" / "demo-target").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert specserve.resolve_model(TARGET) == Path(TARGET)


def test_an_unknown_name_lists_what_was_tried(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError) as info:
        specserve.resolve_model("specserve/demo-nothing")
    message = str(info.value)
    assert "no folder specserve/demo-nothing" in message
    assert "not a bundled model (specserve/demo-target, specserve/demo-draft)" in message
    assert "not in the local Hugging Face cache" in message


def test_the_pair_is_small_half_precision_and_shares_a_tokenizer() -> None:
    total = 0
    for name in (TARGET, DRAFT):
        folder = specserve.resolve_model(name)
        total += sum(f.stat().st_size for f in folder.iterdir())
        model = AutoModelForCausalLM.from_pretrained(folder)
        assert model.dtype == torch.float16
    assert total < 40e6
    target_tok = (specserve.resolve_model(TARGET) / "tokenizer.json").read_text()
    assert target_tok == (specserve.resolve_model(DRAFT) / "tokenizer.json").read_text()


def test_the_tokenizer_has_a_chat_template() -> None:
    tokenizer = AutoTokenizer.from_pretrained(specserve.resolve_model(TARGET))
    messages = [{"role": "user", "content": "Write a loop."}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nWrite a loop.<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.parametrize("name", [TARGET, DRAFT])
def test_both_runtimes_give_the_same_logits(name: str) -> None:
    folder = specserve.resolve_model(name)
    tokens = sample_text(64)
    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        reference = hf(torch.tensor([tokens])).logits[0]
    runner = runner_of(folder, num_blocks=8, dtype="float32")
    ours = runner.forward([SequenceChunk(1, tokens, num_logits=len(tokens))])
    assert (ours - reference).abs().max().item() < 1e-4


def test_the_target_continues_a_function_with_python() -> None:
    prompt = "def fibonacci(n):"
    text, _ = generate(GenerateConfig(prompt=prompt, max_tokens=64, dtype="float32"))
    lines = (prompt + text).splitlines()
    # The longest prefix of whole lines that parses: a docstring and statements.
    parsed = max(k for k in range(1, len(lines) + 1) if _parses("\n".join(lines[:k])))
    assert parsed >= 6, prompt + text


def _parses(source: str) -> bool:
    try:
        ast.parse(source)
    except SyntaxError:
        return False
    return True


@torch.no_grad()
def test_the_draft_agrees_with_the_target_far_above_chance() -> None:
    tokens = sample_text(512)
    logits = {}
    for name in (TARGET, DRAFT):
        runner = runner_of(specserve.resolve_model(name), num_blocks=40, dtype="float32")
        logits[name] = runner.forward([SequenceChunk(1, tokens, num_logits=len(tokens))])
    p, q = torch.softmax(logits[TARGET], -1), torch.softmax(logits[DRAFT], -1)
    greedy = (p.argmax(-1) == q.argmax(-1)).float().mean().item()
    alpha = torch.minimum(p, q).sum(-1).mean().item()
    chance = 1 / p.shape[-1]
    # Held-out measurements give 0.64 (benchmarks/results/demo_pair.md).
    assert greedy > 0.4 and alpha > 0.4, (greedy, alpha, chance)
