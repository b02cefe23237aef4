"""The OpenAI-compatible HTTP gateway: /v1/models, /v1/completions and
/v1/chat/completions (streamed as server-sent events or not), /health,
/version and /metrics, and vLLM's /tokenize, /detokenize and /ping
(``gateway.tokenizer_routes``), in front of a backend (the engine in this process, or
a Router service over gRPC).

A handler tokenizes the prompt (``gateway.prompts``), starts the request's
choices on the backend (``gateway.choices``) and answers through a
``Responder`` with the renderer of its API (``gateway.render``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from functools import partial
from importlib.metadata import version as package_version
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException
from starlette.middleware.body_limit import RequestBodyLimitMiddleware

from gateway.backends import Backend
from gateway.choices import start_choices
from gateway.guard import add_guard_and_counting
from gateway.metrics import GatewayMetrics
from gateway.prompts import Prompts
from gateway.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    GatewayError,
    NamesModel,
    SamplingFields,
    error_body,
    validation_message,
)
from gateway.render import ChatRenderer, CompletionRenderer, Decode, Renderer
from gateway.responses import Drain, Responder
from gateway.tokenizer_routes import add_tokenizer_routes

logger = logging.getLogger(__name__)

# The completions API's own default; chat's is the room left in the context.
COMPLETION_MAX_TOKENS = 16


class Gateway:
    """What the routes share: the backend, the model name it serves, metrics.

    A backend that cannot serve yet (a router that does not answer) makes
    every /v1 route a 503 that says why, until it can.
    """

    def __init__(
        self,
        backend: Backend,
        served_model_name: str | None = None,
        chat_template: str | None = None,
        log_requests: bool = False,
        tool_call_parser: str | None = None,
    ):
        """``tool_call_parser``: how "auto" tool choice reads the model's
        calls (None: it is refused)."""
        self.backend = backend
        self.tool_call_parser = tool_call_parser
        self.served_model_name = served_model_name
        self.chat_template = chat_template
        self.log_requests = log_requests
        self.metrics = GatewayMetrics(backend.stats, self._model_if_ready)
        self.drain = Drain()  # started when the server is told to stop
        self._prompts: Prompts | None = None

    @property
    def model(self) -> str:
        """The model id the API reports: the one given, else the backend's."""
        return self.served_model_name or self.backend.model

    def _model_if_ready(self) -> str | None:
        return None if self.backend.unready() is not None else self.model

    @property
    def prompts(self) -> Prompts:
        if self._prompts is None:
            b = self.backend
            self._prompts = Prompts(b.tokenizer, b.vocab_size, b.max_model_len, self.chat_template)
        return self._prompts

    def require_ready(self) -> None:
        why_not = self.backend.unready()
        if why_not is not None:
            raise GatewayError(why_not, 503)

    def decode(self, token_id: int) -> str:
        return str(self.backend.tokenizer.decode([token_id]))

    def check_model(self, body: NamesModel) -> None:
        """Refuse a body that names another model than the one served."""
        self.require_ready()
        if body.model is not None:
            self._known(body.model)

    def _known(self, model_id: str) -> None:
        if model_id != self.model:
            raise GatewayError(
                f"model {model_id!r} does not exist; this server serves {self.model!r}", 404
            )

    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [self.model_card(self.model)]}

    def model_card(self, model_id: str) -> dict[str, Any]:
        """The served model's card, in vLLM's shape; 404 for another id."""
        self.require_ready()
        self._known(model_id)
        return {
            "id": self.model,
            "object": "model",
            "created": 0,
            "owned_by": "specserve",
            "root": self.backend.model,  # the checkpoint the served name stands for
            "parent": None,
            "max_model_len": self.backend.max_model_len,
            "permission": [],
        }

    async def completions(self, body: CompletionRequest) -> Any:
        self.check_model(body)
        prompts, texts = await asyncio.to_thread(self.prompts.completion, body.prompt)
        max_tokens = body.max_tokens if body.max_tokens is not None else COMPLETION_MAX_TOKENS
        if max_tokens == 0 and not body.echo:
            raise GatewayError("max_tokens 0 asks for nothing; it needs echo set to true")
        return await self.respond(CompletionRenderer, prompts, texts, body, max_tokens, body.echo)

    async def chat(self, body: ChatCompletionRequest) -> Any:
        self.check_model(body)
        try:
            use = body.tool_use()
            if use is not None:
                use.check_auto(self.tool_call_parser)
        except ValueError as e:
            raise GatewayError(str(e)) from e
        tools = use.template_tools() if use is not None else None
        ids = await asyncio.to_thread(self.prompts.chat, body.messages, True, tools)
        max_tokens = body.max_completion_tokens or body.max_tokens
        renderer = partial(ChatRenderer, tools=use)
        return await self.respond(renderer, [ids], [""], body, max_tokens)

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
        prompts = [c.prompt_ids for c in choices[:: body.n]]  # as kept (truncate_prompt_tokens)
        responder = Responder(choices, prompts, rendering, self.model, self.metrics, self.drain)
        if self.log_requests:
            logger.info(
                "request %s: %d prompt tokens, %d choices, max_tokens %s, temperature %s%s",
                responder.head["id"], sum(map(len, prompts)), len(choices), max_tokens,
                body.temperature, ", streamed" if body.stream else "",
            )  # fmt: skip
        await responder.prime()
        if body.stream:
            events = responder.events(body.include_usage)
            return StreamingResponse(events, media_type="text/event-stream")
        return await responder.whole()


def build_app(
    backend: Backend,
    served_model_name: str | None = None,
    api_key: str | None = None,
    max_request_body_bytes: int = 16 << 20,
    protect_metrics: bool = False,
    cors: dict[str, Any] | None = None,
    chat_template: str | None = None,
    log_requests: bool = False,
    tool_call_parser: str | None = None,
) -> FastAPI:
    """The app over ``backend``. With ``api_key`` every /v1 route (and with
    ``protect_metrics`` /metrics too) needs ``Authorization: Bearer KEY``;
    ``cors`` are CORSMiddleware's options (None: no CORS headers);
    ``chat_template`` replaces the model's; ``log_requests`` logs each one."""
    app = FastAPI(title="specserve")
    gateway = Gateway(backend, served_model_name, chat_template, log_requests, tool_call_parser)
    app.state.gateway = gateway
    if cors is not None:
        app.add_middleware(CORSMiddleware, **cors)
    # A larger body is refused (413) as it arrives, before it is read whole.
    app.add_middleware(RequestBodyLimitMiddleware, max_body_size=max_request_body_bytes)
    _add_error_handlers(app)
    protected = ("/v1", "/metrics") if protect_metrics else ("/v1",)
    add_guard_and_counting(app, gateway.metrics, api_key, protected, max_request_body_bytes)

    @app.get("/metrics")
    async def prometheus_metrics() -> Response:
        text = await asyncio.to_thread(gateway.metrics.text)
        return Response(text, media_type=CONTENT_TYPE_LATEST)

    @app.get("/health")
    async def health() -> JSONResponse:
        why_not = backend.unready()
        if why_not is None:
            return JSONResponse({"status": "ok"})
        return JSONResponse({"status": "unavailable", "reason": why_not}, status_code=503)

    @app.get("/version")
    async def version() -> dict[str, str]:
        return {"version": package_version("specserve")}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return gateway.models()

    @app.get("/v1/models/{model_id:path}")
    async def model_card(model_id: str) -> dict[str, Any]:
        return gateway.model_card(model_id)

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest) -> Any:
        return await gateway.completions(body)

    @app.post("/v1/chat/completions")
    async def chat(body: ChatCompletionRequest) -> Any:
        return await gateway.chat(body)

    add_tokenizer_routes(app, gateway)
    return app


def _add_error_handlers(app: FastAPI) -> None:
    """Every refusal as OpenAI's error JSON."""

    @app.exception_handler(GatewayError)
    async def _gateway_error(request: Request, exc: GatewayError) -> JSONResponse:
        headers = {} if exc.retry_after_s is None else {"Retry-After": str(exc.retry_after_s)}
        body = error_body(str(exc), exc.status)
        return JSONResponse(body, status_code=exc.status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        parts = [validation_message(e) for e in exc.errors()]
        return JSONResponse(error_body("; ".join(parts)), status_code=400)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
        return JSONResponse(
            error_body(str(exc.detail), exc.status_code), status_code=exc.status_code
        )
