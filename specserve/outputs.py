"""What a finished request returns, shaped like vLLM's RequestOutput."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from model_runtime.logprobs import TokenLogprob
from router.sequence import RequestTimes, SequenceState


@dataclass
class Logprob:
    """One token's log-probability at one position, as vLLM reports it."""

    logprob: float
    rank: int | None = None  # 1: the most likely token
    decoded_token: str | None = None


# Per position: the chosen token and the top alternatives, by token id.
PositionLogprobs = dict[int, Logprob]


def position_logprobs(t: TokenLogprob, decode: Callable[[int], str]) -> PositionLogprobs:
    out = {
        token: Logprob(value, rank, decode(token))
        for rank, (token, value) in enumerate(
            zip(t.top_token_ids, t.top_logprobs, strict=True), start=1
        )
    }
    out.setdefault(t.token_id, Logprob(t.logprob, t.rank, decode(t.token_id)))
    return out


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None
    stop_reason: int | str | None = None
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    logprobs: list[PositionLogprobs] | None = None  # when SamplingParams.logprobs was set
    cumulative_logprob: float | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = True
    # When SamplingParams.prompt_logprobs was set: None for the first token.
    prompt_logprobs: list[PositionLogprobs | None] | None = None
    # When it arrived, was first scheduled, got its first and last tokens, finished.
    metrics: RequestTimes | None = None

    @classmethod
    def from_sequences(
        cls, prompt: str | None, seqs: list[SequenceState], decode: Callable[[int], str]
    ) -> RequestOutput:
        seqs = sorted(seqs, key=lambda s: s.index)
        first = seqs[0]
        wants = first.params.logprobs is not None
        return cls(
            request_id=first.request_id,
            prompt=prompt,
            prompt_token_ids=list(first.prompt_ids),
            prompt_logprobs=(
                None
                if first.prompt_logprobs is None
                else [None, *(position_logprobs(t, decode) for t in first.prompt_logprobs)]
            ),
            outputs=[
                CompletionOutput(
                    index=s.index,
                    text=s.text,
                    token_ids=list(s.output_ids),
                    finish_reason=s.finish_reason,
                    stop_reason=s.stop_reason,
                    num_drafts=s.counts.num_drafts,
                    num_draft_tokens=s.counts.num_draft_tokens,
                    num_accepted_tokens=s.counts.num_accepted_tokens,
                    logprobs=[position_logprobs(t, decode) for t in s.logprobs] if wants else None,
                    cumulative_logprob=sum(t.logprob for t in s.logprobs) if wants else None,
                )
                for s in seqs
            ],
            finished=all(s.finished for s in seqs),
            metrics=_times(seqs),
        )


def _times(seqs: list[SequenceState]) -> RequestTimes:
    """A request's times from its completions': the first arrival and
    scheduling and token, the last token and finish."""

    def first(values: list[float | None]) -> float | None:
        return min((v for v in values if v is not None), default=None)

    def last(values: list[float | None]) -> float | None:
        return max((v for v in values if v is not None), default=None)

    times = [s.times for s in seqs]
    return RequestTimes(
        arrival_time=min(t.arrival_time for t in times),
        first_scheduled_time=first([t.first_scheduled_time for t in times]),
        first_token_time=first([t.first_token_time for t in times]),
        last_token_time=last([t.last_token_time for t in times]),
        finished_time=last([t.finished_time for t in times]),
    )
