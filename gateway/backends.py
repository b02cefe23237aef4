"""Where the HTTP gateway's requests go: an engine loop in this process
(here), or a Router service over gRPC (``gateway.router_backend``).

Both take one tokenized prompt and its SamplingParams (one completion) and
hand back its deltas as an async stream, on the gateway's event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Protocol

from transformers import PreTrainedTokenizerBase

from router.deltas import Delta
from router.loop import EngineLoop
from router.metrics import EngineStats
from router.params import SamplingParams


class Completion(Protocol):
    """One completion in flight: its deltas, the last with a finish_reason."""

    def __aiter__(self) -> AsyncIterator[Delta]: ...

    def abort(self) -> None:
        """Stop generating (the client went away); a no-op once finished."""


class Backend(Protocol):
    """What the gateway needs of a backend; the model's attributes raise
    Unavailable while ``unready`` says why it cannot serve yet."""

    @property
    def model(self) -> str: ...
    @property
    def max_model_len(self) -> int: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def tokenizer(self) -> PreTrainedTokenizerBase: ...

    def unready(self) -> str | None:
        """Why it cannot serve now (None: it can)."""

    def submit(self, prompt_ids: Sequence[int], params: SamplingParams) -> Completion:
        """Start one completion (params.n is 1); ValueError for a prompt it
        cannot serve, Overloaded when full. Iterating the completion raises
        the same (and Unavailable) when the refusal comes later."""

    def stats(self) -> EngineStats: ...

    def close(self) -> None: ...


class Overloaded(Exception):
    """The backend holds as many requests as it takes: come back shortly."""


class Unavailable(Exception):
    """The backend cannot serve now (no router answers, or it has no target)."""


def failed(error: str) -> Delta:
    """The last delta of a completion that failed."""
    return Delta([], "", "abort", 0, 0, 0, error=error)


class _QueuedCompletion:
    def __init__(self, deltas: asyncio.Queue[Delta], abort: Callable[[], object]):
        self._deltas = deltas
        self._abort = abort
        self._finished = False

    async def __aiter__(self) -> AsyncIterator[Delta]:
        while not self._finished:
            delta = await self._deltas.get()
            self._finished = delta.finish_reason is not None
            yield delta

    def abort(self) -> None:
        if not self._finished:
            self._finished = True
            self._abort()


class LocalBackend:
    """The engine loop of this process."""

    def __init__(self, loop: EngineLoop, max_pending_requests: int = 1024):
        self.loop = loop
        self.max_pending_requests = max_pending_requests
        self.model = loop.engine.config.model
        self.max_model_len = loop.engine.max_model_len
        self.vocab_size = loop.engine.workers.vocab_size
        self.tokenizer = loop.engine.tokenizer

    def submit(self, prompt_ids: Sequence[int], params: SamplingParams) -> Completion:
        events = asyncio.get_running_loop()
        deltas: asyncio.Queue[Delta] = asyncio.Queue()

        def on_delta(delta: Delta) -> None:  # on the engine loop's publisher thread
            try:
                events.call_soon_threadsafe(deltas.put_nowait, delta)
            except RuntimeError:  # the gateway's event loop has closed
                pass

        if self.loop.num_requests >= self.max_pending_requests:
            raise Overloaded(
                f"{self.loop.num_requests} requests are in flight, the most this server takes"
            )
        request_id = self.loop.new_request_id()
        self.loop.submit(request_id, prompt_ids, params, on_delta)
        return _QueuedCompletion(deltas, lambda: self.loop.abort(request_id))

    def unready(self) -> str | None:
        return None if self.loop.health.serving else "no target worker is reachable"

    def stats(self) -> EngineStats:
        return self.loop.engine.stats()

    def close(self) -> None:
        self.loop.stop()
