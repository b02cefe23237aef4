"""Answering a request whose choices have started: as one JSON response, or
as server-sent events, one chunk per delta of any choice, as they come.

Either way every choice still running is aborted at the end, so a client that
goes away (or an error) frees its KV at once.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from gateway.backends import Overloaded, Unavailable
from gateway.choices import Choice, abort_all, merge, refusal
from gateway.metrics import GatewayMetrics
from gateway.protocol import GatewayError, error_body
from gateway.render import Renderer
from router.deltas import Delta

# How often a stream looks whether the server is cutting streams.
DRAIN_POLL_S = 0.5


class Drain:
    """When a stopping server cuts the streams still open: shortly before its
    grace ends, so that each can end with an error event and [DONE] rather than
    mid-body."""

    def __init__(self) -> None:
        self.cut_at: float | None = None

    def start(self, grace_s: float) -> None:
        if self.cut_at is None:  # a second signal does not move the cut
            self.cut_at = time.monotonic() + max(grace_s - 1.0, grace_s / 2)

    def cut(self) -> bool:
        return self.cut_at is not None and time.monotonic() >= self.cut_at


class Responder:
    """One request's response: its choices, rendered by ``renderer``."""

    def __init__(
        self,
        choices: list[Choice],
        prompts: list[list[int]],
        renderer: Renderer,
        model: str,
        metrics: GatewayMetrics,
        drain: Drain | None = None,
    ):
        self.choices = choices
        self.drain = drain or Drain()
        self.prompts = prompts
        self.renderer = renderer
        self.metrics = metrics
        self.head = {
            "id": f"{renderer.id_prefix}-{uuid.uuid4().hex}",
            "created": int(time.time()),
            "model": model,
        }

    async def prime(self) -> None:
        """Wait for every choice's first delta, so that a refusal (a full
        backend, one that cannot serve, a prompt a remote router will not take)
        is the response's status, not an event in a stream already begun."""
        try:
            for choice in self.choices:
                choice.first = await anext(choice.deltas, None)
                if choice.first is not None:
                    self._observe(choice, choice.first)
                    if choice.first.error:
                        raise GatewayError(choice.first.error, 503)
        except (ValueError, Overloaded, Unavailable) as e:
            abort_all(self.choices)
            raise refusal(e) from e
        except GatewayError:
            abort_all(self.choices)
            raise

    async def whole(self) -> dict[str, Any]:
        """Every choice, finished, in one response (after ``prime``)."""
        rendered, completion_tokens = [], 0
        try:
            for choice in self.choices:
                done = merge([d async for d in self._deltas(choice)])
                if done.error:
                    raise GatewayError(done.error, 503)
                completion_tokens += len(done.token_ids)
                fields = self.renderer.fields(choice, done, streaming=False)
                rendered.append({"index": choice.index, **_ending(done), **fields})
        except (ValueError, Overloaded, Unavailable) as e:
            raise refusal(e) from e
        finally:
            abort_all(self.choices)
        return {
            **self.head,
            "object": self.renderer.object_name,
            "choices": rendered,
            "usage": self._usage(completion_tokens),
        }

    async def events(self, include_usage: bool) -> AsyncIterator[str]:
        """Server-sent events (after ``prime``): a chunk per delta, usage if
        asked, then [DONE]."""
        merged: asyncio.Queue[tuple[Choice, Delta | Exception]] = asyncio.Queue()
        tasks = [asyncio.create_task(self._pump(c, merged)) for c in self.choices]
        open_choices, completion_tokens = len(self.choices), 0
        try:
            for choice in self.choices:  # chat's opening chunks: the role alone
                opening = self.renderer.opening(choice)
                if opening is not None:
                    chunk = {"index": choice.index, **opening, "finish_reason": None}
                    yield _event(self._chunk_head() | {"choices": [chunk]})
            while open_choices:
                item = await self._next(merged)
                if item is None:  # the server stops before this stream ends
                    yield _event(error_body("the server is shutting down; try again", 503))
                    break
                choice, d = item
                if isinstance(d, Exception) or d.error:
                    yield _event(error_body(str(d) if isinstance(d, Exception) else d.error or ""))
                    break
                completion_tokens += len(d.token_ids)
                yield _event(self._chunk(choice, d))
                if d.finish_reason is not None:
                    open_choices -= 1
            if include_usage:
                yield _event(
                    self._chunk_head() | {"choices": [], "usage": self._usage(completion_tokens)}
                )
            yield "data: [DONE]\n\n"
        finally:  # finished, or the client went away: stop whatever still runs
            abort_all(self.choices)
            for task in tasks:
                task.cancel()

    async def _next(
        self, merged: asyncio.Queue[tuple[Choice, Delta | Exception]]
    ) -> tuple[Choice, Delta | Exception] | None:
        """The next delta of any choice, or None once the drain says to cut."""
        while not self.drain.cut():
            try:
                return await asyncio.wait_for(merged.get(), DRAIN_POLL_S)
            except asyncio.TimeoutError:
                continue
        return None

    def _chunk(self, choice: Choice, delta: Delta) -> dict[str, Any]:
        fields = self.renderer.fields(choice, delta, streaming=True)
        chunk = {"index": choice.index, **_ending(delta), **fields}
        return self._chunk_head() | {"choices": [chunk]}

    def _chunk_head(self) -> dict[str, Any]:
        return {**self.head, "object": self.renderer.chunk_object_name}

    async def _pump(
        self, choice: Choice, merged: asyncio.Queue[tuple[Choice, Delta | Exception]]
    ) -> None:
        try:
            async for d in self._deltas(choice):
                await merged.put((choice, d))
        except (ValueError, Overloaded, Unavailable) as e:
            await merged.put((choice, e))

    async def _deltas(self, choice: Choice) -> AsyncIterator[Delta]:
        """A choice's deltas, the first (awaited by ``prime``) included, timed."""
        if choice.first is not None:
            yield choice.first
        async for delta in choice.deltas:
            self._observe(choice, delta)
            yield delta

    def _observe(self, choice: Choice, delta: Delta) -> None:
        """Time the first token and the gaps between tokens."""
        if not delta.token_ids:
            return
        now = time.monotonic()
        if choice.last_token_at is None:
            self.metrics.observe("ttft", now - choice.submitted_at)
        else:
            self.metrics.observe("itl", (now - choice.last_token_at) / len(delta.token_ids))
        choice.last_token_at = now

    def _usage(self, completion_tokens: int) -> dict[str, int]:
        prompt_tokens = sum(len(p) for p in self.prompts)
        return {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }


def _ending(delta: Delta) -> dict[str, Any]:
    """Why a choice ended, as vLLM says it: finish_reason, and stop_reason (the
    stop token id or stop string that ended it; None for EOS and length)."""
    return {"finish_reason": delta.finish_reason, "stop_reason": delta.stop_reason}


def _event(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload)}\n\n"
