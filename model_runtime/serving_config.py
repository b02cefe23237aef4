"""The configuration of a standalone worker process (draft or target)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from model_runtime.config import DTYPES, ModelConfig
from model_runtime.loader import load_model
from model_runtime.rank import RankConfig, WorkerFactory
from model_runtime.resolve import resolve_model
from model_runtime.runner import ModelRunner
from model_runtime.sizing import num_kv_blocks, runner_for


@dataclass(frozen=True)
class WorkerServerConfig:
    model: str = field(metadata={"help": "checkpoint folder, bundled model name or hub id"})
    host: str = field(default="127.0.0.1", metadata={"help": "address to listen on"})
    port: int = field(default=0, metadata={"help": "port to listen on; 0 picks a free one"})
    dtype: str = field(
        default="auto", metadata={"help": "weight dtype", "choices": ["auto", *DTYPES]}
    )
    device: str = field(default="auto", metadata={"help": "torch device; auto picks cuda"})
    max_model_len: int | None = field(default=None, metadata={"help": "longest sequence"})
    block_size: int = field(default=16, metadata={"help": "tokens per KV block"})
    gpu_memory_utilization: float = field(default=0.9, metadata={"help": "share of the GPU"})
    cpu_memory_bytes: int = field(
        default=4 << 30, metadata={"help": "bytes for weights and KV cache on CPUs"}
    )
    max_num_seqs: int = field(default=256, metadata={"help": "sequences the KV cache sizes for"})
    num_kv_blocks: int | None = field(default=None, metadata={"help": "override the KV budget"})
    seed: int = field(default=0, metadata={"help": "seed for requests without one"})
    grace_s: float = field(default=5.0, metadata={"help": "drain time on SIGTERM"})

    def __post_init__(self) -> None:
        if not 0 <= self.port < 65536:
            raise ValueError(f"port must be in [0, 65535], got {self.port}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(
                f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}"
            )
        if self.block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {self.block_size}")

    def build_runner(self) -> ModelRunner:
        device = torch.device(
            ("cuda" if torch.cuda.is_available() else "cpu")
            if self.device == "auto"
            else self.device
        )
        model = load_model(resolve_model(self.model), self.dtype, device)
        max_len = self.max_model_len or model.config.max_position_embeddings
        blocks = self.num_kv_blocks or num_kv_blocks(
            [model],
            device,
            self.block_size,
            max_len,
            self.max_num_seqs,
            self.gpu_memory_utilization,
            self.cpu_memory_bytes,
        )
        return runner_for(model, blocks, self.block_size, device)

    def rank_config(self, tensor_parallel_size: int, build_worker: WorkerFactory) -> RankConfig:
        """The ranks' configuration when this worker is split over ranks."""
        folder = resolve_model(self.model)
        ModelConfig.from_pretrained(folder).check_tensor_parallel(tensor_parallel_size)
        return RankConfig(
            model=self.model,
            tensor_parallel_size=tensor_parallel_size,
            build_worker=build_worker,
            dtype=self.dtype,
            device=self.device,
            max_model_len=self.max_model_len,
            block_size=self.block_size,
            num_kv_blocks=self.num_kv_blocks,
            gpu_memory_utilization=self.gpu_memory_utilization,
            cpu_memory_bytes=self.cpu_memory_bytes,
            max_num_seqs=self.max_num_seqs,
        )
