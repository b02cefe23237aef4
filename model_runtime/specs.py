"""What a runner is built from, and how a model is split over ranks.

Plain frozen configs, validated when built; this module imports nothing of
the runtime (not even torch), so the engine and the command line can hold
them without loading it.
``model_runtime.build`` turns a ``RunnerSpec`` into a runner, and
``model_runtime.executors`` places ranks as a ``ParallelConfig`` says.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The weight dtypes a runner can hold (model_runtime.config maps them to torch's).
DTYPE_NAMES = ("float32", "float16", "bfloat16")
BACKENDS = ("mp", "ray")
# New tokens one batch call may hold by default (vLLM's default for serving).
DEFAULT_BATCHED_TOKENS = 8192
# The most new tokens per sequence a CUDA graph takes: a verify of 15 drafts.
MAX_QUERY_LEN = 16


@dataclass(frozen=True)
class RunnerSpec:
    """One model, its KV cache and the memory both may take.

    The KV cache gets ``num_kv_blocks`` blocks when given, otherwise as many as
    the memory budget holds after the weights: ``gpu_memory_utilization`` of a
    GPU, or ``cpu_memory_bytes`` on CPUs (for all ranks of a tensor-parallel
    group together), never more than ``max_num_seqs`` sequences of
    ``max_model_len`` tokens need. A cache that cannot hold one such sequence
    is refused: a sequence could then never finish. On a GPU the runner
    replays its repeating steps from CUDA graphs unless ``enforce_eager``.
    """

    model: str = field(metadata={"help": "checkpoint folder, bundled model name or hub id"})
    revision: str | None = field(default=None, metadata={"help": "hub revision of the model"})
    dtype: str = field(
        default="auto",
        metadata={
            "help": "weight dtype; auto keeps the checkpoint's",
            "choices": ["auto", *DTYPE_NAMES],
        },
    )
    device: str = field(
        default="auto", metadata={"help": "torch device; auto picks cuda if present"}
    )
    max_model_len: int | None = field(
        default=None, metadata={"help": "longest sequence; default: the model's own"}
    )
    block_size: int = field(default=16, metadata={"help": "tokens per KV block"})
    gpu_memory_utilization: float = field(default=0.9, metadata={"help": "share of the GPU"})
    cpu_memory_bytes: int = field(
        default=4 << 30, metadata={"help": "bytes for weights and KV cache on CPUs"}
    )
    max_num_seqs: int = field(
        default=256, metadata={"help": "sequences the KV cache sizes for, and one call may hold"}
    )
    max_num_batched_tokens: int | None = field(
        default=None,
        metadata={
            "help": "new tokens one batch call may hold; default: the larger of "
            f"{DEFAULT_BATCHED_TOKENS} and max_model_len"
        },
    )
    num_kv_blocks: int | None = field(default=None, metadata={"help": "override the KV budget"})
    enforce_eager: bool = field(
        default=False,
        metadata={"help": "on GPUs, run every step eagerly instead of replaying CUDA graphs"},
    )
    capture_query_len: int = field(
        default=1,
        metadata={
            "help": "new tokens per sequence of the CUDA graphs captured at startup: 1 decodes; "
            f"k + 1 verifies up to k drafts; 2 drafts (at most {MAX_QUERY_LEN}; others "
            "are captured when first met)"
        },
    )

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("model must name a checkpoint folder, bundled model or hub id")
        if self.dtype != "auto" and self.dtype not in DTYPE_NAMES:
            allowed = ", ".join(DTYPE_NAMES)
            raise ValueError(f"dtype {self.dtype!r} is not supported; use auto or one of {allowed}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(
                f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}"
            )
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"max_model_len must be >= 2, got {self.max_model_len}")
        if not 1 <= self.capture_query_len <= MAX_QUERY_LEN:
            raise ValueError(
                f"capture_query_len must be in 1..{MAX_QUERY_LEN}, got {self.capture_query_len}"
            )
        if self.num_kv_blocks is not None and self.num_kv_blocks < 1:
            raise ValueError(f"num_kv_blocks must be >= 1, got {self.num_kv_blocks}")
        for name in ("block_size", "max_num_seqs", "cpu_memory_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_num_batched_tokens is not None and self.max_num_batched_tokens < 1:
            raise ValueError(
                f"max_num_batched_tokens must be >= 1, got {self.max_num_batched_tokens}"
            )

    def batched_tokens(self, max_len: int) -> int:
        """What one batch call may hold for a runner of ``max_len`` tokens (a
        whole prompt must fit one call: no less than max_len)."""
        if self.max_num_batched_tokens is None:
            return max(DEFAULT_BATCHED_TOKENS, max_len)
        if self.max_num_batched_tokens < max_len:
            raise ValueError(
                f"max_num_batched_tokens {self.max_num_batched_tokens} is less than "
                f"max_model_len {max_len}: a prompt of max_model_len tokens could never be "
                "prefilled; raise it or lower max_model_len"
            )
        return self.max_num_batched_tokens


@dataclass(frozen=True)
class ParallelConfig:
    """How a model is split over ranks, and where the ranks run."""

    tensor_parallel_size: int = field(
        default=1, metadata={"help": "ranks (GPUs) the model is split over", "aliases": ["-tp"]}
    )
    distributed_executor_backend: str | None = field(
        default=None,
        metadata={
            "help": "where the ranks run: mp (processes on this machine) or ray; "
            "default: ray when tensor_parallel_size > 1",
            "choices": list(BACKENDS),
        },
    )
    ray_address: str | None = field(
        default=None,
        metadata={"help": "join this Ray cluster (auto: the one `ray start` made on this node)"},
    )
    placement_timeout_s: float = field(
        default=60.0, metadata={"help": "how long to wait for Ray to place the ranks"}
    )

    def __post_init__(self) -> None:
        if self.tensor_parallel_size < 1:
            raise ValueError(f"tensor_parallel_size must be >= 1, got {self.tensor_parallel_size}")
        backend = self.distributed_executor_backend
        if backend is not None and backend not in BACKENDS:
            raise ValueError(f"distributed_executor_backend must be mp or ray, got {backend!r}")
        if self.ray_address and backend == "mp":
            raise ValueError("ray_address needs the ray executor backend, not mp")

    @property
    def uses_executor(self) -> bool:
        """Whether the model runs as ranks of an executor (else in this process)."""
        return (
            self.tensor_parallel_size > 1
            or self.distributed_executor_backend is not None
            or self.ray_address is not None
        )

    @property
    def backend(self) -> str:
        if self.distributed_executor_backend is not None:
            return self.distributed_executor_backend
        return "ray" if self.ray_address or self.tensor_parallel_size > 1 else "mp"
