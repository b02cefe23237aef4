"""The OpenAI-compatible HTTP gateway: /v1/models, /v1/completions and
/v1/chat/completions (streamed as server-sent events or not), /health,
/version and /metrics, in front of a backend (the engine in this process, or
a Router service over gRPC)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from importlib.metadata import version as package_version
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException

from router.backends import Backend, Completion
from router.loop import Delta
from router.metrics import GatewayMetrics
from router.openai_protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    SamplingFields,
    chat_logprobs,
    completion_logprobs,
    error_body,
)
from router.params import SamplingParams


class GatewayError(Exception):
    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass
class _Choice:
    """One choice of a response: its completion in flight and what it has sent."""

    index: int
    completion: Completion
    prompt_ids: list[int]
    echo_text: str  # the prompt's text when echoing, else ""
    text_offset: int = 0  # where the next token's text starts (completion logprobs)
    started: bool = False


def _merge(deltas: list[Delta]) -> Delta:
    """A whole completion as one delta."""
    last = deltas[-1]
    return replace(
        last,
        token_ids=[t for d in deltas for t in d.token_ids],
        text="".join(d.text for d in deltas),
        logprobs=[lp for d in deltas for lp in d.logprobs],
        prompt_logprobs=deltas[0].prompt_logprobs,
    )


def build_app(backend: Backend, served_model_name: str, api_key: str | None = None) -> FastAPI:
    app = FastAPI(title="specserve")
    tokenizer = backend.tokenizer
    metrics = GatewayMetrics(backend.stats)

    def decode(token_id: int) -> str:
        return str(tokenizer.decode([token_id]))

    @app.exception_handler(GatewayError)
    async def _gateway_error(request: Request, exc: GatewayError) -> JSONResponse:
        return JSONResponse(error_body(str(exc), code=exc.status), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        parts = [f"{'.'.join(map(str, e['loc'][1:])) or 'body'}: {e['msg']}" for e in exc.errors()]
        return JSONResponse(error_body("; ".join(parts)), status_code=400)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
        return JSONResponse(
            error_body(str(exc.detail), code=exc.status_code), status_code=exc.status_code
        )

    @app.middleware("http")
    async def _auth_and_count(request: Request, call_next: Any) -> Any:
        start = time.monotonic()
        path = request.url.path
        if (
            api_key
            and path.startswith("/v1")
            and (request.headers.get("authorization") != f"Bearer {api_key}")
        ):
            response = JSONResponse(
                error_body("invalid or missing API key", "authentication_error", 401),
                status_code=401,
            )
        else:
            response = await call_next(request)
        if path.startswith("/v1"):
            metrics.requests.labels(path, str(response.status_code)).inc()
            metrics.latency.observe(time.monotonic() - start)
        return response

    @app.get("/metrics")
    async def prometheus_metrics() -> Response:
        return Response(await asyncio.to_thread(metrics.text), media_type=CONTENT_TYPE_LATEST)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/version")
    async def version() -> dict[str, str]:
        return {"version": package_version("specserve")}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": served_model_name,
                    "object": "model",
                    "created": 0,
                    "owned_by": "specserve",
                    "max_model_len": backend.max_model_len,
                }
            ],
        }

    def check_model(body: SamplingFields) -> None:
        if body.model is not None and body.model != served_model_name:
            raise GatewayError(
                f"model {body.model!r} does not exist; this server serves {served_model_name!r}",
                404,
            )

    def submit(
        prompts: list[list[int]],
        texts: list[str],
        body: SamplingFields,
        max_tokens: int | None,
        echo: bool,
    ) -> list[_Choice]:
        """Start every choice of every prompt (n per prompt), or none of them."""
        if not 1 <= body.n <= SamplingParams.MAX_N:
            raise GatewayError(f"n must be in [1, {SamplingParams.MAX_N}], got {body.n}")
        choices: list[_Choice] = []
        try:
            for ids, text in zip(prompts, texts, strict=True):
                room = backend.max_model_len - len(ids)
                if max_tokens is not None and max_tokens > room:
                    raise ValueError(
                        f"max_tokens {max_tokens} plus the prompt's {len(ids)} tokens exceed "
                        f"max_model_len {backend.max_model_len}"
                    )
                params = body.model_copy(update={"max_tokens": max_tokens}).sampling_params(
                    room if room > 0 else None
                )
                for i in range(body.n):
                    completion = backend.submit(ids, _choice_params(params, i))
                    choices.append(_Choice(len(choices), completion, ids, text if echo else ""))
        except ValueError as e:
            for choice in choices:
                choice.completion.abort()
            raise GatewayError(str(e)) from e
        return choices

    def render(kind: str, choice: _Choice, delta: Delta, wants_logprobs: bool) -> dict[str, Any]:
        """The choice's fields for this delta (a whole completion, or a chunk of one)."""
        first = not choice.started
        choice.started = True
        if kind == "chat":
            message: dict[str, Any] = {"content": delta.text}
            if first:
                message = {"role": "assistant", **message}
            return {
                "message": message,
                "logprobs": chat_logprobs(delta.logprobs, decode) if wants_logprobs else None,
            }
        logprobs = None
        if wants_logprobs:
            pairs: list[Any] = []
            if first and choice.echo_text and delta.prompt_logprobs is not None:
                pairs += [(choice.prompt_ids[0], None)]
                pairs += zip(choice.prompt_ids[1:], delta.prompt_logprobs, strict=True)
            pairs += zip(delta.token_ids, delta.logprobs, strict=True)
            logprobs = completion_logprobs(pairs, decode, choice.text_offset)
            choice.text_offset += sum(len(t) for t in logprobs["tokens"])
        text = (choice.echo_text if first else "") + delta.text
        return {"text": text, "logprobs": logprobs}

    async def timed(completion: Completion) -> AsyncIterator[Delta]:
        """A choice's deltas, timing the first token and the gaps between tokens."""
        start = last = time.monotonic()
        first = True
        async for delta in completion:
            now = time.monotonic()
            if delta.token_ids:
                if first:
                    metrics.ttft.observe(now - start)
                    first = False
                else:
                    metrics.itl.observe((now - last) / len(delta.token_ids))
                last = now
            yield delta

    def usage(prompts: list[list[int]], completion_tokens: int) -> dict[str, int]:
        prompt_tokens = sum(len(p) for p in prompts)
        return {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }

    async def respond(
        kind: str,
        prompts: list[list[int]],
        texts: list[str],
        body: SamplingFields,
        max_tokens: int | None,
        echo: bool = False,
    ) -> Any:
        choices = submit(prompts, texts, body, max_tokens, echo)
        head = {
            "id": f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{uuid.uuid4().hex}",
            "created": int(time.time()),
            "model": served_model_name,
        }
        wants_logprobs = body.logprob_counts()[0] is not None
        if body.stream:
            chunks = stream(kind, head, choices, prompts, body, wants_logprobs)
            return StreamingResponse(chunks, media_type="text/event-stream")
        rendered, completion_tokens = [], 0
        try:
            for choice in choices:
                deltas = [d async for d in timed(choice.completion)]
                whole = _merge(deltas)
                if whole.error:
                    raise GatewayError(whole.error, 503)
                completion_tokens += len(whole.token_ids)
                fields = render(kind, choice, whole, wants_logprobs)
                rendered.append(
                    {"index": choice.index, **fields, "finish_reason": whole.finish_reason}
                )
        except ValueError as e:  # refused by a remote router
            raise GatewayError(str(e)) from e
        finally:
            for choice in choices:
                choice.completion.abort()
        obj = "chat.completion" if kind == "chat" else "text_completion"
        return {
            **head,
            "object": obj,
            "choices": rendered,
            "usage": usage(prompts, completion_tokens),
        }

    async def stream(
        kind: str,
        head: dict[str, Any],
        choices: list[_Choice],
        prompts: list[list[int]],
        body: SamplingFields,
        wants_logprobs: bool,
    ) -> AsyncIterator[str]:
        obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
        merged: asyncio.Queue[tuple[_Choice, Delta | Exception]] = asyncio.Queue()

        async def pump(choice: _Choice) -> None:
            try:
                async for d in timed(choice.completion):
                    await merged.put((choice, d))
            except ValueError as e:
                await merged.put((choice, e))

        def event(payload: dict[str, Any]) -> str:
            return f"data: {json.dumps(payload)}\n\n"

        tasks = [asyncio.create_task(pump(c)) for c in choices]
        open_choices, completion_tokens = len(choices), 0
        try:
            while open_choices:
                choice, d = await merged.get()
                if isinstance(d, Exception) or d.error:
                    yield event(error_body(str(d) if isinstance(d, Exception) else d.error or ""))
                    break
                completion_tokens += len(d.token_ids)
                fields = render(kind, choice, d, wants_logprobs)
                if kind == "chat":
                    fields["delta"] = fields.pop("message")
                chunk = {"index": choice.index, **fields, "finish_reason": d.finish_reason}
                yield event({**head, "object": obj, "choices": [chunk]})
                if d.finish_reason is not None:
                    open_choices -= 1
            if body.include_usage:
                yield event(
                    {
                        **head,
                        "object": obj,
                        "choices": [],
                        "usage": usage(prompts, completion_tokens),
                    }
                )
            yield "data: [DONE]\n\n"
        finally:  # finished, or the client went away: stop whatever still runs
            for choice in choices:
                choice.completion.abort()
            for task in tasks:
                task.cancel()

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest) -> Any:
        check_model(body)
        prompts, texts = _prompts(body.prompt, tokenizer)
        # The completions API's own default is 16 tokens (chat: up to the context length).
        max_tokens = body.max_tokens if body.max_tokens is not None else 16
        return await respond("completion", prompts, texts, body, max_tokens, body.echo)

    @app.post("/v1/chat/completions")
    async def chat(body: ChatCompletionRequest) -> Any:
        check_model(body)
        messages = [m.model_dump() for m in body.messages]
        try:
            text = tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False
            )
        except Exception as e:  # a template that rejects these messages
            raise GatewayError(f"the chat template cannot render these messages: {e}") from e
        ids = list(tokenizer.encode(str(text), add_special_tokens=False))
        max_tokens = body.max_completion_tokens or body.max_tokens
        return await respond("chat", [ids], [""], body, max_tokens)

    return app


def _choice_params(params: SamplingParams, index: int) -> SamplingParams:
    """The params of choice ``index``: its own seed (seed + index)."""
    return replace(params, seed=None if params.seed is None else params.seed + index)


def _prompts(prompt: Any, tokenizer: Any) -> tuple[list[list[int]], list[str]]:
    """A completion request's prompt(s) as token ids, and as text (for echo)."""
    if isinstance(prompt, str):
        return [list(tokenizer.encode(prompt))], [prompt]
    items = list(prompt)
    if items and all(isinstance(x, str) for x in items):
        return [list(tokenizer.encode(x)) for x in items], [str(x) for x in items]
    if items and all(isinstance(x, int) for x in items):
        ids = [int(x) for x in items]
        return [ids], [str(tokenizer.decode(ids))]
    if items and all(isinstance(x, list) and x for x in items):
        lists = [[int(t) for t in x] for x in items]
        return lists, [str(tokenizer.decode(x)) for x in lists]
    raise GatewayError(
        "prompt must be a string, a list of strings, token ids or lists of token ids, and not empty"
    )
