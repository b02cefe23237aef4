"""One rank of a tensor-parallel worker: it joins the group, loads its shard of
the model and of the KV cache, and builds the worker over them with the
factory its worker package names (a target or a draft worker). Every rank runs
every call on the same inputs; rank 0's answers are the worker's."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from model_runtime.kv_cache import PagedKVCache
from model_runtime.loader import load_model
from model_runtime.parallel import TensorParallelGroup, join_group
from model_runtime.resolve import resolve_model
from model_runtime.runner import ModelRunner, SequenceChunk
from model_runtime.sizing import num_kv_blocks

# (runner, group, model name) -> the worker over them. A module-level function
# (or a functools.partial of one), so that it pickles by name to spawned
# processes and Ray actors.
WorkerFactory = Callable[[ModelRunner, TensorParallelGroup, str], Any]


@dataclass(frozen=True)
class RankConfig:
    """What every rank of one tensor-parallel worker is built from."""

    model: str  # a folder, bundled name or hub id: each rank resolves it on its own node
    tensor_parallel_size: int
    build_worker: WorkerFactory
    revision: str | None = None
    dtype: str = "auto"
    device: str = "auto"  # auto: one GPU per rank when CUDA is there, else the CPU
    max_model_len: int | None = None
    block_size: int = 16
    num_kv_blocks: int | None = None  # None: from the memory budget
    gpu_memory_utilization: float = 0.9
    cpu_memory_bytes: int = 4 << 30  # for all ranks together, on CPUs
    max_num_seqs: int = 256
    max_tokens_per_sequence: int | None = None  # sizes the cache; default max_model_len
    collective_timeout_s: float = 60.0


def rendezvous_address(host: str) -> str:
    """``tcp://host:port`` with a port of this node free now, for the ranks to meet at."""
    with socket.socket() as s:
        s.bind((host, 0))
        port = s.getsockname()[1]
    return f"tcp://{host}:{port}"


class Rank:
    def __init__(self, config: RankConfig, rank: int, init_method: str, gpu_index: int = 0):
        size = config.tensor_parallel_size
        if config.device == "auto":
            device = torch.device(f"cuda:{gpu_index}" if torch.cuda.is_available() else "cpu")
        else:
            device = torch.device(config.device)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        else:  # ranks of one CPU share its cores
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // size))
        tp = join_group(rank, size, init_method, config.collective_timeout_s)
        folder = resolve_model(config.model, config.revision)
        model = load_model(folder, config.dtype, device, tp, config.max_model_len)
        max_len = config.max_model_len or model.config.max_position_embeddings
        blocks = config.num_kv_blocks or num_kv_blocks(
            [model],
            device,
            config.block_size,
            config.max_tokens_per_sequence or max_len,
            config.max_num_seqs,
            config.gpu_memory_utilization,
            config.cpu_memory_bytes // size,
        )
        blocks = tp.min(blocks, device)  # every rank holds the same sequences
        cache = PagedKVCache(
            model.config.num_hidden_layers,
            model.num_kv_heads_per_rank,
            model.config.head_dim,
            blocks,
            config.block_size,
            model.lm_head.weight.dtype,
            device,
        )
        self.runner = ModelRunner(model, cache, max_len)
        self.worker = config.build_worker(self.runner, tp, config.model)

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
