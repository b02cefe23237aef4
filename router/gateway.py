"""The OpenAI-compatible HTTP gateway: /v1/models, /v1/completions and
/v1/chat/completions (streamed as server-sent events or not), /health and
/version, in front of an engine loop."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from importlib.metadata import version as package_version
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException

from router.loop import Delta, EngineLoop
from router.metrics import GatewayMetrics
from router.openai_protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    SamplingFields,
    error_body,
)
from router.params import SamplingParams


class GatewayError(Exception):
    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


async def _deltas(events: Any, metrics: GatewayMetrics) -> AsyncIterator[Delta]:
    """One choice's deltas, timing the first token and the gaps between tokens."""
    start = last = time.monotonic()
    first = True
    while True:
        delta: Delta = await asyncio.to_thread(events.get)
        now = time.monotonic()
        if delta.token_ids:
            if first:
                metrics.ttft.observe(now - start)
                first = False
            else:
                metrics.itl.observe((now - last) / len(delta.token_ids))
            last = now
        yield delta
        if delta.finish_reason is not None:
            return


def build_app(loop: EngineLoop, served_model_name: str, api_key: str | None = None) -> FastAPI:
    app = FastAPI(title="specserve")
    tokenizer = loop.engine.tokenizer
    metrics = GatewayMetrics(loop.engine)

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
        return Response(metrics.text(), media_type=CONTENT_TYPE_LATEST)

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
                    "max_model_len": loop.engine.max_model_len,
                }
            ],
        }

    def check_model(body: SamplingFields) -> None:
        if body.model is not None and body.model != served_model_name:
            raise GatewayError(
                f"model {body.model!r} does not exist; this server serves {served_model_name!r}",
                404,
            )

    def submit(prompt_ids: list[int], body: SamplingFields, max_tokens: int | None) -> list[Any]:
        if not 1 <= body.n <= 128:
            raise GatewayError(f"n must be in [1, 128], got {body.n}")
        room = loop.engine.max_model_len - len(prompt_ids)
        if max_tokens is not None and max_tokens > room:
            raise GatewayError(
                f"max_tokens {max_tokens} plus the prompt's {len(prompt_ids)} "
                f"tokens exceed max_model_len {loop.engine.max_model_len}"
            )
        try:
            params = body.model_copy(update={"max_tokens": max_tokens}).sampling_params(
                room if room > 0 else None
            )
            queues = []
            for i in range(body.n):
                choice = _choice_params(params, i)
                queues.append(loop.submit(loop.new_request_id(), prompt_ids, choice))
            return queues
        except ValueError as e:
            raise GatewayError(str(e)) from e

    async def run(
        kind: str,
        prompts: list[list[int]],
        body: SamplingFields,
        max_tokens: int | None,
        texts: list[str],
        echo: bool,
    ) -> Any:
        created, rid = int(time.time()), f"{kind[:4]}-{uuid.uuid4().hex}"
        queues = [q for ids in prompts for q in submit(ids, body, max_tokens)]
        obj = "chat.completion" if kind == "chat" else "text_completion"
        if body.stream:
            return StreamingResponse(
                stream(rid, created, obj, kind, queues, prompts, body, texts, echo),
                media_type="text/event-stream",
            )
        choices, completion_tokens = [], 0
        for index, events in enumerate(queues):
            text, ids, finish = "", [], None
            async for d in _deltas(events, metrics):
                if d.error:
                    raise GatewayError(d.error, 503)
                text += d.text
                ids += d.token_ids
                finish = d.finish_reason
            completion_tokens += len(ids)
            prefix = texts[index // body.n] if echo else ""
            if kind == "chat":
                choices.append(
                    {
                        "index": index,
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": finish,
                        "logprobs": None,
                    }
                )
            else:
                choices.append(
                    {
                        "index": index,
                        "text": prefix + text,
                        "finish_reason": finish,
                        "logprobs": None,
                    }
                )
        prompt_tokens = sum(len(p) for p in prompts)
        return {
            "id": rid,
            "object": obj,
            "created": created,
            "model": served_model_name,
            "choices": choices,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    async def stream(
        rid: str,
        created: int,
        obj: str,
        kind: str,
        queues: list[Any],
        prompts: list[list[int]],
        body: SamplingFields,
        texts: list[str],
        echo: bool,
    ) -> AsyncIterator[str]:
        chunk_obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
        merged: asyncio.Queue[tuple[int, Delta]] = asyncio.Queue()

        async def pump(index: int, events: Any) -> None:
            async for d in _deltas(events, metrics):
                await merged.put((index, d))

        tasks = [asyncio.create_task(pump(i, q)) for i, q in enumerate(queues)]
        open_choices, completion_tokens = len(queues), 0

        def chunk(index: int, text: str, finish: str | None, first: bool) -> str:
            if kind == "chat":
                delta: dict[str, Any] = {"content": text}
                if first:
                    delta["role"] = "assistant"
                choice = {"index": index, "delta": delta, "finish_reason": finish}
            else:
                choice = {"index": index, "text": text, "finish_reason": finish, "logprobs": None}
            return (
                "data: "
                + json.dumps(
                    {
                        "id": rid,
                        "object": chunk_obj,
                        "created": created,
                        "model": served_model_name,
                        "choices": [choice],
                    }
                )
                + "\n\n"
            )

        started: set[int] = set()
        try:
            while open_choices:
                index, d = await merged.get()
                if d.error:
                    yield "data: " + json.dumps(error_body(d.error, code=503)) + "\n\n"
                    break
                completion_tokens += len(d.token_ids)
                first = index not in started
                started.add(index)
                text = (texts[index // body.n] if echo and first else "") + d.text
                yield chunk(index, text, d.finish_reason, first)
                if d.finish_reason is not None:
                    open_choices -= 1
            if body.include_usage:
                prompt_tokens = sum(len(p) for p in prompts)
                yield (
                    "data: "
                    + json.dumps(
                        {
                            "id": rid,
                            "object": chunk_obj,
                            "created": created,
                            "model": served_model_name,
                            "choices": [],
                            "usage": {
                                "prompt_tokens": prompt_tokens,
                                "completion_tokens": completion_tokens,
                                "total_tokens": prompt_tokens + completion_tokens,
                            },
                        }
                    )
                    + "\n\n"
                )
            yield "data: [DONE]\n\n"
        finally:
            for task in tasks:
                task.cancel()

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest) -> Any:
        check_model(body)
        if body.logprobs is not None:
            raise GatewayError("logprobs are not supported yet")
        prompts, texts = _prompts(body.prompt, tokenizer)
        # The completions API's own default is 16 tokens (chat: up to the context length).
        max_tokens = body.max_tokens if body.max_tokens is not None else 16
        return await run("completion", prompts, body, max_tokens, texts, body.echo)

    @app.post("/v1/chat/completions")
    async def chat(body: ChatCompletionRequest) -> Any:
        check_model(body)
        if body.logprobs:
            raise GatewayError("logprobs are not supported yet")
        messages = [m.model_dump() for m in body.messages]
        try:
            text = tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False
            )
        except Exception as e:  # a template that rejects these messages
            raise GatewayError(f"the chat template cannot render these messages: {e}") from e
        ids = list(tokenizer.encode(str(text), add_special_tokens=False))
        max_tokens = body.max_completion_tokens or body.max_tokens
        return await run("chat", [ids], body, max_tokens, [""], False)

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
