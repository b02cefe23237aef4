"""The engine's configuration, and speculative_config as vLLM takes it."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from model_runtime.executors import ParallelConfig

SPECULATIVE_KEYS = (
    "model",
    "num_speculative_tokens",
    "method",
    "draft_tensor_parallel_size",
    "max_model_len",
    "revision",
)


@dataclass(frozen=True)
class SpeculativeConfig:
    """Draft-model speculation: ``num_speculative_tokens`` drafts per round from ``model``."""

    model: str
    num_speculative_tokens: int
    method: str = "draft_model"
    draft_tensor_parallel_size: int = 1
    max_model_len: int | None = None
    revision: str | None = None

    def __post_init__(self) -> None:
        if self.method != "draft_model":
            raise ValueError(
                f"speculative_config method {self.method!r} is not supported; "
                f'specserve speculates with a separate draft model: "method": "draft_model"'
            )
        if not isinstance(self.num_speculative_tokens, int) or self.num_speculative_tokens < 1:
            raise ValueError(
                "speculative_config num_speculative_tokens must be an integer >= 1, "
                f"got {self.num_speculative_tokens!r}"
            )
        if self.draft_tensor_parallel_size < 1:
            raise ValueError(
                "speculative_config draft_tensor_parallel_size must be >= 1, "
                f"got {self.draft_tensor_parallel_size}"
            )
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(
                f"speculative_config max_model_len must be >= 2, got {self.max_model_len}"
            )

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> SpeculativeConfig:
        """Validate a user's speculative_config dict, naming any bad field."""
        if not isinstance(config, dict):
            raise ValueError(
                f"speculative_config must be a JSON object, got {type(config).__name__}"
            )
        if "tensor_parallel_size" in config:
            raise ValueError(
                "speculative_config does not take tensor_parallel_size; "
                "use draft_tensor_parallel_size for the draft model"
            )
        unknown = sorted(set(config) - set(SPECULATIVE_KEYS))
        if unknown:
            raise ValueError(
                f"unknown speculative_config keys: {', '.join(unknown)}; "
                f"allowed: {', '.join(SPECULATIVE_KEYS)}"
            )
        if "model" not in config:
            raise ValueError('speculative_config needs "model": the draft model to speculate with')
        if "num_speculative_tokens" not in config:
            raise ValueError("speculative_config needs num_speculative_tokens (>= 1)")
        values = dict(config)
        if values.get("method") is None:
            values["method"] = "draft_model"
        return cls(**values)


@dataclass(frozen=True)
class EngineConfig:
    """Everything the in-process engine is built from."""

    model: str
    speculative: SpeculativeConfig | None = None
    max_model_len: int | None = None
    dtype: str = "auto"
    device: str = "auto"
    seed: int = 0
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    cpu_memory_bytes: int = 4 << 30  # weights and KV caches together, on CPUs
    max_num_seqs: int = 256
    draft_top_n: int = 32
    tensor_parallel_size: int = 1
    distributed_executor_backend: str | None = None  # mp or ray; default ray when tp > 1
    ray_address: str | None = None  # a running Ray cluster to place the target's ranks on
    num_kv_blocks_override: int | None = None  # skip the memory budget (tests, benchmarks)
    # Keep two micro-batches in flight: draft one while verifying the other.
    # Pays off when draft and target run on different devices or hosts.
    overlap: bool = False
    # Seconds between log lines of throughput and speculation counters; None: never.
    log_stats_interval_s: float | None = 10.0

    def __post_init__(self) -> None:
        if self.log_stats_interval_s is not None and self.log_stats_interval_s < 0:
            raise ValueError(f"log_stats_interval_s must be >= 0, got {self.log_stats_interval_s}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(
                f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}"
            )
        for name in ("block_size", "max_num_seqs", "draft_top_n", "cpu_memory_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"max_model_len must be >= 2, got {self.max_model_len}")
        _ = self.parallel  # validates the tensor-parallel fields
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")

    @property
    def parallel(self) -> ParallelConfig:
        return ParallelConfig(
            self.tensor_parallel_size, self.distributed_executor_backend, self.ray_address
        )

    @classmethod
    def field_names(cls) -> set[str]:
        return {f.name for f in fields(cls)}
