"""The engine's configuration, and speculative_config as vLLM takes it."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from model_runtime.specs import ParallelConfig, RunnerSpec

# Other names of engine arguments: vLLM's, and the one this engine used before.
ALIASES = {"num_gpu_blocks_override": "num_kv_blocks", "num_kv_blocks_override": "num_kv_blocks"}

SPECULATIVE_KEYS = (
    "model",
    "num_speculative_tokens",
    "method",
    "draft_tensor_parallel_size",
    "max_model_len",
    "revision",
    "adaptive_k",
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
    # Choose k in 0..num_speculative_tokens each round from measured acceptance
    # and step costs (router/adaptive.py); False pins k = num_speculative_tokens.
    adaptive_k: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.adaptive_k, bool):
            raise ValueError(
                f"speculative_config adaptive_k must be true or false, got {self.adaptive_k!r}"
            )
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
    """Everything an engine is built from: the target's runner (the draft's is
    the same but for the model), how the target splits over ranks, and the
    engine's own knobs. ``of`` takes vLLM's flat keyword arguments.

    An engine over gRPC workers reads only the runner's model name and
    max_num_seqs (its admission cap): the runners are the workers'.
    """

    runner: RunnerSpec
    speculative: SpeculativeConfig | None = None
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    seed: int = 0  # for requests without a seed of their own
    draft_top_n: int = 32  # tokens of each draft distribution q that are shipped
    # Keep two micro-batches in flight: draft one while verifying the other.
    # Pays off when draft and target run on different devices or hosts.
    overlap: bool = False
    # Seconds between log lines of throughput and speculation counters; None: never.
    log_stats_interval_s: float | None = 10.0

    def __post_init__(self) -> None:
        if self.log_stats_interval_s is not None and self.log_stats_interval_s < 0:
            raise ValueError(f"log_stats_interval_s must be >= 0, got {self.log_stats_interval_s}")
        if self.draft_top_n < 1:
            raise ValueError(f"draft_top_n must be >= 1, got {self.draft_top_n}")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")

    @property
    def model(self) -> str:
        return self.runner.model

    @property
    def requested_max_model_len(self) -> int | None:
        """The longest sequence asked for: the smaller of the runner's and the
        speculative config's max_model_len (None: the target model's own)."""
        spec = self.speculative
        requested = [n for n in (self.runner.max_model_len, spec and spec.max_model_len) if n]
        return min(requested) if requested else None

    @property
    def num_speculative_tokens(self) -> int:
        return self.speculative.num_speculative_tokens if self.speculative else 0

    @classmethod
    def of(
        cls, model: str, speculative: SpeculativeConfig | None = None, **options: Any
    ) -> EngineConfig:
        """The config from vLLM-style flat arguments (``max_model_len=...``,
        ``tensor_parallel_size=...``): each goes to the config that holds it;
        TypeError names any that none holds."""
        parts: dict[type, dict[str, Any]] = {RunnerSpec: {}, ParallelConfig: {}, cls: {}}
        for given, value in options.items():
            name = ALIASES.get(given, given)
            owner = next((c for c in parts if name in _settable(c)), None)
            if owner is None:
                raise TypeError(f"unknown engine argument: {name}")
            parts[owner][name] = value
        return cls(
            runner=RunnerSpec(model=model, **parts[RunnerSpec]),
            speculative=speculative,
            parallel=ParallelConfig(**parts[ParallelConfig]),
            **parts[cls],
        )

    @classmethod
    def argument_names(cls) -> set[str]:
        """The flat arguments ``of`` takes besides model and speculative."""
        return _settable(RunnerSpec) | _settable(ParallelConfig) | _settable(cls) | set(ALIASES)


def _settable(config: type) -> set[str]:
    """The fields of a config a user sets by name (not the nested configs)."""
    internal = {"model", "runner", "speculative", "parallel"}
    return {f.name for f in fields(config)} - internal
