"""SiLU(gate) * up, the gated activation of Llama-family MLPs, in one pass."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def _silu_and_mul(x_ptr, out_ptr, stride_x, n, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = cols < n
    gate = tl.load(x_ptr + row * stride_x + cols, mask=ok, other=0.0)
    up = tl.load(x_ptr + row * stride_x + n + cols, mask=ok, other=0.0).to(tl.float32)
    g = gate.to(tl.float32)
    activated = (g / (1.0 + tl.exp(-g))).to(gate.dtype).to(tl.float32)  # rounded like F.silu
    tl.store(out_ptr + row * n + cols, (activated * up).to(gate.dtype), mask=ok)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """x [T, 2 * n] = [gate | up] -> silu(gate) * up [T, n]."""
    rows, width = x.shape
    n = width // 2
    out = torch.empty((rows, n), dtype=x.dtype, device=x.device)
    if x.stride(-1) != 1:
        raise ValueError("silu_and_mul needs rows with unit stride")
    _silu_and_mul[(rows, triton.cdiv(n, BLOCK))](x, out, x.stride(0), n, BLOCK=BLOCK)
    return out
