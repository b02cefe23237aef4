"""Where the HTTP gateway's requests go: an engine loop in this process, or a
Router service over gRPC (``specserve serve --router host:port``).

Both take one tokenized prompt and its SamplingParams (one completion) and
hand back its deltas as an async stream, on the gateway's event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Protocol

import grpc
import grpc.aio
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from model_runtime.resolve import resolve_model
from protos import router_pb2 as rpb
from protos.router_pb2_grpc import RouterStub
from router.loop import Delta, EngineLoop
from router.metrics import EngineStats
from router.params import SamplingParams
from router.sequence import check_prompt
from router.wire import delta_from_response, generate_request, stats_from_info


class Completion(Protocol):
    """One completion in flight: its deltas, the last with a finish_reason."""

    def __aiter__(self) -> AsyncIterator[Delta]: ...

    def abort(self) -> None:
        """Stop generating (the client went away); a no-op once finished."""


class Backend(Protocol):
    model: str
    max_model_len: int
    vocab_size: int
    tokenizer: PreTrainedTokenizerBase

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


def _failed(error: str) -> Delta:
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

        def on_delta(delta: Delta) -> None:  # on the engine loop's thread
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

    def stats(self) -> EngineStats:
        return self.loop.engine.stats()

    def close(self) -> None:
        self.loop.stop()


class _RouterCompletion:
    def __init__(self, call: grpc.aio.UnaryStreamCall, wants_prompt_logprobs: bool):
        self._call = call
        self._wants_prompt_logprobs = wants_prompt_logprobs
        self._finished = False

    async def __aiter__(self) -> AsyncIterator[Delta]:
        try:
            async for response in self._call:
                delta = delta_from_response(response, self._wants_prompt_logprobs)
                self._finished = delta.finish_reason is not None
                yield delta
                if self._finished:
                    return
        except grpc.aio.AioRpcError as e:
            self._finished = True
            if e.code() == grpc.StatusCode.INVALID_ARGUMENT:
                raise ValueError(e.details()) from e
            if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise Overloaded(e.details()) from e
            raise Unavailable(
                f"the router failed the request: {e.code().name}: {e.details()}"
            ) from e
        if not self._finished:
            self._finished = True
            yield _failed("the router ended the stream before the request finished")

    def abort(self) -> None:
        if not self._finished:
            self._finished = True
            self._call.cancel()  # the router aborts a cancelled call and frees its KV


class RouterBackend:
    """A Router service over gRPC; the tokenizer is loaded here from the model the
    router reports (or from ``tokenizer``, a folder or hub id, when given)."""

    def __init__(self, address: str, tokenizer: str | None = None, timeout_s: float = 10.0):
        self.address = address
        self.timeout_s = timeout_s
        self._channel = grpc.insecure_channel(address)
        self._stub = RouterStub(self._channel)
        info = self._describe()
        self.model = info.model
        self.max_model_len = info.max_model_len
        self.vocab_size = info.vocab_size
        self.tokenizer: PreTrainedTokenizerBase = AutoTokenizer.from_pretrained(
            resolve_model(tokenizer or info.model)
        )
        self._async_stub: RouterStub | None = None  # made on the gateway's event loop

    def _describe(self) -> rpb.RouterInfo:
        try:
            return self._stub.Describe(rpb.DescribeRouterRequest(), timeout=self.timeout_s)
        except grpc.RpcError as e:
            raise ConnectionError(
                f"no router answers at {self.address} ({e.code().name}: {e.details()}); "
                "start one with `specserve router` or check --router"
            ) from e

    def submit(self, prompt_ids: Sequence[int], params: SamplingParams) -> Completion:
        check_prompt("", prompt_ids, self.max_model_len, self.vocab_size)
        if self._async_stub is None:
            self._async_stub = RouterStub(grpc.aio.insecure_channel(self.address))
        call = self._async_stub.Generate(generate_request("", prompt_ids, params))
        return _RouterCompletion(call, params.prompt_logprobs is not None)

    def stats(self) -> EngineStats:
        return stats_from_info(self._describe())

    def close(self) -> None:
        self._channel.close()
