"""From the q/k/v projection to attention's inputs in one kernel per layer:
per-head RMSNorm of queries and keys (Qwen3), the rotary embedding (the
rotate-half form), and the new keys and values written into the block pool.

A token whose slot is negative (a padding row of a captured graph) writes
nothing to the pool. The queries come back; the keys and values are read from
the pool by attention.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _normed_rotated(
    row_ptr, norm_ptr, cos, sin, eps, halves, ok,
    HALF: tl.constexpr, HAS_NORM: tl.constexpr,
):  # fmt: skip
    """One head's vector as (first half, second half), normalised and rotated, in fp32."""
    x1 = tl.load(row_ptr + halves, mask=ok, other=0.0)
    x2 = tl.load(row_ptr + HALF + halves, mask=ok, other=0.0)
    a = x1.to(tl.float32)
    b = x2.to(tl.float32)
    if HAS_NORM:
        rstd = tl.rsqrt((tl.sum(a * a, 0) + tl.sum(b * b, 0)) / (2 * HALF) + eps)
        w1 = tl.load(norm_ptr + halves, mask=ok, other=0.0).to(tl.float32)
        w2 = tl.load(norm_ptr + HALF + halves, mask=ok, other=0.0).to(tl.float32)
        a = ((a * rstd).to(x1.dtype).to(tl.float32) * w1).to(x1.dtype).to(tl.float32)
        b = ((b * rstd).to(x1.dtype).to(tl.float32) * w2).to(x1.dtype).to(tl.float32)
    return a * cos - b * sin, b * cos + a * sin


@triton.jit
def _rotary_cache(
    qkv_ptr, positions_ptr, slots_ptr, cos_ptr, sin_ptr, q_norm_ptr, k_norm_ptr,
    q_out_ptr, k_pool_ptr, v_pool_ptr,
    stride_qkv, stride_cos, eps,
    NUM_HEADS: tl.constexpr, NUM_KV_HEADS: tl.constexpr, HALF: tl.constexpr,
    BLOCK_H: tl.constexpr, HAS_NORM: tl.constexpr,
):  # fmt: skip
    token = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    halves = tl.arange(0, BLOCK_H)
    ok = halves < HALF
    dim = 2 * HALF
    row_ptr = qkv_ptr + token * stride_qkv + head * dim
    slot = tl.load(slots_ptr + token).to(tl.int64)
    if head < NUM_HEADS + NUM_KV_HEADS:
        position = tl.load(positions_ptr + token)
        cos = tl.load(cos_ptr + position * stride_cos + halves, mask=ok, other=0.0)
        sin = tl.load(sin_ptr + position * stride_cos + halves, mask=ok, other=0.0)
        if head < NUM_HEADS:
            a, b = _normed_rotated(row_ptr, q_norm_ptr, cos, sin, eps, halves, ok, HALF, HAS_NORM)
            out = q_out_ptr + (token * NUM_HEADS + head) * dim
        else:
            a, b = _normed_rotated(row_ptr, k_norm_ptr, cos, sin, eps, halves, ok, HALF, HAS_NORM)
            out = k_pool_ptr + (slot * NUM_KV_HEADS + head - NUM_HEADS) * dim
        if head < NUM_HEADS or slot >= 0:
            dtype = q_out_ptr.dtype.element_ty
            tl.store(out + halves, a.to(dtype), mask=ok)
            tl.store(out + HALF + halves, b.to(dtype), mask=ok)
    elif slot >= 0:  # a value head: copied as it is
        out = v_pool_ptr + (slot * NUM_KV_HEADS + head - NUM_HEADS - NUM_KV_HEADS) * dim
        tl.store(out + halves, tl.load(row_ptr + halves, mask=ok), mask=ok)
        tl.store(out + HALF + halves, tl.load(row_ptr + HALF + halves, mask=ok), mask=ok)


def rotary_and_cache(
    qkv: torch.Tensor,
    positions: torch.Tensor,
    slots: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    num_heads: int,
    q_norm: torch.Tensor | None = None,
    k_norm: torch.Tensor | None = None,
    eps: float = 1e-6,
) -> torch.Tensor:
    """qkv [T, (Hq + 2 Hkv) * D] -> queries [T, Hq, D]; keys and values into
    the pools [N, page, Hkv, D] at ``slots`` [T].

    ``cos`` and ``sin`` are tabulated ``[positions, D]`` (both halves alike);
    ``q_norm`` and ``k_norm`` ([D]) normalise each head first when given.
    """
    num_kv_heads, dim = k_pool.shape[2], k_pool.shape[3]
    tokens = qkv.shape[0]
    if qkv.stride(-1) != 1 or not k_pool.is_contiguous() or not v_pool.is_contiguous():
        raise ValueError("rotary_and_cache needs unit-stride rows and contiguous pools")
    q_out = torch.empty((tokens, num_heads, dim), dtype=qkv.dtype, device=qkv.device)
    has_norm = q_norm is not None and k_norm is not None
    _rotary_cache[(tokens, num_heads + 2 * num_kv_heads)](
        qkv, positions, slots, cos, sin,
        q_norm if has_norm else cos, k_norm if has_norm else cos,
        q_out, k_pool, v_pool,
        qkv.stride(0), cos.stride(0), eps,
        NUM_HEADS=num_heads, NUM_KV_HEADS=num_kv_heads, HALF=dim // 2,
        BLOCK_H=triton.next_power_of_2(dim // 2), HAS_NORM=has_norm,
    )  # fmt: skip
    return q_out
