"""The choices of one response: each is one completion in flight on the
backend (n per prompt, choice i seeded seed + i), with what it has sent so far.
All of a request's choices start, or none do."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace

from gateway.backends import Backend, Completion, Overloaded, Unavailable
from gateway.protocol import GatewayError, SamplingFields
from gateway.tools import CallReader
from router.deltas import Delta
from router.params import SamplingParams, kept_prompt


@dataclass
class Choice:
    """One choice of a response: its completion in flight and what it has sent."""

    index: int
    completion: Completion
    prompt_ids: list[int]
    echo_text: str  # the prompt's text when echoing, else ""
    text_offset: int = 0  # where the next token's text starts (completion logprobs)
    started: bool = False  # whether a delta of it was rendered
    first: Delta | None = None  # its first delta, once awaited (Responder.prime)
    deltas: AsyncIterator[Delta] = field(init=False)  # the completion's, iterated once
    submitted_at: float = field(default_factory=time.monotonic)
    last_token_at: float | None = None  # when its latest tokens came
    calls: CallReader | None = None  # its tool calls, read from its text (chat with tools)

    def __post_init__(self) -> None:
        self.deltas = aiter(self.completion)


class PromptOnly:
    """A completion of one token that shows none: echo with max_tokens 0, the
    prompt and its logprobs alone (what evaluation harnesses send to score
    text). The token is generated because the prompt's logprobs come with
    the first step."""

    def __init__(self, completion: Completion):
        self._completion = completion

    async def __aiter__(self) -> AsyncIterator[Delta]:
        async for d in self._completion:
            finish = d.finish_reason if d.finish_reason in (None, "abort") else "length"
            yield replace(d, token_ids=[], text="", logprobs=[], finish_reason=finish,
                          stop_reason=None)  # fmt: skip

    def abort(self) -> None:
        self._completion.abort()


def refusal(e: Exception) -> GatewayError:
    """The answer to a backend's refusal: a full backend is 429 (come back in a
    second), one that cannot serve 503, a request it will not take 400."""
    if isinstance(e, Overloaded):
        return GatewayError(str(e), 429, retry_after_s=1)
    if isinstance(e, Unavailable):
        return GatewayError(str(e), 503)
    return GatewayError(str(e))


def start_choices(
    backend: Backend,
    prompts: list[list[int]],
    texts: list[str],
    body: SamplingFields,
    max_tokens: int | None,
    echo: bool,
) -> list[Choice]:
    """Start ``body.n`` choices of every prompt; GatewayError (and nothing left
    running) when any of them is refused."""
    if not 1 <= body.n <= SamplingParams.MAX_N:
        raise GatewayError(f"n must be in [1, {SamplingParams.MAX_N}], got {body.n}")
    choices: list[Choice] = []
    prompt_only = max_tokens == 0  # echo alone: the prompt (and its logprobs)
    try:
        for whole, text in zip(prompts, texts, strict=True):
            ids = kept_prompt(whole, body.truncate_prompt_tokens)
            params = _params(
                body, 1 if prompt_only else max_tokens, len(ids), backend.max_model_len
            )
            params.check_token_ids(backend.vocab_size)
            for i in range(body.n):
                completion = backend.submit(ids, choice_params(params, i))
                if prompt_only:
                    completion = PromptOnly(completion)
                choices.append(Choice(len(choices), completion, ids, text if echo else ""))
    except (ValueError, Overloaded, Unavailable) as e:
        abort_all(choices)
        raise refusal(e) from e
    return choices


def _params(
    body: SamplingFields, max_tokens: int | None, prompt_len: int, max_model_len: int
) -> SamplingParams:
    """The request's SamplingParams for one prompt; without max_tokens, the
    room the context has left (ValueError when max_tokens exceeds it)."""
    room = max_model_len - prompt_len
    if max_tokens is not None and max_tokens > room:
        raise ValueError(
            f"max_tokens {max_tokens} plus the prompt's {prompt_len} tokens exceed "
            f"max_model_len {max_model_len}"
        )
    with_max = body.model_copy(update={"max_tokens": max_tokens})
    return with_max.sampling_params(room if room > 0 else None)


def choice_params(params: SamplingParams, index: int) -> SamplingParams:
    """The params of choice ``index``: its own seed (seed + index)."""
    return replace(params, seed=None if params.seed is None else params.seed + index)


def abort_all(choices: list[Choice]) -> None:
    """Stop every choice still running (finished ones are left as they are)."""
    for choice in choices:
        choice.completion.abort()


def merge(deltas: list[Delta]) -> Delta:
    """A whole completion as one delta."""
    last = deltas[-1]
    return replace(
        last,
        token_ids=[t for d in deltas for t in d.token_ids],
        text="".join(d.text for d in deltas),
        logprobs=[lp for d in deltas for lp in d.logprobs],
        prompt_logprobs=deltas[0].prompt_logprobs,
    )
