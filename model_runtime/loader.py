"""Building a model from a checkpoint folder and loading its weights by name."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from model_runtime.checkpoint import iterate_tensors
from model_runtime.config import ModelConfig, resolve_dtype
from model_runtime.distributed import SINGLE_DEVICE, TensorParallelGroup
from model_runtime.errors import CheckpointError
from model_runtime.layers.linear import copy_checked
from model_runtime.models.llama import MODELS, LlamaForCausalLM

# Checkpoint tensors that carry nothing we need (older Llama checkpoints store
# the rotary frequencies; we compute them).
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


def load_model(
    folder: str | Path,
    dtype: str | torch.dtype = "auto",
    device: str | torch.device = "cpu",
    tp: TensorParallelGroup = SINGLE_DEVICE,
    max_positions: int | None = None,
) -> LlamaForCausalLM:
    """Build the checkpoint's architecture and load this rank's shard of its weights.

    ``max_positions`` bounds the rotary tables (default: the model's
    max_position_embeddings).
    """
    folder = Path(folder)
    config = ModelConfig.from_pretrained(folder)
    torch_dtype = resolve_dtype(dtype, config.hf_config)
    # Parameters are made directly in their final dtype and device, so a
    # model never needs twice its memory while loading. (Rotary tables are
    # made float32 explicitly and stay so.)
    with default_dtype(torch_dtype), torch.device(device):
        model = MODELS[config.architecture](
            config, tp, max_positions or config.max_position_embeddings
        )
    load_weights(model, folder)
    return model.eval()


@contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """Make ``dtype`` torch's default while building a model, then restore it.

    torch's default dtype is process-wide: build models from one thread.
    """
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def _parameter_for(model: LlamaForCausalLM, name: str) -> tuple[str, str | int | None]:
    """Map a checkpoint tensor name to (parameter name, shard id)."""
    for part, (fused, shard_id) in model.PACKED_MODULES.items():
        if f".{part}." in name:
            return name.replace(f".{part}.", f".{fused}."), shard_id
    return name, None


def load_weights(model: LlamaForCausalLM, folder: Path) -> None:
    """Copy every checkpoint tensor into the parameter of the same name.

    Raises CheckpointError for a tensor with no parameter, a tensor of the
    wrong shape, and a parameter (or a part of a fused one) that no tensor
    filled.
    """
    params = dict(model.named_parameters())
    needed: dict[str, set[str | int | None]] = {name: {None} for name in params}
    for fused, part_id in model.PACKED_MODULES.values():
        for name in params:
            if f".{fused}." in name:
                needed[name].discard(None)
                needed[name].add(part_id)

    for ckpt_name, tensor in iterate_tensors(folder):
        if ckpt_name.endswith(IGNORED_SUFFIXES):
            continue
        if ckpt_name == "lm_head.weight" and model.config.tie_word_embeddings:
            continue  # the LM head is the embedding
        name, shard_id = _parameter_for(model, ckpt_name)
        param = params.get(name)
        if param is None:
            raise CheckpointError(
                f"checkpoint tensor {ckpt_name} matches no parameter of "
                f"{model.config.architecture}; is config.json from the same model?"
            )
        try:
            loader = getattr(param, "weight_loader", None)
            if loader is None:
                copy_checked(param, tensor)
            else:
                loader(param, tensor, shard_id)
        except ValueError as e:
            raise CheckpointError(f"checkpoint tensor {ckpt_name}: {e}") from e
        needed[name].discard(shard_id)

    missing = sorted(_checkpoint_name(model, n, s) for n, left in needed.items() for s in left)
    if missing:
        raise CheckpointError(f"{folder} lacks tensors: {', '.join(missing)}")


def _checkpoint_name(model: nn.Module, param_name: str, shard_id: str | int | None) -> str:
    """The checkpoint name a parameter (or one part of a fused one) comes from."""
    assert isinstance(model, LlamaForCausalLM)
    for part, (fused, sid) in model.PACKED_MODULES.items():
        if sid == shard_id and f".{fused}." in param_name:
            return param_name.replace(f".{fused}.", f".{part}.")
    return param_name
