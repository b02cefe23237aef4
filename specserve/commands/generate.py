"""``specserve generate``: complete one prompt from the shell, with speculation
when a speculative_config is given. The text goes to stdout, the speculation
statistics to stderr."""

from __future__ import annotations

from dataclasses import dataclass, field

from model_runtime.resolve import DEFAULT_TARGET
from model_runtime.specs import RunnerSpec
from router.config import EngineConfig
from router.engine import LLMEngine
from router.params import SamplingParams
from specserve.arguments import flag_of, speculative_config_from_flag
from specserve.local_workers import build_local_workers


@dataclass(frozen=True)
class GenerateConfig:
    prompt: str = field(metadata={"help": "text to continue", "positional": True})
    model: str = flag_of(RunnerSpec, "model", DEFAULT_TARGET)
    speculative_config: str | None = field(
        default=None,
        metadata={"help": 'JSON (or a JSON file): {"model": ..., "num_speculative_tokens": k}'},
    )
    max_tokens: int = field(default=64, metadata={"help": "tokens to generate at most"})
    temperature: float = field(default=0.0, metadata={"help": "0 is greedy"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling"})
    top_k: int = field(default=0, metadata={"help": "0 keeps every token"})
    seed: int | None = field(default=None, metadata={"help": "seed of this request"})
    dtype: str = flag_of(RunnerSpec, "dtype")
    device: str = flag_of(RunnerSpec, "device")
    enforce_eager: bool = flag_of(RunnerSpec, "enforce_eager")
    max_model_len: int | None = flag_of(RunnerSpec, "max_model_len")

    def sampling_params(self) -> SamplingParams:
        return SamplingParams(
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            seed=self.seed,
            max_tokens=self.max_tokens,
        )

    def engine_config(self) -> EngineConfig:
        return EngineConfig.of(
            self.model,
            speculative_config_from_flag(self.speculative_config),
            max_model_len=self.max_model_len,
            dtype=self.dtype,
            device=self.device,
            enforce_eager=self.enforce_eager,
        )

    def __post_init__(self) -> None:
        self.sampling_params()  # validates the sampling fields
        self.engine_config()  # and the engine's


def generate(config: GenerateConfig) -> tuple[str, str | None]:
    """The completion of ``config.prompt``, and the speculation summary if any."""
    engine_config = config.engine_config()
    engine = LLMEngine(engine_config, build_local_workers(engine_config))
    (seq,) = engine.add_request(
        "0", engine.tokenizer.encode(config.prompt), config.sampling_params()
    )
    while engine.has_unfinished():
        engine.step()
    return seq.text, engine.metrics.summary() if engine.k else None
