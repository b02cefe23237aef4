"""The OpenAI-compatible HTTP gateway: /v1/models, /v1/completions and
/v1/chat/completions (streamed as server-sent events or not), /health,
/version and /metrics, in front of a backend (the engine in this process, or
a Router service over gRPC).

A handler tokenizes the prompt (``gateway.prompts``), starts the request's
choices on the backend (``gateway.choices``) and answers through a
``Responder`` with the renderer of its API (``gateway.render``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from importlib.metadata import version as package_version
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException

from gateway.backends import Backend
from gateway.choices import start_choices
from gateway.metrics import GatewayMetrics
from gateway.prompts import chat_prompt, completion_prompts
from gateway.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    GatewayError,
    SamplingFields,
    error_body,
)
from gateway.render import ChatRenderer, CompletionRenderer, Decode, Renderer
from gateway.responses import Responder

# The completions API's own default; chat's is the room left in the context.
COMPLETION_MAX_TOKENS = 16


class Gateway:
    """What the routes share: the backend, the model name it serves, metrics."""

    def __init__(self, backend: Backend, served_model_name: str):
        self.backend = backend
        self.model = served_model_name
        self.metrics = GatewayMetrics(backend.stats)

    def decode(self, token_id: int) -> str:
        return str(self.backend.tokenizer.decode([token_id]))

    def check_model(self, body: SamplingFields) -> None:
        if body.model is not None and body.model != self.model:
            raise GatewayError(
                f"model {body.model!r} does not exist; this server serves {self.model!r}", 404
            )

    def models(self) -> dict[str, Any]:
        card = {
            "id": self.model,
            "object": "model",
            "created": 0,
            "owned_by": "specserve",
            "max_model_len": self.backend.max_model_len,
        }
        return {"object": "list", "data": [card]}

    async def completions(self, body: CompletionRequest) -> Any:
        self.check_model(body)
        prompts, texts = completion_prompts(body.prompt, self.backend.tokenizer)
        max_tokens = body.max_tokens if body.max_tokens is not None else COMPLETION_MAX_TOKENS
        return await self.respond(CompletionRenderer, prompts, texts, body, max_tokens, body.echo)

    async def chat(self, body: ChatCompletionRequest) -> Any:
        self.check_model(body)
        ids = chat_prompt(body.messages, self.backend.tokenizer)
        max_tokens = body.max_completion_tokens or body.max_tokens
        return await self.respond(ChatRenderer, [ids], [""], body, max_tokens)

    async def respond(
        self,
        renderer: Callable[[Decode, bool], Renderer],
        prompts: list[list[int]],
        texts: list[str],
        body: SamplingFields,
        max_tokens: int | None,
        echo: bool = False,
    ) -> Any:
        choices = start_choices(self.backend, prompts, texts, body, max_tokens, echo)
        wants_logprobs = body.logprob_counts()[0] is not None  # checked by start_choices
        rendering = renderer(self.decode, wants_logprobs)
        responder = Responder(choices, prompts, rendering, self.model, self.metrics)
        if body.stream:
            events = responder.events(body.include_usage)
            return StreamingResponse(events, media_type="text/event-stream")
        return await responder.whole()


def build_app(backend: Backend, served_model_name: str, api_key: str | None = None) -> FastAPI:
    app = FastAPI(title="specserve")
    gateway = Gateway(backend, served_model_name)
    _add_error_handlers(app)
    _add_auth_and_counting(app, gateway.metrics, api_key)

    @app.get("/metrics")
    async def prometheus_metrics() -> Response:
        text = await asyncio.to_thread(gateway.metrics.text)
        return Response(text, media_type=CONTENT_TYPE_LATEST)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/version")
    async def version() -> dict[str, str]:
        return {"version": package_version("specserve")}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return gateway.models()

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest) -> Any:
        return await gateway.completions(body)

    @app.post("/v1/chat/completions")
    async def chat(body: ChatCompletionRequest) -> Any:
        return await gateway.chat(body)

    return app


def _add_error_handlers(app: FastAPI) -> None:
    """Every refusal as OpenAI's error JSON."""

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


def _add_auth_and_counting(app: FastAPI, metrics: GatewayMetrics, api_key: str | None) -> None:
    """With ``api_key``, every /v1 route needs ``Authorization: Bearer KEY``;
    every /v1 answer is counted and timed."""

    @app.middleware("http")
    async def _auth_and_count(request: Request, call_next: Any) -> Any:
        start = time.monotonic()
        path = request.url.path
        authorized = request.headers.get("authorization") == f"Bearer {api_key}"
        if api_key and path.startswith("/v1") and not authorized:
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
