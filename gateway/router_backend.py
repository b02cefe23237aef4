"""The gateway's backend over a Router service (``specserve serve --router``).

It starts whether or not the router answers yet. A monitor thread looks for
the router (backing off up to ``RECONNECT_MAX_S`` between tries), loads the
tokenizer of the model the router reports (or ``tokenizer``, when given), and
then asks every ``check_interval_s`` whether the router can serve and what its
counters are. Until the router answers, and while it cannot serve, requests
are refused with Unavailable (the gateway's 503) and /health says why.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import grpc
import grpc.aio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from gateway.backends import Completion, Overloaded, Unavailable, failed
from model_runtime.resolve import resolve_model
from protos import router_pb2 as rpb
from protos.router_pb2_grpc import RouterStub
from protos.tls import PLAIN, TlsConfig
from router.deltas import Delta
from router.grpc_clients import CHANNEL_OPTIONS
from router.metrics import EngineStats, SpeculationMetrics
from router.params import SamplingParams
from router.sequence import check_prompt
from router.wire import delta_from_response, generate_request, stats_from_info

logger = logging.getLogger(__name__)

RECONNECT_MAX_S = 2.0


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
            message = f"the router failed the request: {e.code().name}: {e.details()}"
            raise Unavailable(message) from e
        if not self._finished:
            self._finished = True
            yield failed("the router ended the stream before the request finished")

    def abort(self) -> None:
        if not self._finished:
            self._finished = True
            self._call.cancel()  # the router aborts a cancelled call and frees its KV


@dataclass(frozen=True)
class _Router:
    """What the monitor last learned of the router."""

    info: rpb.RouterInfo
    tokenizer: PreTrainedTokenizerBase


class RouterBackend:
    def __init__(
        self,
        address: str,
        tokenizer: str | None = None,
        tls: TlsConfig = PLAIN,
        token: str | None = None,
        timeout_s: float = 10.0,
        check_interval_s: float = 1.0,
    ):
        self.address = address
        self.tls = tls
        self.metadata = () if token is None else (("authorization", f"Bearer {token}"),)
        self.timeout_s = timeout_s
        self.check_interval_s = check_interval_s
        self._tokenizer_name = tokenizer
        self._channel = tls.channel(address, CHANNEL_OPTIONS)
        self._stub = RouterStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)
        self._router: _Router | None = None
        self._why_not: str | None = f"no router has answered at {address} yet"
        self._async_stub: RouterStub | None = None  # made on the gateway's event loop
        self._closed = threading.Event()
        self._answered = threading.Event()  # set once the router has answered
        self._monitor = threading.Thread(target=self._watch, name="router-monitor", daemon=True)
        self._monitor.start()

    # ---------------------------------------------------------- what it serves

    def _known(self) -> _Router:
        if self._router is None:
            raise Unavailable(self._why_not or f"no router answers at {self.address}")
        return self._router

    @property
    def model(self) -> str:
        return str(self._known().info.model)

    @property
    def max_model_len(self) -> int:
        return int(self._known().info.max_model_len)

    @property
    def vocab_size(self) -> int:
        return int(self._known().info.vocab_size)

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        return self._known().tokenizer

    def unready(self) -> str | None:
        return self._why_not

    def wait_for_router(self, timeout_s: float) -> bool:
        """Whether the router answered within ``timeout_s``."""
        return self._answered.wait(timeout_s)

    def stats(self) -> EngineStats:
        """The router's counters now; as last read when it does not answer
        (zeros before it ever did)."""
        if self._router is None:
            return EngineStats(False, 0, 0, 0.0, SpeculationMetrics(0))
        try:
            info = self._describe()
        except grpc.RpcError:
            return stats_from_info(self._router.info)
        self._router = _Router(info, self._router.tokenizer)
        return stats_from_info(info)

    def submit(self, prompt_ids: Sequence[int], params: SamplingParams) -> Completion:
        if self._why_not is not None:
            raise Unavailable(self._why_not)
        check_prompt("", prompt_ids, self.max_model_len, self.vocab_size)
        if self._async_stub is None:
            self._async_stub = RouterStub(self.tls.channel(self.address, CHANNEL_OPTIONS, aio=True))
        request = generate_request("", prompt_ids, params)
        call = self._async_stub.Generate(request, metadata=self.metadata)
        return _RouterCompletion(call, params.prompt_logprobs is not None)

    def close(self) -> None:
        self._closed.set()
        self._channel.close()

    # ------------------------------------------------------------- the monitor

    def _watch(self) -> None:
        delay = 0.1
        while not self._closed.is_set():
            try:
                self._check()
                delay = self.check_interval_s
            except grpc.RpcError as e:
                self._why_not = f"no router answers at {self.address} ({e.code().name})"
                delay = min(delay * 2, RECONNECT_MAX_S)
            except (OSError, ValueError) as e:  # the router's model has no tokenizer here
                self._why_not = f"cannot load the tokenizer of the router's model: {e}"
                delay = RECONNECT_MAX_S
            except Exception as e:  # the monitor must outlive any surprise
                logger.exception("checking the router at %s failed", self.address)
                self._why_not = f"checking the router at {self.address} failed: {e}"
                delay = RECONNECT_MAX_S
            self._closed.wait(delay)

    def _describe(self) -> rpb.RouterInfo:
        request = rpb.DescribeRouterRequest()
        return self._stub.Describe(request, timeout=self.timeout_s, metadata=self.metadata)

    def _check(self) -> None:
        info = self._describe()
        tokenizer: PreTrainedTokenizerBase
        if self._router is None:
            name = self._tokenizer_name or info.model
            tokenizer = AutoTokenizer.from_pretrained(resolve_model(name))
            logger.info("router at %s serves %s", self.address, info.model)
        else:
            tokenizer = self._router.tokenizer
        self._router = _Router(info, tokenizer)
        self._answered.set()
        check = self._health.Check(health_pb2.HealthCheckRequest(), timeout=self.timeout_s)
        serving = check.status == health_pb2.HealthCheckResponse.SERVING
        self._why_not = None if serving else f"the router at {self.address} cannot serve now"
