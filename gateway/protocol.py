"""Request bodies of the OpenAI API as pydantic models, and its error shape.

Fields follow the OpenAI API and vLLM's extensions (top_k, min_p,
stop_token_ids, ignore_eos). Values are checked here and again by
SamplingParams; any failure becomes a 400 with OpenAI's error JSON.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from router.params import SamplingParams


class SamplingFields(BaseModel):
    model_config = ConfigDict(extra="ignore")

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
    user: str | None = None

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
        )

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


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage]
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None

    def logprob_counts(self) -> tuple[int | None, int | None]:
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs set to true")
        return (self.top_logprobs or 0) if self.logprobs else None, None


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
