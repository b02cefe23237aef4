"""Paged attention over a ragged batch: the PyTorch path, which is both the CPU
backend and the reference that faster backends are checked against.

A ragged batch holds B sequences with T new tokens in all, flattened. Each
sequence may bring any number of new tokens (a prompt, one decode token, k+1
verify positions). The new keys and values are written into the block pool
first; then each sequence's new queries attend over its whole cached context.

For the attention itself the queries are regrouped into a padded
``[B, Q, ...]`` layout (Q = most new tokens of any sequence) by index tensors
built on the host, so the forward has no host synchronisation and no control
flow that depends on the data: for a fixed B, Q and block-table width it is the
same sequence of kernels every step, which CUDA graphs can capture.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from model_runtime.kv_cache import PagedKVCache


@dataclass
class AttentionMetadata:
    """Where a ragged batch's new tokens go and what each of them may see.

    T new tokens, B sequences, Q = most new tokens in one sequence, S = key
    positions per sequence (block-table width * block size).
    """

    slot_mapping: torch.Tensor  # [T] int64: pool slot of each new token's key and value
    block_tables: torch.Tensor  # [B, max_blocks] int64, padded with block 0
    query_index: torch.Tensor  # [B, Q] int64: flat index of sequence b's i-th new token (pad: 0)
    padded_index: torch.Tensor  # [T] int64: b * Q + i for the flat token t, the inverse map
    masks: dict[int | None, torch.Tensor]  # window (None: full) -> [B, 1, Q, S] bool, True = see


@dataclass
class ForwardContext:
    """Everything a forward needs besides the tokens: the cache and its layout."""

    kv_cache: PagedKVCache
    attention: AttentionMetadata


def causal_masks(
    query_positions: torch.Tensor, num_keys: int, windows: set[int | None]
) -> dict[int | None, torch.Tensor]:
    """query_positions [B, Q] -> {window: mask [B, 1, Q, S]}.

    A query at position p sees keys at positions k <= p, and with a window w
    only those with p - k < w (the Hugging Face convention). Padding queries
    sit at position 0 and see key 0, so no row is empty and nothing turns NaN.
    """
    keys = torch.arange(num_keys, device=query_positions.device)  # [S]
    distance = query_positions.unsqueeze(-1) - keys  # [B, Q, S]
    causal = distance >= 0
    masks: dict[int | None, torch.Tensor] = {}
    for window in windows:
        mask = causal if window is None else causal & (distance < window)
        masks[window] = mask.unsqueeze(1)
    return masks


class Attention(nn.Module):
    """Scaled dot-product attention of one layer, reading and writing the KV pool."""

    def __init__(
        self,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        layer_index: int,
        sliding_window: int | None = None,
    ):
        super().__init__()
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.scale = head_dim**-0.5
        self.layer_index = layer_index
        self.sliding_window = sliding_window

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ctx: ForwardContext
    ) -> torch.Tensor:
        """q [T, Hq, D], k and v [T, Hkv, D] -> attention output [T, Hq * D]."""
        meta = ctx.attention
        k_pool, v_pool = ctx.kv_cache.layer(self.layer_index)  # [N, block, Hkv, D]
        k_pool.view(-1, self.num_kv_heads, self.head_dim).index_copy_(0, meta.slot_mapping, k)
        v_pool.view(-1, self.num_kv_heads, self.head_dim).index_copy_(0, meta.slot_mapping, v)

        batch, max_q = meta.query_index.shape
        keys = k_pool[meta.block_tables].flatten(1, 2)  # [B, S, Hkv, D]
        values = v_pool[meta.block_tables].flatten(1, 2)
        queries = q[meta.query_index]  # [B, Q, Hq, D]
        out = F.scaled_dot_product_attention(
            queries.transpose(1, 2),
            keys.transpose(1, 2),
            values.transpose(1, 2),
            attn_mask=meta.masks[self.sliding_window],
            scale=self.scale,
            enable_gqa=self.num_heads != self.num_kv_heads,
        )  # [B, Hq, Q, D]
        out = out.transpose(1, 2).reshape(batch * max_q, self.num_heads * self.head_dim)
        return out[meta.padded_index]
