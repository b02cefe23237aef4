"""The tensor-parallel group a model's layers shard themselves over.

The group is handed to every parallel layer when it is built; nothing reads it
from a global. With ``size == 1`` every collective is the identity, so the same
layers serve a single device and a tensor-parallel group.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class TensorParallelGroup:
    """This process's place in a tensor-parallel group.

    ``process_group`` is None for a group of one, and otherwise the
    torch.distributed group (NCCL on GPUs, gloo on CPUs) the ranks share.
    """

    rank: int = 0
    size: int = 1
    process_group: dist.ProcessGroup | None = None

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"tensor-parallel size must be >= 1, got {self.size}")
        if not 0 <= self.rank < self.size:
            raise ValueError(f"tensor-parallel rank {self.rank} is outside [0, {self.size})")
        if self.size > 1 and self.process_group is None:
            raise ValueError(f"a tensor-parallel group of size {self.size} needs a process group")

    def shard_size(self, total: int, what: str) -> int:
        """The part of ``total`` that one rank holds; ``what`` names it in the error."""
        if total % self.size:
            raise ValueError(
                f"{what} ({total}) is not divisible by the tensor-parallel size ({self.size}); "
                f"choose a tensor-parallel size that divides it"
            )
        return total // self.size

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum ``x`` over the ranks, in place."""
        if self.size > 1:
            dist.all_reduce(x, group=self.process_group)
        return x

    def all_gather(self, x: torch.Tensor, dim: int = -1) -> torch.Tensor:
        """Concatenate every rank's ``x`` along ``dim``, in rank order."""
        if self.size == 1:
            return x
        parts = [torch.empty_like(x) for _ in range(self.size)]
        dist.all_gather(parts, x.contiguous(), group=self.process_group)
        return torch.cat(parts, dim=dim)

    def broadcast(self, x: torch.Tensor, src: int = 0) -> torch.Tensor:
        """Every rank's ``x`` becomes rank ``src``'s, in place."""
        if self.size > 1:
            dist.broadcast(x, src, group=self.process_group)
        return x

    def min(self, value: int, device: torch.device) -> int:
        """The smallest of the ranks' ``value``."""
        if self.size == 1:
            return value
        x = torch.tensor([value], dtype=torch.int64, device=device)
        dist.all_reduce(x, op=dist.ReduceOp.MIN, group=self.process_group)
        return int(x.item())


SINGLE_DEVICE = TensorParallelGroup()


def join_group(
    rank: int, size: int, init_method: str, timeout_s: float, backend: str | None = None
) -> TensorParallelGroup:
    """Join the group of ``size`` processes that meet at ``init_method``
    (``tcp://host:port``, chosen at run time by rank 0's side). NCCL when CUDA is
    available, else gloo; collectives that wait longer than ``timeout_s`` fail."""
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    dist.init_process_group(
        backend,
        init_method=init_method,
        rank=rank,
        world_size=size,
        timeout=timedelta(seconds=timeout_s),
    )
    return TensorParallelGroup(rank, size, dist.group.WORLD)
