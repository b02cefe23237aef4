"""Loading Hugging Face checkpoint folders: shards, tied embeddings, dtypes, and
an error that names the problem for every kind of broken checkpoint."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from model_runtime.batch import SequenceChunk
from model_runtime.errors import CheckpointError, UnsupportedModelError
from model_runtime.loader import load_model
from model_runtime.random_checkpoint import save_random_checkpoint
from tests.conftest import hf_logits, random_tokens, runner_of


@pytest.fixture
def broken(qwen3_checkpoint: Path, tmp_path: Path) -> Path:
    """A copy of the tiny Qwen3 checkpoint to break."""
    return Path(shutil.copytree(qwen3_checkpoint, tmp_path / "broken"))


def rewrite_weights(folder: Path, edit) -> None:  # type: ignore[no-untyped-def]
    path = folder / "model.safetensors"
    tensors = load_file(path)
    edit(tensors)
    save_file(tensors, path, metadata={"format": "pt"})


def test_a_checkpoint_in_two_shards_loads_with_the_same_logits(tmp_path: Path) -> None:
    folder = save_random_checkpoint(
        tmp_path / "sharded", "Qwen2ForCausalLM", max_shard_size="150KB"
    )
    assert (folder / "model.safetensors.index.json").is_file()
    assert len(list(folder.glob("*.safetensors"))) >= 2
    tokens = random_tokens(12, seed=7)
    runner = runner_of(folder, num_blocks=8, dtype="float32")
    logits = runner.forward([SequenceChunk(1, tokens, num_logits=12)])
    assert (logits - hf_logits(folder, tokens)).abs().max().item() < 1e-4


def test_tied_embeddings_share_one_parameter(qwen3_checkpoint: Path) -> None:
    model = load_model(qwen3_checkpoint, dtype="float32")
    assert model.lm_head.weight is model.model.embed_tokens.weight


def test_auto_dtype_takes_the_checkpoints_dtype(tmp_path: Path) -> None:
    folder = save_random_checkpoint(tmp_path / "bf16", dtype="bfloat16")
    assert load_model(folder).lm_head.weight.dtype == torch.bfloat16
    assert load_model(folder, dtype="float32").lm_head.weight.dtype == torch.float32


def test_unknown_dtype_is_refused(qwen3_checkpoint: Path) -> None:
    with pytest.raises(ValueError, match="dtype 'float64' is not supported"):
        load_model(qwen3_checkpoint, dtype="float64")


def test_missing_config_is_named(broken: Path) -> None:
    (broken / "config.json").unlink()
    with pytest.raises(CheckpointError, match=r"has no config\.json"):
        load_model(broken)


def test_missing_weight_file_is_named(broken: Path) -> None:
    (broken / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"holds no \*.safetensors"):
        load_model(broken)


def test_missing_shard_is_named(tmp_path: Path) -> None:
    folder = save_random_checkpoint(tmp_path / "sharded", max_shard_size="150KB")
    shard = sorted(folder.glob("*.safetensors"))[-1]
    shard.unlink()
    with pytest.raises(CheckpointError, match=f"not in .*: {shard.name}"):
        load_model(folder)


def test_missing_tensor_is_named(broken: Path) -> None:
    rewrite_weights(broken, lambda t: t.pop("model.layers.1.self_attn.k_proj.weight"))
    with pytest.raises(
        CheckpointError, match=r"lacks tensors: model\.layers\.1\.self_attn\.k_proj\.weight"
    ):
        load_model(broken)


def test_shape_mismatch_is_named(broken: Path) -> None:
    def shrink(tensors: dict[str, torch.Tensor]) -> None:
        name = "model.layers.0.mlp.down_proj.weight"
        tensors[name] = tensors[name][:, :100].contiguous()

    rewrite_weights(broken, shrink)
    with pytest.raises(
        CheckpointError, match=r"model\.layers\.0\.mlp\.down_proj\.weight: expected size 128"
    ):
        load_model(broken)


def test_unexpected_tensor_is_named(broken: Path) -> None:
    rewrite_weights(broken, lambda t: t.update({"model.layers.0.extra.weight": torch.ones(2)}))
    with pytest.raises(
        CheckpointError, match=r"model\.layers\.0\.extra\.weight matches no parameter"
    ):
        load_model(broken)


def test_unsupported_tensor_dtype_is_named(broken: Path) -> None:
    def quantize(tensors: dict[str, torch.Tensor]) -> None:
        name = "model.layers.0.mlp.up_proj.weight"
        tensors[name] = tensors[name].to(torch.int8)

    rewrite_weights(broken, quantize)
    with pytest.raises(CheckpointError, match=r"up_proj\.weight .* has dtype torch\.int8"):
        load_model(broken)


def test_unknown_architecture_is_named(broken: Path) -> None:
    config = json.loads((broken / "config.json").read_text())
    config["architectures"] = ["GPT2LMHeadModel"]
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedModelError, match=r"'GPT2LMHeadModel' .* is not supported"):
        load_model(broken)


def test_corrupt_weight_file_is_named(broken: Path) -> None:
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(CheckpointError, match=r"cannot read .*model\.safetensors"):
        load_model(broken)
