"""RMSNorm, with the residual add before it fused in: one pass over each row.

Rounding follows the PyTorch path step by step (the sum is rounded to the
model's dtype before it is normalised, the normalised row before the weight
multiplies it), so both give the same numbers.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm(
    x_ptr, residual_ptr, weight_ptr, out_ptr, residual_out_ptr,
    stride_x, stride_r, eps,
    N: tl.constexpr, BLOCK: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    ok = cols < N
    x = tl.load(x_ptr + row * stride_x + cols, mask=ok, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(residual_ptr + row * stride_r + cols, mask=ok, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(x.dtype)
        tl.store(residual_out_ptr + row * N + cols, x, mask=ok)
    x32 = x.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x32 * x32, 0) / N + eps)
    normed = (x32 * rstd).to(x.dtype).to(tl.float32)
    w = tl.load(weight_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * N + cols, (normed * w).to(out_ptr.dtype.element_ty), mask=ok)


def num_warps_for(block: int) -> int:
    """Warps for one row of ``block`` elements: about 256 elements each, 1 to 8."""
    return min(max(block // 256, 1), 8)


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """x [T, N] (+ residual [T, N]) -> (normalised [T, N], the sum [T, N]).

    Without ``residual`` the sum is ``x`` itself.
    """
    rows, n = x.shape
    out = torch.empty((rows, n), dtype=x.dtype, device=x.device)
    summed = x if residual is None else torch.empty_like(out)
    if x.stride(-1) != 1 or (residual is not None and residual.stride(-1) != 1):
        raise ValueError("rms_norm needs rows with unit stride")
    block = triton.next_power_of_2(n)
    _rms_norm[(rows,)](
        x, x if residual is None else residual, weight, out, summed,
        x.stride(0), 0 if residual is None else residual.stride(0), eps,
        N=n, BLOCK=block, HAS_RESIDUAL=residual is not None, num_warps=num_warps_for(block),
    )  # fmt: skip
    return out, summed
