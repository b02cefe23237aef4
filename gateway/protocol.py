"""Request bodies of the OpenAI API as pydantic models, and its error shape.

Fields follow the OpenAI API and vLLM's extensions (top_k, min_p,
stop_token_ids, ignore_eos). Values are checked here and again by
SamplingParams; any failure becomes a 400 with OpenAI's error JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.structured_fields import structured_outputs
from gateway.tools import ToolChoice, ToolSpec, ToolUse
from router.params import SamplingParams
from router.structured import StructuredOutputsParams

# Fields of the OpenAI API and vLLM's extensions that this server does not
# act on yet, each with the value that asks for nothing: sent with that value
# they are accepted, with any other refused, never ignored.
NOT_YET: dict[str, object] = {
    "best_of": 1,
    "suffix": None,
}


def refuse_unsupported(values: Mapping[str, object]) -> None:
    """ValueError naming the first field of ``values`` that asks for more than
    NOT_YET says it may (an empty list or dict asks for nothing too)."""
    for name, value in values.items():
        if name in NOT_YET and value != NOT_YET[name] and value not in ({}, []):
            raise ValueError(f"{name}={value!r} is not supported yet; leave it out")


class SamplingFields(BaseModel):
    # An unknown field is refused (400 naming it), never silently ignored.
    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    max_tokens: int | None = Field(default=None)
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    n: int = 1
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    # What only describes the request to the provider (no effect on the output).
    user: str | None = None
    metadata: dict[str, Any] | None = None
    store: bool | None = None
    service_tier: str | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: dict[str, float] | None = None
    min_tokens: int = 0
    best_of: int | None = 1
    suffix: str | None = None
    bad_words: list[str] | None = None
    include_stop_str_in_output: bool = False
    truncate_prompt_tokens: int | None = None
    response_format: dict[str, Any] | None = None
    structured_outputs: dict[str, Any] | None = None
    guided_json: Any = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None

    @model_validator(mode="after")
    def _nothing_ignored(self) -> SamplingFields:
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options can only be set when stream is true")
        refuse_unsupported({n: getattr(self, n) for n in NOT_YET if hasattr(self, n)})
        return self

    def sampling_params(self, default_max_tokens: int | None) -> SamplingParams:
        """Raises ValueError naming the bad field."""
        logprobs, prompt_logprobs = self.logprob_counts()
        return SamplingParams(
            logprobs=logprobs,
            prompt_logprobs=prompt_logprobs,
            n=1,  # each of the n choices is its own request (seed + index)
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            min_p=self.min_p,
            seed=self.seed,
            max_tokens=self.max_tokens if self.max_tokens is not None else default_max_tokens,
            stop=self.stop,
            stop_token_ids=self.stop_token_ids,
            ignore_eos=self.ignore_eos,
            logit_bias=self.token_biases(),
            min_tokens=self.min_tokens,
            include_stop_str_in_output=self.include_stop_str_in_output,
            presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty,
            repetition_penalty=self.repetition_penalty,
            bad_words=self.bad_words,
            truncate_prompt_tokens=self.truncate_prompt_tokens,
            structured_outputs=self.structured(),
        )

    def structured(self) -> StructuredOutputsParams | None:
        """What the output must match, however the request asked."""
        guided = {
            "json": self.guided_json,
            "regex": self.guided_regex,
            "choice": self.guided_choice,
            "grammar": self.guided_grammar,
        }
        return structured_outputs(self.response_format, self.structured_outputs or {}, guided)

    def token_biases(self) -> dict[int, float] | None:
        """logit_bias with its keys (token ids, as JSON strings) as integers."""
        if not self.logit_bias:
            return None
        try:
            return {int(token): bias for token, bias in self.logit_bias.items()}
        except ValueError as e:
            raise ValueError(f"logit_bias keys must be token ids, got {e}") from e

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.get("include_usage"))

    def logprob_counts(self) -> tuple[int | None, int | None]:
        """Alternatives per generated token and per prompt token (None: no logprobs)."""
        return None, None


class CompletionRequest(SamplingFields):
    prompt: str | list[str] | list[int] | list[list[int]]
    echo: bool = False
    logprobs: int | None = None

    def logprob_counts(self) -> tuple[int | None, int | None]:
        # With echo the returned logprobs cover the prompt too.
        return self.logprobs, self.logprobs if self.echo else None


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "user", "assistant", "tool", "developer"]
    # A string, or a list of text parts (joined by newlines, as vLLM does);
    # None in an assistant's turn that only called tools.
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None  # an assistant's, as it got them
    tool_call_id: str | None = None  # a tool's result: the call it answers

    def rendered(self) -> dict[str, Any]:
        """The message as the chat template takes it."""
        text = (
            self.content
            if isinstance(self.content, str | None)
            else "\n".join(p.text for p in self.content)
        )
        extra = {
            "name": self.name,
            "tool_calls": self.tool_calls,
            "tool_call_id": self.tool_call_id,
        }
        return {"role": self.role, "content": text or "", **{k: v for k, v in extra.items() if v}}


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage]
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    tools: list[ToolSpec] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool = True

    def tool_use(self) -> ToolUse | None:
        return ToolUse.of(self.tools, self.tool_choice, self.parallel_tool_calls)

    def structured(self) -> StructuredOutputsParams | None:
        """A forced tool call's grammar, or what the request asked for (not both)."""
        asked, use = super().structured(), self.tool_use()
        forced = use.grammar() if use is not None else None
        if forced is not None and asked is not None:
            raise ValueError("a tool_choice that forces a call takes no structured outputs too")
        return forced or asked

    def logprob_counts(self) -> tuple[int | None, int | None]:
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs set to true")
        return (self.top_logprobs or 0) if self.logprobs else None, None


class NamesModel(Protocol):
    """A request body that may name the model it is for."""

    model: str | None


def validation_message(error: dict[str, Any]) -> str:
    """One of pydantic's complaints about a request body, said plainly."""
    where = ".".join(map(str, error["loc"][1:])) or "body"
    if error["type"] == "json_invalid":
        position = error["loc"][1] if len(error["loc"]) > 1 else "?"
        return (
            f"the request body is not valid JSON ({error['ctx'].get('error', 'invalid')} "
            f"at character {position})"
        )
    if error["type"] == "extra_forbidden":
        return f"{where}: unknown field; see the OpenAI API for the fields this route takes"
    return f"{where}: {error['msg']}".replace("Value error, ", "")


class GatewayError(Exception):
    """A request the gateway refuses: answered with OpenAI's error JSON and
    ``status`` (and a Retry-After header, when it says when to come back)."""

    def __init__(self, message: str, status: int = 400, retry_after_s: int | None = None):
        super().__init__(message)
        self.status = status
        self.retry_after_s = retry_after_s


# OpenAI's error types by status; anything else 4xx is an invalid request.
ERROR_TYPES = {401: "authentication_error", 429: "rate_limit_error"}


def error_body(message: str, code: int = 400) -> dict:
    kind = "server_error" if code >= 500 else ERROR_TYPES.get(code, "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}
