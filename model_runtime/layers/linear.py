"""Linear layers that shard themselves over a tensor-parallel group.

Each parameter carries a ``weight_loader(param, loaded, shard_id=None)`` that
copies this rank's slice of a full checkpoint tensor into it, so the loader can
stay a loop over checkpoint names and the model files never see the sharding.

- column parallel: the output features are split, no communication;
- row parallel: the input features are split, the partial outputs are summed;
- merged / QKV: several checkpoint tensors (gate and up; q, k and v) live in
  one fused parameter, and each rank holds its slice of every one of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import torch
from torch import nn

from model_runtime.distributed import TensorParallelGroup
from model_runtime.ops.protocol import Ops


def copy_checked(param: torch.Tensor, loaded: torch.Tensor) -> None:
    """Copy ``loaded`` into ``param``, refusing a shape that does not match."""
    if param.shape != loaded.shape:
        raise ValueError(f"expected shape {tuple(param.shape)}, found {tuple(loaded.shape)}")
    param.data.copy_(loaded)


def _shard(loaded: torch.Tensor, dim: int, tp: TensorParallelGroup, expected: int) -> torch.Tensor:
    """This rank's slice of ``loaded`` along ``dim`` when its full size is ``expected``."""
    if loaded.dim() <= dim or loaded.shape[dim] != expected:
        raise ValueError(
            f"expected size {expected} along dim {dim}, found shape {tuple(loaded.shape)}"
        )
    size = expected // tp.size
    return loaded.narrow(dim, tp.rank * size, size)


class LinearBase(nn.Module):
    """y = x W^T + b over this rank's ``[out_per_rank, in_per_rank]`` block of W."""

    def __init__(self, in_per_rank: int, out_per_rank: int, bias: bool, tp: TensorParallelGroup):
        super().__init__()
        self.tp = tp
        self.weight = nn.Parameter(torch.empty(out_per_rank, in_per_rank), requires_grad=False)
        self.weight.weight_loader = self.weight_loader  # type: ignore[attr-defined]
        if bias:
            bias_param = nn.Parameter(torch.empty(out_per_rank), requires_grad=False)
            bias_param.weight_loader = self.weight_loader  # type: ignore[attr-defined]
            self.bias: nn.Parameter | None = bias_param
        else:
            self.bias = None

    def weight_loader(
        self, param: nn.Parameter, loaded: torch.Tensor, shard_id: str | int | None = None
    ) -> None:
        raise NotImplementedError

    def forward(self, x: torch.Tensor, ops: Ops) -> torch.Tensor:
        """x [T, in_per_rank] -> [T, out_per_rank] through the forward's kernels."""
        return ops.linear(x, self.weight, self.bias)


class ColumnParallelLinear(LinearBase):
    """Splits the output features: rank r computes outputs [r*n/tp, (r+1)*n/tp)."""

    def __init__(self, in_features: int, out_features: int, bias: bool, tp: TensorParallelGroup):
        self.out_features = out_features
        super().__init__(in_features, tp.shard_size(out_features, "output features"), bias, tp)

    def weight_loader(
        self, param: nn.Parameter, loaded: torch.Tensor, shard_id: str | int | None = None
    ) -> None:
        copy_checked(param, _shard(loaded, 0, self.tp, self.out_features))


class MergedColumnParallelLinear(LinearBase):
    """Several column-parallel outputs fused into one matmul (gate and up).

    Checkpoint tensor ``shard_id = i`` fills, on every rank, this rank's slice of
    output block i.
    """

    def __init__(
        self, in_features: int, out_sizes: Sequence[int], bias: bool, tp: TensorParallelGroup
    ):
        self.out_sizes = list(out_sizes)
        per_rank = [tp.shard_size(n, "output features") for n in self.out_sizes]
        self.offsets = [sum(per_rank[:i]) for i in range(len(per_rank))]
        self.per_rank = per_rank
        super().__init__(in_features, sum(per_rank), bias, tp)

    def _block(self, shard_id: str | int | None) -> tuple[int, int, int]:
        """(offset in the fused parameter, size per rank, full size) of one block."""
        assert isinstance(shard_id, int), f"merged layer needs an integer shard id, got {shard_id}"
        return self.offsets[shard_id], self.per_rank[shard_id], self.out_sizes[shard_id]

    def weight_loader(
        self, param: nn.Parameter, loaded: torch.Tensor, shard_id: str | int | None = None
    ) -> None:
        offset, size, full = self._block(shard_id)
        copy_checked(param.data.narrow(0, offset, size), _shard(loaded, 0, self.tp, full))


class QKVParallelLinear(MergedColumnParallelLinear):
    """q, k and v projections fused; each rank holds its query and kv heads.

    The output is ``[q heads | k heads | v heads]`` for this rank's heads.
    """

    SHARDS: ClassVar[dict[str, int]] = {"q": 0, "k": 1, "v": 2}

    def __init__(
        self,
        hidden_size: int,
        head_dim: int,
        num_heads: int,
        num_kv_heads: int,
        bias: bool,
        tp: TensorParallelGroup,
    ):
        self.num_heads = tp.shard_size(num_heads, "num_attention_heads")
        self.num_kv_heads = tp.shard_size(num_kv_heads, "num_key_value_heads")
        self.head_dim = head_dim
        sizes = [num_heads * head_dim, num_kv_heads * head_dim, num_kv_heads * head_dim]
        super().__init__(hidden_size, sizes, bias, tp)

    def _block(self, shard_id: str | int | None) -> tuple[int, int, int]:
        assert shard_id in self.SHARDS, f"qkv shard id must be q, k or v, got {shard_id}"
        return super()._block(self.SHARDS[shard_id])

    def split(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """[T, (Hq + 2 Hkv) * D] -> q [T, Hq, D], k [T, Hkv, D], v [T, Hkv, D]."""
        q, k, v = qkv.split(self.per_rank, dim=-1)
        t = qkv.shape[0]
        return (
            q.view(t, self.num_heads, self.head_dim),
            k.view(t, self.num_kv_heads, self.head_dim),
            v.view(t, self.num_kv_heads, self.head_dim),
        )


class RowParallelLinear(LinearBase):
    """Splits the input features; the partial products are summed over the ranks.

    The bias is added once, after the sum.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool, tp: TensorParallelGroup):
        self.in_features = in_features
        super().__init__(tp.shard_size(in_features, "input features"), out_features, bias, tp)

    def weight_loader(
        self, param: nn.Parameter, loaded: torch.Tensor, shard_id: str | int | None = None
    ) -> None:
        if param is self.bias:
            copy_checked(param, loaded)
        else:
            copy_checked(param, _shard(loaded, 1, self.tp, self.in_features))

    def forward(self, x: torch.Tensor, ops: Ops) -> torch.Tensor:
        y = self.tp.all_reduce(ops.linear(x, self.weight))
        return y if self.bias is None else y + self.bias
