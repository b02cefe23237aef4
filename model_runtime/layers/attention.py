"""Attention of one layer, and the context every layer of a forward shares.

The layer holds what its attention is (heads, head size, sliding window, the
rotary table, Qwen3's per-head norms); the kernels that do the work are the
forward's ``ops`` (``model_runtime.ops``): PyTorch on the CPU, Triton on GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from model_runtime.kv_cache import PagedKVCache
from model_runtime.layers.norm import RMSNorm
from model_runtime.layers.rotary import RotaryEmbedding
from model_runtime.ops.protocol import Ops


@dataclass
class ForwardContext:
    """Everything a forward needs besides the tokens: the cache, the batch's
    layout as the kernels read it (``ops.metadata``), and the kernels."""

    kv_cache: PagedKVCache
    attention: Any
    ops: Ops


class Attention(nn.Module):
    """Scaled dot-product attention of one layer over the paged KV pool."""

    def __init__(
        self,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        layer_index: int,
        rotary: RotaryEmbedding,
        sliding_window: int | None = None,
        qk_norms: tuple[RMSNorm, RMSNorm] | None = None,
    ):
        super().__init__()
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.scale = head_dim**-0.5
        self.layer_index = layer_index
        self.sliding_window = sliding_window
        # Owned by the model and the attention block; a list keeps them out of
        # this module's state dict.
        self._shared: list[Any] = [rotary, qk_norms]

    @property
    def rotary(self) -> RotaryEmbedding:
        return self._shared[0]

    @property
    def qk_norms(self) -> tuple[RMSNorm, RMSNorm] | None:
        return self._shared[1]

    def forward(
        self, qkv: torch.Tensor, positions: torch.Tensor, ctx: ForwardContext
    ) -> torch.Tensor:
        """qkv [T, (Hq + 2 Hkv) * D], positions [T] -> attention output [T, Hq * D]."""
        q = ctx.ops.attention_inputs(qkv, positions, self, ctx)
        return ctx.ops.attention(q, self, ctx)
