"""One rank of a tensor-parallel target worker: its shard of the model and of
the KV cache, and a TargetWorker over them. Every rank runs every call; rank 0
samples, and its results are the worker's."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from model_runtime.kv_cache import PagedKVCache
from model_runtime.loader import load_model
from model_runtime.parallel import join_group
from model_runtime.runner import ModelRunner, SequenceChunk
from model_runtime.sizing import num_kv_blocks
from protos.messages import VerifyOutput, VerifyRequest, WorkerInfo
from target_worker.worker import TargetWorker, TargetWorkerConfig


@dataclass(frozen=True)
class RankConfig:
    """What every rank of one tensor-parallel target is built from."""

    folder: str  # the resolved checkpoint folder
    model_name: str  # as the user named it (reported by describe)
    tensor_parallel_size: int
    dtype: str = "auto"
    device: str = "auto"  # auto: one GPU per rank when CUDA is there, else the CPU
    max_model_len: int | None = None
    block_size: int = 16
    num_kv_blocks: int | None = None  # None: from the memory budget
    gpu_memory_utilization: float = 0.9
    cpu_memory_bytes: int = 4 << 30  # for all ranks together, on CPUs
    max_num_seqs: int = 256
    max_tokens_per_sequence: int | None = None  # sizes the cache; default max_model_len
    seed: int = 0
    collective_timeout_s: float = 60.0


def rendezvous_address(host: str) -> str:
    """``tcp://host:port`` with a port of this node free now, for the ranks to meet at."""
    with socket.socket() as s:
        s.bind((host, 0))
        port = s.getsockname()[1]
    return f"tcp://{host}:{port}"


class TargetRank:
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
        self.rank = rank
        tp = join_group(rank, size, init_method, config.collective_timeout_s)
        model = load_model(config.folder, config.dtype, device, tp, config.max_model_len)
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
        self.worker = TargetWorker(
            ModelRunner(model, cache, max_len),
            TargetWorkerConfig(seed=config.seed),
            config.model_name,
            tp,
        )

    def prefill(self, requests: Sequence[VerifyRequest]) -> list[VerifyOutput]:
        return self.worker.prefill(requests)

    def verify(self, requests: Sequence[VerifyRequest]) -> list[VerifyOutput]:
        return self.worker.verify(requests)

    def release(self, seq_ids: Sequence[int]) -> int:
        return self.worker.release(seq_ids)

    def describe(self) -> WorkerInfo:
        return self.worker.describe()

    def forward(self, chunks: Sequence[SequenceChunk]) -> torch.Tensor:
        """The runner's logits for a batch (tests compare them), on the CPU."""
        return self.worker.runner.forward(chunks).cpu()
