"""What a forward asks of its kernels; ``TorchOps`` and ``TritonOps`` answer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import torch

from model_runtime.ops.layout import BatchLayout

if TYPE_CHECKING:
    from model_runtime.layers.attention import Attention, ForwardContext


class Ops(Protocol):
    name: str

    def metadata(self, layout: BatchLayout, device: torch.device, windows: set[int | None]) -> Any:
        """The device tensors this path's attention reads for ``layout``."""

    def rms_norm(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        eps: float,
        residual: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """x [T, N] (+ residual) -> (normalised sum, the sum) [T, N] each."""

    def linear(
        self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        """x [T, K] @ weight.T [K, N] (+ bias [N]) -> [T, N]."""

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        """x [T, 2n] = [gate | up] -> silu(gate) * up [T, n]."""

    def attention_inputs(
        self, qkv: torch.Tensor, positions: torch.Tensor, attn: Attention, ctx: ForwardContext
    ) -> torch.Tensor:
        """qkv [T, (Hq + 2 Hkv) D] -> queries [T, Hq, D], normalised per head
        (Qwen3) and rotated; the keys (likewise) and values go into the pool."""

    def attention(self, q: torch.Tensor, attn: Attention, ctx: ForwardContext) -> torch.Tensor:
        """queries [T, Hq, D] over the cached context -> [T, Hq * D]."""
