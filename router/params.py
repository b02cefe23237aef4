"""SamplingParams: what a request asks for, as vLLM and the OpenAI API spell it."""

from __future__ import annotations

from dataclasses import dataclass, field

from model_runtime.sampling import SamplingOptions


@dataclass
class SamplingParams:
    """How to sample one prompt's completions (vLLM's defaults and meanings).

    temperature 0 is greedy; top_k 0 or -1 and top_p 1 are off. Generation
    stops at the tokenizer's EOS (unless ignore_eos), at any of
    ``stop_token_ids`` (returned), before any of the ``stop`` strings (not
    returned), or after ``max_tokens`` tokens. Log-probabilities are the
    target's raw ones, before temperature and truncation.
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    max_tokens: int | None = 16
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    logprobs: int | None = None  # per generated token: its logprob and this many alternatives
    prompt_logprobs: int | None = None  # the same for every prompt token after the first
    stop_strings: list[str] = field(init=False, repr=False)

    MAX_N = 128
    # Every new token is checked against every stop string: bounded, so that
    # one request cannot slow everyone's stream.
    MAX_STOP_STRINGS = 64
    MAX_STOP_LENGTH = 512

    def __post_init__(self) -> None:
        if not 1 <= self.n <= self.MAX_N:
            raise ValueError(f"n must be in [1, {self.MAX_N}], got {self.n}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        self.stop_strings = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if any(not s for s in self.stop_strings):
            raise ValueError("stop strings must not be empty")
        if len(self.stop_strings) > self.MAX_STOP_STRINGS:
            raise ValueError(
                f"at most {self.MAX_STOP_STRINGS} stop strings, got {len(self.stop_strings)}"
            )
        if any(len(s) > self.MAX_STOP_LENGTH for s in self.stop_strings):
            raise ValueError(f"stop strings may be at most {self.MAX_STOP_LENGTH} characters long")
        if len(self.stop_token_ids or []) > self.MAX_STOP_STRINGS:
            raise ValueError(f"at most {self.MAX_STOP_STRINGS} stop_token_ids")
        self.options(0)  # validates the sampling fields, seed and logprobs

    @property
    def greedy(self) -> bool:
        return self.options(0).greedy

    def options(self, index: int) -> SamplingOptions:
        """Sampling options of completion ``index`` (seed + index when seeded)."""
        return SamplingOptions(
            temperature=self.temperature,
            top_k=self.top_k,
            top_p=self.top_p,
            min_p=self.min_p,
            seed=None if self.seed is None else self.seed + index,
            logprobs=self.logprobs,
            prompt_logprobs=self.prompt_logprobs,
        )
