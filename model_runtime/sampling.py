"""Per-request sampling: the parameters, their batched form, the processed
distribution they define, and reproducible randomness.

Draft and target apply exactly the same processing to their logits, so the
draft proposes from q and the target verifies against p under one definition:
the request's logit bias and min-tokens masking first (``adjusted_logits``),
then temperature, then top-k, then top-p on what top-k kept, then min-p (the
order transformers' logits warpers apply them in).

Randomness for a request with a seed comes from a generator seeded by (seed,
position, stream), so a request's draws depend neither on its neighbours in
the batch nor on which worker computes them.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from model_runtime.host_copy import device_tensor

# Temperatures below this are greedy.
GREEDY_EPSILON = 1e-5
# The largest finite float32: logits are divided by the temperature in float32.
FLOAT32_MAX = 3.4028234663852886e38
# Most alternatives a request may ask log-probabilities for (vLLM's default cap).
MAX_LOGPROBS = 20
# The largest logit bias, as OpenAI's API bounds it.
MAX_BIAS = 100.0


@dataclass(frozen=True)
class SamplingOptions:
    """How one sequence samples. temperature 0 means greedy (argmax)."""

    temperature: float = 1.0
    top_k: int = 0  # 0 or -1: keep every token
    top_p: float = 1.0
    min_p: float = 0.0
    seed: int | None = None
    logprobs: int | None = None  # alternatives per generated token; None: no logprobs
    prompt_logprobs: int | None = None  # the same for the prompt's tokens
    # Added to the target's logits before anything else (OpenAI's logit_bias).
    logit_bias: tuple[tuple[int, float], ...] = ()
    # ``suppressed_ids`` (EOS and the stop tokens) cannot be sampled at the
    # first ``min_tokens_left`` positions a call samples (vLLM's min_tokens,
    # counted down by the router as tokens come).
    min_tokens_left: int = 0
    suppressed_ids: tuple[int, ...] = ()
    # Penalties on the tokens before each position (target_worker.penalties);
    # output_start: where the output begins in the sequence's tokens.
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    output_start: int = 0
    # Token sequences the output may not complete: the last token of each is
    # masked wherever the output ends in the ones before it (vLLM's bad_words).
    bad_words: tuple[tuple[int, ...], ...] = ()
    # llguidance's grammar text the output must match (structured outputs:
    # model_runtime.grammar); empty: none.
    grammar: str = ""

    def __post_init__(self) -> None:
        for name in ("logprobs", "prompt_logprobs"):
            value = getattr(self, name)
            if value is not None and not 0 <= value <= MAX_LOGPROBS:
                raise ValueError(f"{name} must be in [0, {MAX_LOGPROBS}], got {value}")
        if not 0 <= self.temperature <= FLOAT32_MAX:
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if self.top_k < -1:
            raise ValueError(f"top_k must be -1, 0 (off) or positive, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0 <= self.min_p <= 1:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p}")
        if self.seed is not None and not 0 <= self.seed < 2**64:
            raise ValueError(f"seed must be in [0, 2**64), got {self.seed}")
        for token, bias in self.logit_bias:
            if token < 0 or not -MAX_BIAS <= bias <= MAX_BIAS:
                raise ValueError(
                    f"logit_bias maps token ids >= 0 to values in [-{MAX_BIAS}, {MAX_BIAS}], "
                    f"got {token}: {bias}"
                )
        if self.min_tokens_left < 0 or any(t < 0 for t in self.suppressed_ids):
            raise ValueError("min_tokens_left and suppressed_ids must be >= 0")
        for name in ("presence_penalty", "frequency_penalty"):
            if not -2.0 <= getattr(self, name) <= 2.0:
                raise ValueError(f"{name} must be in [-2, 2], got {getattr(self, name)}")
        if any(not w or min(w) < 0 for w in self.bad_words):
            raise ValueError("bad_words must be non-empty token sequences of ids >= 0")
        if not 0 < self.repetition_penalty <= 100 or self.output_start < 0:
            raise ValueError(
                f"repetition_penalty must be in (0, 100], got {self.repetition_penalty}"
            )

    @property
    def needs_history(self) -> bool:
        """Whether sampling looks at the tokens before each position."""
        return self.penalized or bool(self.bad_words) or bool(self.grammar)

    @property
    def penalizes(self) -> bool:
        """Whether its history changes its logits: penalties or bad words."""
        return self.penalized or bool(self.bad_words)

    @property
    def penalized(self) -> bool:
        return (
            self.presence_penalty != 0
            or self.frequency_penalty != 0
            or self.repetition_penalty != 1
        )

    @property
    def adjusts_logits(self) -> bool:
        return bool(self.logit_bias) or (self.min_tokens_left > 0 and bool(self.suppressed_ids))

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_EPSILON


@dataclass
class SamplingTensors:
    """Sampling parameters of N rows (one row per position to sample), on the device."""

    temperature: torch.Tensor  # [N] float32; 1.0 on greedy rows
    top_k: torch.Tensor  # [N] int64; vocab size where off
    top_p: torch.Tensor  # [N] float32
    min_p: torch.Tensor  # [N] float32
    greedy: torch.Tensor  # [N] bool
    needs_sort: bool  # some row uses top-k or top-p (known on the host)
    needs_min_p: bool

    @classmethod
    def build(
        cls,
        options: Sequence[SamplingOptions],
        repeats: Sequence[int],
        vocab_size: int,
        device: torch.device,
    ) -> SamplingTensors:
        """Row i of the result holds ``options[j]`` for ``repeats[j]`` consecutive rows.

        The five columns travel in one copy from pinned memory that does not
        wait for the device (a forward may still be running)."""
        columns: list[list[float]] = [
            [1.0 if o.greedy else o.temperature for o in options],
            [float(o.top_k if 0 < o.top_k < vocab_size else vocab_size) for o in options],
            [o.top_p for o in options],
            [o.min_p for o in options],
            [float(o.greedy) for o in options],
        ]
        packed = device_tensor(
            [[v for v, r in zip(col, repeats, strict=True) for _ in range(r)] for col in columns],
            torch.float64,
            device,
        )  # [5, N]; float64 holds every top_k exactly
        return cls(
            temperature=packed[0].float(),
            top_k=packed[1].long(),
            top_p=packed[2].float(),
            min_p=packed[3].float(),
            greedy=packed[4].bool(),
            needs_sort=any(o.top_p < 1 or 0 < o.top_k < vocab_size for o in options),
            needs_min_p=any(o.min_p > 0 for o in options),
        )


def adjusted_logits(
    logits: torch.Tensor, options: Sequence[SamplingOptions], repeats: Sequence[int]
) -> torch.Tensor:
    """logits [N, V] with each request's bias added and, at its first
    ``min_tokens_left`` rows, its suppressed tokens masked (-inf): the
    distribution every later step (argmax, temperature, top-k, rejection)
    works on. Request j holds ``repeats[j]`` consecutive rows. Untouched (no
    copy) when no request adjusts."""
    if not any(o.adjusts_logits for o in options):
        return logits
    rows: list[int] = []
    cols: list[int] = []
    values: list[float] = []
    start = 0
    for o, n in zip(options, repeats, strict=True):
        for token, bias in o.logit_bias:
            rows += range(start, start + n)
            cols += [token] * n
            values += [bias] * n
        for row in range(start, start + min(o.min_tokens_left, n)):
            rows += [row] * len(o.suppressed_ids)
            cols += o.suppressed_ids
            values += [-math.inf] * len(o.suppressed_ids)
        start += n
    out = logits.float().clone()  # the caller's logits stay raw (logprobs read them)
    index = (
        device_tensor(rows, torch.long, out.device),
        device_tensor(cols, torch.long, out.device),
    )
    out.index_put_(index, device_tensor(values, torch.float32, out.device), accumulate=True)
    return out


def processed_probs(logits: torch.Tensor, params: SamplingTensors) -> torch.Tensor:
    """logits [N, V] -> probabilities [N, V] (float32) after temperature, top-k,
    top-p and min-p. Greedy rows get the plain softmax; callers take their argmax."""
    probs = torch.softmax(logits.float() / params.temperature.unsqueeze(1), dim=-1)
    if params.needs_sort:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        rank = torch.arange(probs.shape[1], device=probs.device)
        kept = rank < params.top_k.unsqueeze(1)  # top-k
        sorted_probs = sorted_probs * kept
        # top-p on what top-k kept: keep a token while the mass before it is below p.
        mass_before = sorted_probs.cumsum(-1) - sorted_probs
        total = sorted_probs.sum(-1, keepdim=True)
        sorted_probs = sorted_probs * (mass_before < params.top_p.unsqueeze(1) * total)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
    if params.needs_min_p:
        threshold = params.min_p.unsqueeze(1) * probs.amax(-1, keepdim=True)
        probs = probs * (probs >= threshold)
    return probs / probs.sum(-1, keepdim=True)


def stream_seed(seed: int, position: int, stream: str) -> int:
    """A 63-bit generator seed for one request's draws at one position."""
    digest = hashlib.blake2b(f"{seed}:{position}:{stream}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


class RowRandomness:
    """Random draws for the rows of a batch: a seeded row from its own
    generator (seed, position, stream), the others from the worker's generator."""

    def __init__(self, device: torch.device, seed: int = 0):
        self.device = device
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)

    def _generator(self, seed: int | None, position: int, stream: str) -> torch.Generator:
        if seed is None:
            return self.generator
        generator = torch.Generator(device=self.device)
        generator.manual_seed(stream_seed(seed, position, stream))
        return generator

    def uniform(self, rows: Sequence[tuple[int | None, int, int]], stream: str) -> torch.Tensor:
        """float64 uniforms in [0, 1): ``count`` per (seed, position, count) row, flat."""
        parts = [
            torch.rand(
                count,
                dtype=torch.float64,
                device=self.device,
                generator=self._generator(seed, position, stream),
            )
            for seed, position, count in rows
        ]
        return (
            torch.cat(parts) if parts else torch.empty(0, dtype=torch.float64, device=self.device)
        )

    def exponential(
        self, rows: Sequence[tuple[int | None, int]], vocab_size: int, stream: str
    ) -> torch.Tensor:
        """Exp(1) noise [len(rows), vocab_size]: argmax(probs / noise) samples from probs."""
        # Rows without a seed share one draw from the worker's generator (one
        # launch, no host synchronisation); a seeded row then draws its own.
        noise = torch.empty(len(rows), vocab_size, device=self.device)
        noise.exponential_(generator=self.generator)
        for i, (seed, position) in enumerate(rows):
            if seed is not None:
                noise[i].exponential_(generator=self._generator(seed, position, stream))
        # A draw of exactly 0 would divide by zero; the change in distribution is nil.
        return noise.clamp_min_(torch.finfo(torch.float32).tiny)
