"""Rotary position embeddings (the rotate-half form that Llama-family models use).

The inverse frequencies come from transformers' own RoPE functions for the
scaled variants, so a checkpoint's ``rope_parameters`` mean exactly what they
mean there. cos and sin are tabulated once for every position up to the
model's context length and indexed by position, which keeps the forward free
of host synchronisation.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import PretrainedConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from model_runtime.errors import UnsupportedModelError

# Variants whose frequencies do not depend on the sequence length at run time.
STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")


def rope_frequencies(hf_config: PretrainedConfig, head_dim: int) -> tuple[torch.Tensor, float]:
    """(inverse frequencies [head_dim / 2], attention scaling) for a checkpoint's config."""
    params = dict(getattr(hf_config, "rope_parameters", None) or {})
    rope_type = params.get("rope_type", "default")
    if rope_type not in STATIC_ROPE_TYPES:
        raise UnsupportedModelError(
            f"rope_type {rope_type!r} is not supported; supported: {', '.join(STATIC_ROPE_TYPES)}"
        )
    if rope_type == "default":
        base = float(params.get("rope_theta", getattr(hf_config, "rope_theta", 10000.0)))
        exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
        return 1.0 / (base**exponents), 1.0
    inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](hf_config, torch.device("cpu"))
    return inv_freq.float(), float(scaling)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class RotaryEmbedding(nn.Module):
    """cos and sin of every position, [max_positions, head_dim] float32 each
    (both halves alike, the attention scaling folded in)."""

    def __init__(self, inv_freq: torch.Tensor, scaling: float, max_positions: int):
        super().__init__()
        inv_freq = inv_freq.to(dtype=torch.float32, device=torch.get_default_device())
        freqs = torch.arange(max_positions, dtype=torch.float32)[:, None] * inv_freq[None, :]
        angles = torch.cat((freqs, freqs), dim=-1)  # [max_positions, head_dim]
        self.cos: torch.Tensor
        self.sin: torch.Tensor
        self.register_buffer("cos", angles.cos() * scaling, persistent=False)
        self.register_buffer("sin", angles.sin() * scaling, persistent=False)
