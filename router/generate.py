"""``specserve generate``: complete one prompt from the shell, with speculation
when a speculative_config is given. The text goes to stdout, the speculation
statistics to stderr."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from model_runtime.config import DTYPES
from model_runtime.resolve import DEFAULT_TARGET
from router.config import EngineConfig, SpeculativeConfig
from router.engine import LLMEngine
from router.params import SamplingParams


def parse_speculative_config(value: str) -> dict[str, Any]:
    """JSON text, or the path of a JSON file."""
    text = Path(value).read_text() if Path(value).is_file() else value
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"--speculative_config is not valid JSON: {e}") from e
    if not isinstance(parsed, dict):
        raise ValueError("--speculative_config must be a JSON object")
    return parsed


@dataclass(frozen=True)
class GenerateConfig:
    prompt: str = field(metadata={"help": "text to continue", "positional": True})
    model: str = field(
        default=DEFAULT_TARGET,
        metadata={"help": "checkpoint folder, bundled model name or hub id"},
    )
    speculative_config: str | None = field(
        default=None,
        metadata={"help": 'JSON (or a JSON file): {"model": ..., "num_speculative_tokens": k}'},
    )
    max_tokens: int = field(default=64, metadata={"help": "tokens to generate at most"})
    temperature: float = field(default=0.0, metadata={"help": "0 is greedy"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling"})
    top_k: int = field(default=0, metadata={"help": "0 keeps every token"})
    seed: int | None = field(default=None, metadata={"help": "seed of this request"})
    dtype: str = field(
        default="auto",
        metadata={
            "help": "weight dtype; auto keeps the checkpoint's",
            "choices": ["auto", *DTYPES],
        },
    )
    device: str = field(
        default="auto", metadata={"help": "torch device; auto picks cuda if present"}
    )
    max_model_len: int | None = field(
        default=None, metadata={"help": "context length; default: the model's"}
    )

    def sampling_params(self) -> SamplingParams:
        return SamplingParams(
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            seed=self.seed,
            max_tokens=self.max_tokens,
        )

    def engine_config(self) -> EngineConfig:
        spec = None
        if self.speculative_config:
            spec = SpeculativeConfig.from_dict(parse_speculative_config(self.speculative_config))
        return EngineConfig(
            model=self.model,
            speculative=spec,
            max_model_len=self.max_model_len,
            dtype=self.dtype,
            device=self.device,
        )

    def __post_init__(self) -> None:
        self.sampling_params()  # validates the sampling fields


def generate(config: GenerateConfig) -> tuple[str, str | None]:
    """The completion of ``config.prompt``, and the speculation summary if any."""
    engine = LLMEngine(config.engine_config())
    (seq,) = engine.add_request(
        "0", engine.tokenizer.encode(config.prompt), config.sampling_params()
    )
    while engine.has_unfinished():
        engine.step()
    return seq.text, engine.metrics.summary() if engine.k else None
