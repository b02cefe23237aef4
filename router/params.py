"""SamplingParams: what a request asks for, as vLLM and the OpenAI API spell it."""

from __future__ import annotations

from dataclasses import dataclass, field

from model_runtime.sampling import SamplingOptions
from router.structured import StructuredOutputsParams


@dataclass
class SamplingParams:
    """How to sample one prompt's completions (vLLM's defaults and meanings).

    temperature 0 is greedy; top_k 0 or -1 and top_p 1 are off. Generation
    stops at the tokenizer's EOS (unless ignore_eos), at any of
    ``stop_token_ids`` (returned), before any of the ``stop`` strings (not
    returned), or after ``max_tokens`` tokens; not before ``min_tokens``
    (EOS and the stop tokens are masked until then). ``logit_bias`` is added
    to the logits first. Log-probabilities are the target's raw ones, before
    bias, temperature and truncation.
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
    # Added to the target's logits for these token ids (OpenAI's logit_bias).
    logit_bias: dict[int, float] | None = None
    # EOS (unless ignore_eos) and stop_token_ids cannot end the completion, nor
    # stop strings cut it, before this many tokens.
    min_tokens: int = 0
    # Keep the stop string that ended the text in it.
    include_stop_str_in_output: bool = False
    # Keep only the prompt's last this many tokens (None: all of them).
    truncate_prompt_tokens: int | None = None
    # On the output's tokens (presence: once, frequency: per occurrence) and,
    # repetition, on the prompt's and output's (target_worker.penalties).
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    # Words the output may not contain (each tokenized with and without a
    # leading space, as vLLM does).
    bad_words: list[str] | None = None
    # False: token ids only, no text (and so no stop strings).
    detokenize: bool = True
    # What the output must match: a JSON schema, a regex, a choice, a grammar.
    structured_outputs: StructuredOutputsParams | None = None
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
        if not 0 <= self.min_tokens <= (self.max_tokens or self.min_tokens):
            raise ValueError(
                f"min_tokens must be in [0, max_tokens], got {self.min_tokens} "
                f"(max_tokens {self.max_tokens})"
            )
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
        if self.truncate_prompt_tokens is not None and self.truncate_prompt_tokens < 1:
            raise ValueError(
                f"truncate_prompt_tokens must be >= 1, got {self.truncate_prompt_tokens}"
            )
        self.options(0)  # validates the sampling fields, seed and logprobs
        if not self.detokenize and self.stop_strings:
            raise ValueError("stop strings need the text: they take detokenize=True")

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
            logit_bias=tuple(
                sorted((int(t), float(b)) for t, b in (self.logit_bias or {}).items())
            ),
            presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty,
            repetition_penalty=self.repetition_penalty,
            grammar=self.structured_outputs.text if self.structured_outputs else "",
        )

    def check_token_ids(self, vocab_size: int) -> None:
        """ValueError for a logit_bias or stop token id outside the vocabulary."""
        ids = [*(self.logit_bias or {}), *(self.stop_token_ids or [])]
        bad = [t for t in ids if not 0 <= int(t) < vocab_size]
        if bad:
            raise ValueError(
                f"token ids {bad[:5]} in logit_bias or stop_token_ids are outside [0, {vocab_size})"
            )

    def prompt_kept(self, prompt_ids: list[int]) -> list[int]:
        """The prompt as generation sees it: its last truncate_prompt_tokens tokens."""
        return kept_prompt(prompt_ids, self.truncate_prompt_tokens)


def kept_prompt(prompt_ids: list[int], truncate_prompt_tokens: int | None) -> list[int]:
    """The last ``truncate_prompt_tokens`` of a prompt (all of it for None)."""
    n = truncate_prompt_tokens
    return prompt_ids if n is None or len(prompt_ids) <= n else prompt_ids[-n:]
