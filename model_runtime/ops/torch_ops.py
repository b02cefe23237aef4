"""The PyTorch path: the CPU forward, and the reference the Triton path is
checked against.

For attention the ragged batch's queries are regrouped into a padded
``[B, Q, ...]`` layout (Q = most new tokens of any sequence) by index tensors
built on the host, and every sequence's context is gathered from the pool, so
the forward has no host synchronisation and no control flow that depends on
the data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from model_runtime.layers.norm import rms_norm_reference
from model_runtime.layers.rotary import rotate_half
from model_runtime.ops.layout import BatchLayout

if TYPE_CHECKING:
    from model_runtime.layers.attention import Attention, ForwardContext


@dataclass
class TorchMetadata:
    """T new tokens, B sequences, Q = most new tokens in one sequence, S = key
    positions per sequence (block-table width * block size)."""

    slot_mapping: torch.Tensor  # [T] int64: pool slot of each new token's key and value
    block_tables: torch.Tensor  # [B, max_blocks] int64, padded with block 0
    query_index: torch.Tensor  # [B, Q] int64: flat index of sequence b's i-th new token (pad: 0)
    padded_index: torch.Tensor  # [T] int64: b * Q + i for the flat token t, the inverse map
    masks: dict[int | None, torch.Tensor]  # window (None: full) -> [B, 1, Q, S] bool, True = see


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


class TorchOps:
    name = "torch"

    def metadata(
        self, layout: BatchLayout, device: torch.device, windows: set[int | None]
    ) -> TorchMetadata:
        max_q = layout.max_query_len
        query_index: list[list[int]] = []
        query_positions: list[list[int]] = []
        padded_index: list[int] = []
        offset = 0
        for b, (start, n) in enumerate(zip(layout.starts, layout.query_lens, strict=True)):
            query_index.append(list(range(offset, offset + n)) + [0] * (max_q - n))
            query_positions.append(list(range(start, start + n)) + [0] * (max_q - n))
            padded_index.extend(range(b * max_q, b * max_q + n))
            offset += n

        def tensor(data: list) -> torch.Tensor:
            return torch.tensor(data, dtype=torch.int64, device=device)

        return TorchMetadata(
            slot_mapping=tensor(layout.slots),
            block_tables=tensor(layout.padded_tables()),
            query_index=tensor(query_index),
            padded_index=tensor(padded_index),
            masks=causal_masks(tensor(query_positions), layout.width * layout.block_size, windows),
        )

    def rms_norm(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        eps: float,
        residual: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        summed = x if residual is None else x + residual
        return rms_norm_reference(summed, weight, eps), summed

    def linear(
        self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        return F.linear(x, weight, bias)

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up

    def attention_inputs(
        self, qkv: torch.Tensor, positions: torch.Tensor, attn: Attention, ctx: ForwardContext
    ) -> torch.Tensor:
        t, d = qkv.shape[0], attn.head_dim
        q, k, v = qkv.split([attn.num_heads * d, attn.num_kv_heads * d, attn.num_kv_heads * d], -1)
        q, k, v = q.view(t, -1, d), k.view(t, -1, d), v.view(t, -1, d)
        if attn.qk_norms is not None:
            q_norm, k_norm = attn.qk_norms
            q = rms_norm_reference(q, q_norm.weight, q_norm.eps)
            k = rms_norm_reference(k, k_norm.weight, k_norm.eps)
        cos = attn.rotary.cos[positions].to(q.dtype).unsqueeze(1)  # [T, 1, D]
        sin = attn.rotary.sin[positions].to(q.dtype).unsqueeze(1)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        slots = ctx.attention.slot_mapping
        k_pool, v_pool = ctx.kv_cache.layer(attn.layer_index)  # [N, block, Hkv, D]
        k_pool.view(-1, attn.num_kv_heads, d).index_copy_(0, slots, k)
        v_pool.view(-1, attn.num_kv_heads, d).index_copy_(0, slots, v)
        return q

    def attention(self, q: torch.Tensor, attn: Attention, ctx: ForwardContext) -> torch.Tensor:
        meta: TorchMetadata = ctx.attention
        k_pool, v_pool = ctx.kv_cache.layer(attn.layer_index)
        batch, max_q = meta.query_index.shape
        keys = k_pool[meta.block_tables].flatten(1, 2)  # [B, S, Hkv, D]
        values = v_pool[meta.block_tables].flatten(1, 2)
        queries = q[meta.query_index]  # [B, Q, Hq, D]
        out = F.scaled_dot_product_attention(
            queries.transpose(1, 2),
            keys.transpose(1, 2),
            values.transpose(1, 2),
            attn_mask=meta.masks[attn.sliding_window],
            scale=attn.scale,
            enable_gqa=attn.num_heads != attn.num_kv_heads,
        )  # [B, Hq, Q, D]
        out = out.transpose(1, 2).reshape(batch * max_q, attn.num_heads * attn.head_dim)
        return out[meta.padded_index]
