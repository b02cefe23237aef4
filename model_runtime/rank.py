"""One rank of a tensor-parallel worker: it joins the group, builds its shard of
the runner (``model_runtime.build``), and builds the worker over it with the
factory its worker package names (a target or a draft worker). Every rank runs
every call on the same inputs; rank 0's answers are the worker's."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from model_runtime.batch import SequenceChunk
from model_runtime.build import build_runner, resolve_device
from model_runtime.distributed import TensorParallelGroup, join_group
from model_runtime.runner import ModelRunner
from model_runtime.specs import RunnerSpec

# (runner, group, model name) -> the worker over them. A module-level function
# (or a functools.partial of one), so that it pickles by name to spawned
# processes and Ray actors.
WorkerFactory = Callable[[ModelRunner, TensorParallelGroup, str], Any]


@dataclass(frozen=True)
class RankConfig:
    """What every rank of one tensor-parallel worker is built from."""

    runner: RunnerSpec  # its model is resolved by each rank, on the rank's own node
    tensor_parallel_size: int
    build_worker: WorkerFactory
    name: str = "worker"  # what the worker is ("target", "draft"): names its rank processes
    collective_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if self.tensor_parallel_size < 1:
            raise ValueError(f"tensor_parallel_size must be >= 1, got {self.tensor_parallel_size}")


def rendezvous_address(host: str) -> str:
    """``tcp://host:port`` with a port of this node free now, for the ranks to meet at."""
    with socket.socket() as s:
        s.bind((host, 0))
        port = s.getsockname()[1]
    return f"tcp://{host}:{port}"


class Rank:
    def __init__(self, config: RankConfig, rank: int, init_method: str, gpu_index: int = 0):
        size = config.tensor_parallel_size
        device = resolve_device(config.runner.device, gpu_index)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        else:  # ranks of one CPU share its cores
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // size))
        tp = join_group(rank, size, init_method, config.collective_timeout_s)
        self.runner = build_runner(config.runner, tp, gpu_index)
        self.worker = config.build_worker(self.runner, tp, config.runner.model)

    def run(self, method: str, *args: Any) -> tuple[Any, int]:
        """The worker's ``method`` (prefill, verify, propose, release, describe),
        or ``forward``: the runner's logits for a batch, on the CPU (for tests);
        with the KV blocks free after it, so callers need no second round trip."""
        if method == "forward":
            result = self.forward(*args)
        else:
            result = getattr(self.worker, method)(*args)
        return result, self.runner.kv_cache.num_free_blocks

    def forward(self, chunks: Sequence[SequenceChunk]) -> torch.Tensor:
        return self.runner.forward(chunks).cpu()
