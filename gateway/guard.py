"""What every request meets before a handler: the API key, the declared body
size, and the counting and timing of /v1 answers."""

from __future__ import annotations

import time
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from gateway.metrics import GatewayMetrics
from gateway.protocol import error_body
from protos.server import bearer_matches


def route_path(request: Request) -> str:
    """The path the app routes: the URL's, less the root path a proxy serves
    it under (``--root-path``), so that /llm/v1/... is guarded as /v1/... is."""
    path, root = request.url.path, request.scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


def add_guard_and_counting(
    app: FastAPI,
    metrics: GatewayMetrics,
    api_key: str | None,
    protected: tuple[str, ...],
    max_body_bytes: int,
) -> None:
    """Refuse what must not reach a handler (see ``_refusal``); count and time
    every /v1 answer, once its body is sent (a stream's last event, not its
    headers), labelled by its route (an unknown path: "unmatched", so that
    random URLs make no new series)."""

    @app.middleware("http")
    async def _guard_and_count(request: Request, call_next: Any) -> Any:
        start = time.monotonic()
        refused = _refusal(request, api_key, protected, max_body_bytes)
        response = refused or await call_next(request)
        if not route_path(request).startswith("/v1"):
            return response
        route = request.scope.get("route")
        endpoint = getattr(route, "path", "unmatched")

        def count() -> None:
            metrics.requests.labels(endpoint, str(response.status_code)).inc()
            metrics.observe("latency", time.monotonic() - start)

        body = getattr(response, "body_iterator", None)  # what call_next hands back has one
        if body is None:  # refused here: its body is whole already
            count()
        else:
            setattr(response, "body_iterator", _then(body, count))  # noqa: B010
        return response


async def _then(chunks: AsyncIterable[Any], done: Callable[[], None]) -> AsyncIterator[Any]:
    """The chunks of a response body, then ``done()`` (also when the client left)."""
    try:
        async for chunk in chunks:
            yield chunk
    finally:
        done()


def _refusal(
    request: Request, api_key: str | None, protected: tuple[str, ...], max_body_bytes: int
) -> JSONResponse | None:
    """With ``api_key``, the ``protected`` routes need ``Authorization: Bearer
    KEY``; a body declared larger than ``max_body_bytes`` is refused unread
    (one sent in chunks is cut off by RequestBodyLimitMiddleware as it arrives)."""
    if api_key and route_path(request).startswith(protected):
        if not bearer_matches(request.headers.get("authorization"), api_key):
            return JSONResponse(error_body("invalid or missing API key", 401), status_code=401)
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_body_bytes:
        message = (
            f"the request body has {declared} bytes; this server takes at most {max_body_bytes}"
        )
        return JSONResponse(error_body(message, 413), status_code=413)
    return None
