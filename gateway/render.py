"""How a choice's deltas read in each API: one renderer for completions and
one for chat. A renderer turns a delta (a whole completion, or a chunk of a
stream) into the choice's fields, and knows its API's object names."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from gateway.choices import Choice
from gateway.tools import CallReader, ToolUse
from model_runtime.logprobs import TokenLogprob
from router.deltas import Delta

Decode = Callable[[int], str]


class Renderer(Protocol):
    id_prefix: str  # of the response's id
    object_name: str  # of a whole response
    chunk_object_name: str  # of a streamed chunk

    def fields(self, choice: Choice, delta: Delta, streaming: bool) -> dict[str, Any]:
        """The choice's fields for ``delta`` (besides index and finish_reason)."""
        ...

    def opening(self, choice: Choice) -> dict[str, Any] | None:
        """A streamed choice's fields before its first delta, if its API sends any."""
        ...


class _Rendering:
    def __init__(self, decode: Decode, wants_logprobs: bool):
        self.decode = decode  # a token id's text
        self.wants_logprobs = wants_logprobs


class CompletionRenderer(_Rendering):
    """/v1/completions: text (after the prompt, when echoing) and the
    completions API's logprobs (covering the prompt too with echo)."""

    id_prefix = "cmpl"
    object_name = "text_completion"
    chunk_object_name = "text_completion"

    def fields(self, choice: Choice, delta: Delta, streaming: bool) -> dict[str, Any]:
        first = not choice.started
        choice.started = True
        logprobs = None
        if self.wants_logprobs:
            pairs: list[tuple[int, TokenLogprob | None]] = []
            if first and choice.echo_text and delta.prompt_logprobs is not None:
                pairs.append((choice.prompt_ids[0], None))
                pairs += zip(choice.prompt_ids[1:], delta.prompt_logprobs, strict=True)
            pairs += zip(delta.token_ids, delta.logprobs, strict=True)
            logprobs = completion_logprobs(pairs, self.decode, choice.text_offset)
            choice.text_offset += sum(len(t) for t in logprobs["tokens"])
        text = (choice.echo_text if first else "") + delta.text
        return {"text": text, "logprobs": logprobs}

    def opening(self, choice: Choice) -> dict[str, Any] | None:
        return None


class ChatRenderer(_Rendering):
    """/v1/chat/completions: the assistant's message (a delta when streaming,
    the role in the first) and the chat API's logprobs."""

    id_prefix = "chatcmpl"
    object_name = "chat.completion"
    chunk_object_name = "chat.completion.chunk"

    def __init__(self, decode: Decode, wants_logprobs: bool, tools: ToolUse | None = None):
        """``tools``: how the request uses tools (its calls are read from the text)."""
        super().__init__(decode, wants_logprobs)
        self.tools = tools

    def opening(self, choice: Choice) -> dict[str, Any] | None:
        """The first chunk of a streamed choice names the role alone (as
        OpenAI's and vLLM's do), with empty content."""
        choice.started = True
        return {"delta": {"role": "assistant", "content": ""}, "logprobs": None}

    def fields(self, choice: Choice, delta: Delta, streaming: bool) -> dict[str, Any]:
        message: dict[str, Any] = {"content": delta.text}
        ending: dict[str, Any] = {}
        if self.tools is not None:
            message, ending = self._with_calls(choice, delta, streaming)
        if not choice.started:
            message = {"role": "assistant", **message}
        choice.started = True
        logprobs = chat_logprobs(delta.logprobs, self.decode) if self.wants_logprobs else None
        return {"delta" if streaming else "message": message, "logprobs": logprobs, **ending}

    def _with_calls(
        self, choice: Choice, delta: Delta, streaming: bool
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The message with the calls its text holds; a finish_reason of
        "tool_calls" once a call was made and the model stopped by itself."""
        assert self.tools is not None
        if choice.calls is None:
            choice.calls = CallReader(self.tools)
        final = delta.finish_reason is not None
        if streaming:
            content, calls = choice.calls.stream(delta.text, final)
        else:
            whole, calls = choice.calls.whole(delta.text)
            content, choice.calls.sent = whole or "", len(calls)
        message: dict[str, Any] = {"content": content if content or streaming else None}
        if calls:
            message["tool_calls"] = calls
        made = final and delta.finish_reason == "stop" and choice.calls.sent > 0
        return message, {"finish_reason": "tool_calls"} if made else {}


def completion_logprobs(
    tokens: Sequence[tuple[int, TokenLogprob | None]],
    decode: Callable[[int], str],
    text_offset: int,
) -> dict[str, Any]:
    """The completions API's logprobs object for these (token id, logprob) pairs;
    ``text_offset`` is where the first token's text starts in the choice's text."""
    out: dict[str, Any] = {
        "tokens": [],
        "token_logprobs": [],
        "top_logprobs": [],
        "text_offset": [],
    }
    for token_id, logprob in tokens:
        text = decode(token_id)
        out["tokens"].append(text)
        out["text_offset"].append(text_offset)
        text_offset += len(text)
        if logprob is None:  # the prompt's first token
            out["token_logprobs"].append(None)
            out["top_logprobs"].append(None)
            continue
        top = {
            decode(t): v for t, v in zip(logprob.top_token_ids, logprob.top_logprobs, strict=True)
        }
        top.setdefault(text, logprob.logprob)
        out["token_logprobs"].append(logprob.logprob)
        out["top_logprobs"].append(top)
    return out


def chat_logprobs(logprobs: Sequence[TokenLogprob], decode: Callable[[int], str]) -> dict:
    """The chat API's logprobs object: one entry per generated token."""

    def entry(token_id: int, value: float) -> dict[str, Any]:
        text = decode(token_id)
        return {"token": text, "logprob": value, "bytes": list(text.encode())}

    return {
        "content": [
            {
                **entry(t.token_id, t.logprob),
                "top_logprobs": [
                    entry(i, v) for i, v in zip(t.top_token_ids, t.top_logprobs, strict=True)
                ],
            }
            for t in logprobs
        ]
    }
