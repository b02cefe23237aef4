"""The Triton path: the GPU forward, a handful of kernels per layer.

Per layer: fused residual add + RMSNorm, the q/k/v projection (the skinny
matmul for a few rows, the library GEMM for more), one kernel for
q/k norm + rotary + writing the new keys and values into the pool, paged
attention reading the pool in place (split across programs for small
batches), the output projection, fused add + RMSNorm, gate/up, SiLU * up,
down.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from model_runtime.kernels.activation import silu_and_mul
from model_runtime.kernels.norm import rms_norm
from model_runtime.kernels.paged_attention import num_splits_for, paged_attention, query_tiles
from model_runtime.kernels.rotary_cache import rotary_and_cache
from model_runtime.kernels.skinny_matmul import MAX_ROWS, skinny_matmul
from model_runtime.ops.layout import BatchLayout

if TYPE_CHECKING:
    from model_runtime.layers.attention import Attention, ForwardContext


@dataclass
class TritonMetadata:
    """B sequences, T new tokens; host numbers fixed for a captured graph."""

    slot_mapping: torch.Tensor  # [T] int64; negative: write nowhere (padding)
    block_tables: torch.Tensor  # [B, W] int32
    seq_lens: torch.Tensor  # [B] int32, the new tokens included
    query_starts: torch.Tensor  # [B + 1] int32
    max_query_len: int
    num_splits: int


class TritonOps:
    name = "triton"

    def __init__(self, num_kv_heads: int, group: int):
        self.num_kv_heads = num_kv_heads
        self.group = group  # query heads per KV head

    def num_splits(self, batch: int, max_query_len: int, max_keys: int) -> int:
        """How many ways attention splits each query tile's keys for such a
        batch: a decode or a verify at small batch has too few tiles to fill
        the GPU (a verify at batch 1 of a model with 8 KV heads, 8), a prefill
        enough."""
        tiles = batch * self.num_kv_heads * query_tiles(max_query_len, self.group)
        return num_splits_for(tiles, max_keys)

    def metadata(
        self, layout: BatchLayout, device: torch.device, windows: set[int | None]
    ) -> TritonMetadata:
        def tensor(data: list, dtype: torch.dtype = torch.int32) -> torch.Tensor:
            return torch.tensor(data, dtype=dtype, device=device)

        max_q = layout.max_query_len
        return TritonMetadata(
            slot_mapping=tensor(layout.slots, torch.int64),
            block_tables=tensor(layout.padded_tables()),
            seq_lens=tensor(layout.seq_lens),
            query_starts=tensor(layout.query_starts),
            max_query_len=max_q,
            num_splits=self.num_splits(len(layout.tables), max_q, max(layout.seq_lens)),
        )

    def rms_norm(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        eps: float,
        residual: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return rms_norm(x, weight, eps, residual)

    def linear(
        self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        """A few rows (decode and verify at small batch): the skinny kernel,
        which beats the library's picks there; more rows: the library GEMM."""
        if x.shape[0] <= MAX_ROWS and x.stride(-1) == 1:
            return skinny_matmul(x, weight, bias)
        return F.linear(x, weight, bias)

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        return silu_and_mul(x)

    def attention_inputs(
        self, qkv: torch.Tensor, positions: torch.Tensor, attn: Attention, ctx: ForwardContext
    ) -> torch.Tensor:
        k_pool, v_pool = ctx.kv_cache.layer(attn.layer_index)
        norms = attn.qk_norms
        return rotary_and_cache(
            qkv,
            positions,
            ctx.attention.slot_mapping,
            attn.rotary.cos,
            attn.rotary.sin,
            k_pool,
            v_pool,
            attn.num_heads,
            None if norms is None else norms[0].weight,
            None if norms is None else norms[1].weight,
            1e-6 if norms is None else norms[0].eps,
        )

    def attention(self, q: torch.Tensor, attn: Attention, ctx: ForwardContext) -> torch.Tensor:
        meta: TritonMetadata = ctx.attention
        k_pool, v_pool = ctx.kv_cache.layer(attn.layer_index)
        out = paged_attention(
            q,
            k_pool,
            v_pool,
            meta.block_tables,
            meta.seq_lens,
            meta.query_starts,
            meta.max_query_len,
            attn.scale,
            attn.sliding_window,
            meta.num_splits,
        )
        return out.view(q.shape[0], attn.num_heads * attn.head_dim)
