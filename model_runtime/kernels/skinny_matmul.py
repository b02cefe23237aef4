"""Matmuls of a few rows: the projections of decode and verify steps at small
batch.

At batch 1 a projection reads its whole weight for one row of input, so its
time is the weight's bytes over the memory bandwidth plus the latency of
getting there. The library GEMM picks badly for some of these shapes (on an
H200, 12.7 us for the Qwen3-0.6B output projection, whose weight takes 1 us to
read); this kernel streams the weight BLOCK_N output features per program,
BLOCK_K at a time, and pads the rows inside to a power of two of at least 16
(the least a ``tl.dot`` takes), up to ``MOST_ROWS``. Past ``MAX_ROWS`` rows
callers use the library GEMM.

Measured per projection in benchmarks/results/skinny_matmul_h200.md, where
fusing the RMSNorm or SiLU * up in front was tried too and lost: the norm's
pass over the rows in every program costs more than its own kernel.

Layouts: x ``[M, K]``, weight ``[N, K]`` (a ``torch.nn.Linear`` weight),
bias ``[N]``, out ``[M, N]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

MAX_ROWS = 16  # where callers switch to the library GEMM
MOST_ROWS = 64  # the most rows the kernel pads to


@dataclass(frozen=True)
class TileConfig:
    block_n: int = 32
    block_k: int = 256
    num_warps: int = 4
    num_stages: int = 4

    def __post_init__(self) -> None:
        for name in ("block_n", "block_k"):
            value = getattr(self, name)
            if value < 16 or value & (value - 1):
                raise ValueError(f"{name} must be a power of two >= 16, got {value}")

    @classmethod
    def for_shape(cls, n: int, k: int, rows: int = 1) -> TileConfig:
        """The tiles that measured best for an [n, k] weight at 1 to 16 rows:
        wider output tiles for wide weights, shorter K steps for the widest.
        Past 16 rows the row tile grows, so the K step shortens to keep the
        stages in shared memory."""
        short = n >= 16384 or rows > 16
        return cls(block_n=64 if n > 4096 else 32, block_k=128 if short else 256)


@triton.jit
def _skinny_matmul(
    x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_xm, stride_wn,
    HAS_BIAS: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    rows = tl.arange(0, BLOCK_M)
    row_ok = rows < M
    cols = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + tl.arange(0, BLOCK_K)
        k_ok = kk < K
        w = tl.load(
            w_ptr + cols[:, None] * stride_wn + kk[None, :],
            mask=col_ok[:, None] & k_ok[None, :],
            other=0.0,
        )  # [BLOCK_N, BLOCK_K]
        x = tl.load(
            x_ptr + rows[:, None] * stride_xm + kk[None, :],
            mask=row_ok[:, None] & k_ok[None, :],
            other=0.0,
        )  # [BLOCK_M, BLOCK_K]
        acc += tl.dot(x, tl.trans(w), input_precision=PRECISION)
    if HAS_BIAS:
        acc += tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    out = out_ptr + rows[:, None] * N + cols[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


def skinny_matmul(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    tiles: TileConfig | None = None,
) -> torch.Tensor:
    """x [M, K] @ weight.T [K, N] (+ bias [N]) -> [M, N], for M <= ``MOST_ROWS``."""
    rows, k = x.shape
    n = weight.shape[0]
    if rows > MOST_ROWS:
        raise ValueError(f"skinny_matmul takes at most {MOST_ROWS} rows, got {rows}")
    if weight.shape[1] != k or x.stride(-1) != 1 or weight.stride(-1) != 1:
        raise ValueError(
            f"expected x [M, K] and weight [N, K] with unit stride, got {tuple(x.shape)}"
            f" and {tuple(weight.shape)}"
        )
    tiles = tiles or TileConfig.for_shape(n, k, rows)
    out = torch.empty((rows, n), dtype=x.dtype, device=x.device)
    _skinny_matmul[(triton.cdiv(n, tiles.block_n),)](
        x, weight, weight if bias is None else bias, out, rows, n, k, x.stride(0), weight.stride(0),
        HAS_BIAS=bias is not None, PRECISION="ieee" if x.dtype == torch.float32 else "tf32",
        BLOCK_M=max(16, triton.next_power_of_2(rows)), BLOCK_N=tiles.block_n, BLOCK_K=tiles.block_k,
        num_warps=tiles.num_warps, num_stages=tiles.num_stages,
    )  # fmt: skip
    return out
