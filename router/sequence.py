"""The router's state of one sequence (one completion of one request): its
tokens, what each worker holds of them, its text, and when it stops."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from transformers import PreTrainedTokenizerBase

from model_runtime.logprobs import TokenLogprob
from model_runtime.sampling import SamplingOptions
from router.acceptance import acceptance_kind
from router.detokenizer import IncrementalDetokenizer
from router.params import SamplingParams

# Distinct sampling options an engine keeps to share (then it starts over).
MAX_SHARED_SAMPLINGS = 1024


@dataclass
class SpeculationCounts:
    num_drafts: int = 0  # rounds that verified at least one draft
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0

    def record(self, num_draft_tokens: int, num_accepted: int) -> None:
        """A round verified ``num_draft_tokens`` drafts and accepted ``num_accepted``."""
        self.num_drafts += 1
        self.num_draft_tokens += num_draft_tokens
        self.num_accepted_tokens += num_accepted


@dataclass
class RequestTimes:
    """When a sequence arrived, was first scheduled, got its first and latest
    tokens, and finished (wall-clock seconds, as vLLM's RequestMetrics)."""

    arrival_time: float = field(default_factory=time.time)
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    last_token_time: float | None = None
    finished_time: float | None = None

    @property
    def time_in_queue(self) -> float | None:
        """Seconds from arrival to the first prefill."""
        if self.first_scheduled_time is None:
            return None
        return self.first_scheduled_time - self.arrival_time


@dataclass
class SequenceState:
    seq_id: int
    request_id: str
    index: int  # which of the request's n completions
    prompt_ids: list[int]
    params: SamplingParams
    options: SamplingOptions
    detokenizer: IncrementalDetokenizer
    eos_token_id: int | None
    max_model_len: int
    output_ids: list[int] = field(default_factory=list)
    target_worker: int = -1  # which target worker holds its KV (-1: none yet)
    draft_worker: int = -1  # which draft worker drafts for it (-1: none yet)
    micro_batch: int = 0  # which of the two overlapped micro-batches it rides in
    target_cached: int = 0  # tokens of all_ids the target worker holds
    draft_cached: int = 0  # tokens of all_ids the draft worker holds
    finish_reason: str | None = None  # "stop" or "length" (or "abort")
    error: str | None = None  # why it was aborted, when a worker failed it
    stop_reason: int | str | None = None
    counts: SpeculationCounts = field(default_factory=SpeculationCounts)
    logprobs: list[TokenLogprob] = field(default_factory=list)  # one per output token, if asked
    prompt_logprobs: list[TokenLogprob] | None = None  # once the prefill returned them
    times: RequestTimes = field(default_factory=RequestTimes)
    decoded: int = 0  # output tokens the detokenizer has seen
    num_tokens: int = field(init=False)  # of all_ids, kept as tokens are appended
    acceptance_kind: str = field(init=False)  # whose acceptance its drafts count in
    stop_ids: frozenset[int] = field(init=False)  # tokens that end it (EOS unless ignored)

    def __post_init__(self) -> None:
        self.num_tokens = len(self.prompt_ids) + len(self.output_ids)
        self.acceptance_kind = acceptance_kind(self.options)
        stops = set(self.params.stop_token_ids or ())
        if self.eos_token_id is not None and not self.params.ignore_eos:
            stops.add(self.eos_token_id)
        self.stop_ids = frozenset(stops)

    @property
    def room(self) -> int:
        """Tokens it may still gain before its length ends it."""
        room = self.max_model_len - self.num_tokens
        if self.params.max_tokens is not None:
            room = min(room, self.params.max_tokens - len(self.output_ids))
        return room

    @property
    def all_ids(self) -> list[int]:
        return self.prompt_ids + self.output_ids

    def tokens_from(self, start: int) -> list[int]:
        """``all_ids[start:]``, without joining the prompt to the output when
        ``start`` is past the prompt (each round's case)."""
        past = start - len(self.prompt_ids)
        return self.output_ids[past:] if past >= 0 else self.prompt_ids[start:] + self.output_ids

    def sampling(self, coming: int = 0) -> SamplingOptions:
        """How the next call samples (once ``coming`` more tokens are
        appended): ``options``, and while fewer than min_tokens tokens came,
        EOS (unless ignored) and the stop tokens suppressed for the positions
        still short of it."""
        left = self.params.min_tokens - len(self.output_ids) - coming
        if left <= 0:
            return self.options
        eos = [] if self.params.ignore_eos or self.eos_token_id is None else [self.eos_token_id]
        suppressed = tuple(sorted({*eos, *(self.params.stop_token_ids or [])}))
        return replace(self.options, min_tokens_left=left, suppressed_ids=suppressed)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def text(self) -> str:
        return self.text_of(len(self.output_ids))

    def text_of(self, num_tokens: int) -> str:
        """The text of the first ``num_tokens`` output tokens at least, decoding
        those not decoded yet. Without stop strings a round appends tokens
        undecoded: whoever reads the text pays for it, off the round's path.
        With stop strings every token is decoded as it comes (one may stop it)."""
        if self.params.detokenize and self.decoded < num_tokens:
            self.detokenizer.extend(self.output_ids[self.decoded : num_tokens])
            self.decoded = num_tokens
        return self.detokenizer.text

    def stamp(self, now: float | None = None) -> None:
        """Note the time of what just happened (``now``, if the caller read the
        clock once for a batch): tokens came, or it finished."""
        now = time.time() if now is None else now
        if self.output_ids:
            if self.times.first_token_time is None:
                self.times.first_token_time = now
            self.times.last_token_time = now
        if self.finished and self.times.finished_time is None:
            self.times.finished_time = now

    def reset_workers(self) -> None:
        """Forget what the workers held (preempted or lost): recompute from tokens."""
        self.target_cached = self.draft_cached = 0
        self.target_worker = self.draft_worker = -1

    def append(self, token_ids: list[int], logprobs: list[TokenLogprob] | None = None) -> None:
        """Append generated tokens (and their logprobs, when asked) until one of
        them finishes the sequence. Without stop strings they are not decoded
        here (``text_of``); with stop strings, token by token (one may end in
        the middle of the tokens)."""
        if self.params.stop_strings:
            for i, token in enumerate(token_ids):
                self._append_one(token, logprobs[i] if logprobs else None)
                if self.finished:
                    return
            return
        end = self._first_finishing(token_ids)
        kept = token_ids[:end]
        self.output_ids.extend(kept)
        self.num_tokens += len(kept)
        if logprobs:
            self.logprobs.extend(logprobs[:end])

    def _first_finishing(self, token_ids: list[int]) -> int:
        """How many of ``token_ids`` to keep: up to the first that stops the
        sequence (a stop token or EOS) or reaches its length; sets why."""
        end, reason, token = self._finishing(token_ids)
        if reason is not None:
            self.finish_reason = reason
        if token is not None:
            self.stop_reason = token
        return end

    def _finishing(self, token_ids: list[int]) -> tuple[int, str | None, int | None]:
        """How many of ``token_ids`` to keep, why they finish the sequence
        (None: they don't), and the stop token that does."""
        p = self.params
        room = self.room
        eos = None if p.ignore_eos else self.eos_token_id
        for i, token in enumerate(token_ids[:room]):
            if p.stop_token_ids and token in p.stop_token_ids:
                return i + 1, "stop", token
            if token == eos:
                return i + 1, "stop", None
        return min(room, len(token_ids)), "length" if room <= len(token_ids) else None, None

    def _append_one(self, token: int, logprob: TokenLogprob | None) -> None:
        p = self.params
        self.output_ids.append(token)
        self.num_tokens += 1
        if logprob is not None:
            self.logprobs.append(logprob)
        searched = len(self.detokenizer.text)  # stop strings were looked for up to here
        self.detokenizer.push(token)
        self.decoded += 1
        if p.stop_token_ids and token in p.stop_token_ids:
            self.finish_reason, self.stop_reason = "stop", token
        elif token == self.eos_token_id and not p.ignore_eos:
            self.finish_reason = "stop"
        elif len(self.output_ids) >= p.min_tokens and self._cut_at_stop_string(searched):
            self.finish_reason = "stop"
        elif p.max_tokens is not None and len(self.output_ids) >= p.max_tokens:
            self.finish_reason = "length"
        elif self.num_tokens >= self.max_model_len:
            self.finish_reason = "length"

    def _cut_at_stop_string(self, searched: int) -> bool:
        """Cut the text before the first stop string it now holds; only text
        new since ``searched`` (and the tail a stop string could begin in) is
        looked at, so a long output costs no more per token than a short one."""
        text = self.detokenizer.text
        for stop in self.params.stop_strings:
            at = text.find(stop, max(0, searched - len(stop) + 1))
            if at >= 0:
                keep = len(stop) if self.params.include_stop_str_in_output else 0
                self.detokenizer.text = text[: at + keep]
                self.stop_reason = stop
                return True
        return False


def new_sequences(
    seq_ids: Iterator[int],
    request_id: str,
    prompt_ids: Sequence[int],
    params: SamplingParams,
    tokenizer: PreTrainedTokenizerBase,
    max_model_len: int,
    shared: dict[SamplingOptions, SamplingOptions],
) -> list[SequenceState]:
    """The ``params.n`` completions of one prompt, each with the next id of
    ``seq_ids``; their options are those of ``shared`` where equal (added
    there if not), so that a batch's sequences mostly share one object, told
    apart from others by identity when a batch crosses the wire."""
    if len(shared) > MAX_SHARED_SAMPLINGS:  # seeded requests each have their own
        shared.clear()
    options = [
        _with_history(params.options(i), params, len(prompt_ids), tokenizer)
        for i in range(params.n)
    ]
    return [
        SequenceState(
            seq_id=next(seq_ids),
            request_id=request_id,
            index=i,
            prompt_ids=list(prompt_ids),
            params=params,
            options=shared.setdefault(o, o),
            detokenizer=IncrementalDetokenizer(tokenizer, prompt_ids, params.skip_special_tokens),
            eos_token_id=tokenizer.eos_token_id,
            max_model_len=max_model_len,
        )
        for i, o in enumerate(options)
    ]


def check_prompt(
    request_id: str, prompt_ids: Sequence[int], max_model_len: int, vocab_size: int
) -> None:
    """Raise ValueError, naming the request (if given), for a prompt that cannot be served."""
    where = f"request {request_id}: " if request_id else ""
    if not prompt_ids:
        raise ValueError(f"{where}the prompt is empty")
    if len(prompt_ids) >= max_model_len:
        raise ValueError(
            f"{where}the prompt has {len(prompt_ids)} tokens; the maximum model length is "
            f"{max_model_len}, leaving no room to generate"
        )
    bad = [t for t in prompt_ids if not 0 <= t < vocab_size]
    if bad:
        raise ValueError(f"{where}token ids {bad[:5]} outside [0, {vocab_size})")


def _with_history(
    options: SamplingOptions, params: SamplingParams, prompt_len: int, tokenizer: Any
) -> SamplingOptions:
    """The options with the bad words as token sequences and, where sampling
    looks back (penalties, bad words), where the output starts (the others
    stay alike, so that a batch's samplings cross the wire once)."""
    if params.bad_words:
        words = {
            tuple(tokenizer.encode(text, add_special_tokens=False))
            for word in params.bad_words
            for text in (word, " " + word)
        }
        options = replace(options, bad_words=tuple(sorted(w for w in words if w)))
    return replace(options, output_start=prompt_len) if options.needs_history else options
