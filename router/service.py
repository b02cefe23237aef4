"""The Router gRPC service: streams completions to gRPC clients, driving remote
draft and target workers through the engine loop."""

from __future__ import annotations

import logging
import os
import queue
from collections.abc import Iterator
from functools import partial

import grpc
from prometheus_client import CollectorRegistry, start_http_server

from model_runtime.specs import RunnerSpec
from protos import router_pb2 as rpb
from protos import router_pb2_grpc
from protos.server import (
    NOT_SERVING,
    SERVING,
    RunningServer,
    serve_until_signalled,
    start_server,
)
from protos.sessions import new_session
from protos.tls import PLAIN, TlsConfig
from router.clients import DraftClient
from router.config import EngineConfig, SpeculativeConfig
from router.deltas import Delta
from router.discovery import Discovery, split_addresses
from router.engine import LLMEngine
from router.grpc_clients import GrpcDraftClient
from router.loop import DuplicateRequestError, EngineLoop, Health
from router.metrics import EngineCollector
from router.service_config import RouterConfig, router_name
from router.wire import delta_to_response, params_from_request, router_info
from router.workers import SameTokenizer, build_remote_workers

SERVICE_NAME = "specserve.v1.Router"

logger = logging.getLogger(__name__)


# Health name whose status says whether the router is speculating (SERVING) or
# decoding without a draft worker (NOT_SERVING).
SPECULATION_HEALTH = "specserve.v1.Router/speculation"

# How long a newly discovered draft worker has to answer (one that refuses
# connections is skipped at once, and tried again at the next lookup).
DISCOVERY_CONNECT_S = 5.0


class RouterService(router_pb2_grpc.RouterServicer):
    """Request ids belong to their caller: an id the client chose is scoped to
    its connection (another connection can neither abort it nor collide with
    it; the same id twice in flight on one connection is ALREADY_EXISTS), and
    an id the router assigns is unguessable (knowing it is the right to abort)."""

    def __init__(self, loop: EngineLoop, max_pending_requests: int = 1024):
        self.loop = loop
        self.max_pending_requests = max_pending_requests

    @staticmethod
    def _scoped(context: grpc.ServicerContext, client_id: str) -> str:
        return f"{context.peer()}|{client_id}"

    def Generate(
        self, request: rpb.GenerateRequest, context: grpc.ServicerContext
    ) -> Iterator[rpb.GenerateResponse]:
        client_id = request.request_id
        key = self._scoped(context, client_id) if client_id else self.loop.new_request_id()
        request_id = client_id or key  # what the client sees
        if self.loop.num_requests >= self.max_pending_requests:
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{self.loop.num_requests} requests are in flight, the most this router takes",
            )
        events: queue.Queue[Delta] = queue.Queue()
        try:
            prompt_ids = (
                list(request.token_ids.ids)
                if request.HasField("token_ids")
                else self.loop.engine.tokenizer.encode(request.text)
            )
            self.loop.submit(key, prompt_ids, params_from_request(request), events.put)
        except DuplicateRequestError:
            context.abort(
                grpc.StatusCode.ALREADY_EXISTS,
                f"request {client_id!r} is already in flight on this connection",
            )
        except ValueError as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))

        def abort() -> None:  # a client that goes away aborts its request and frees its KV
            self.loop.abort(key)

        context.add_callback(abort)
        first = True
        while True:
            delta = events.get()
            if delta.error is not None:
                context.abort(grpc.StatusCode.UNAVAILABLE, delta.error)
            yield delta_to_response(request_id, delta, prompt_ids, first)
            first = False
            if delta.finish_reason is not None:
                return

    def Abort(self, request: rpb.AbortRequest, context: grpc.ServicerContext) -> rpb.AbortResponse:
        """Abort a request of this connection's, or one by the id the router gave it."""
        client_id = request.request_id
        aborted = self.loop.abort(self._scoped(context, client_id)) or (
            client_id.startswith("req-") and self.loop.abort(client_id)
        )
        return rpb.AbortResponse(aborted=aborted)

    def Describe(
        self, request: rpb.DescribeRouterRequest, context: grpc.ServicerContext
    ) -> rpb.RouterInfo:
        engine = self.loop.engine
        return router_info(
            model=engine.config.model,
            vocab_size=engine.workers.vocab_size,
            max_model_len=engine.max_model_len,
            draft_model=engine.drafts.first_model(
                engine.config.speculative.model if engine.config.speculative else ""
            ),
            k=engine.k,
            stats=engine.stats(),
        )


def start_metrics_server(engine: LLMEngine, host: str, port: int) -> None:
    registry = CollectorRegistry()
    registry.register(EngineCollector(engine.stats, lambda: engine.config.model))
    start_http_server(port, addr=host, registry=registry)


def serve(config: RouterConfig, tls: TlsConfig = PLAIN) -> None:
    """Run the router until SIGTERM; ``tls`` secures both its own service and
    its calls to the workers."""
    drafts, names = split_addresses(config.addresses(config.draft_workers))
    session = new_session(router_name(config.port))
    engine = _engine(config, drafts, names, session, tls)
    health: list[RunningServer] = []
    if config.metrics_port is not None:
        start_metrics_server(engine, config.host, config.metrics_port)

    def report(now: Health) -> None:
        """NOT_SERVING overall while no target worker is reachable; the
        speculation name says whether a draft worker is."""
        for running in health:
            running.set_serving(now.serving)
            running.health.set(SPECULATION_HEALTH, SERVING if now.speculating else NOT_SERVING)

    discovery = _discovery(engine, names, session, config.discovery_interval_s, tls)
    loop = EngineLoop(engine, report)
    if discovery is not None:
        discovery.on_change = loop.look_at_pools
        discovery.start()
    service = RouterService(loop, config.max_pending_requests)
    running = start_server(
        [(router_pb2_grpc.add_RouterServicer_to_server, service, SERVICE_NAME)],
        f"{config.host}:{config.port}",
        max_workers=128,
        tls=tls,
        token=config.router_token or os.environ.get("SPECSERVE_ROUTER_TOKEN"),
    )
    health.append(running)
    report(loop.health)
    logger.info(
        "routing %s: %d target worker(s), %d draft worker(s), up to %d drafts a round; "
        "gRPC at %s:%d",
        engine.config.model, len(engine.workers.targets), len(engine.workers.drafts),
        engine.k, config.host, running.port,
    )  # fmt: skip
    serve_until_signalled(running, config.grace_s, f"router ready on {config.host}:{{port}}")
    if discovery is not None:
        discovery.stop()
    loop.stop()


def _engine(
    config: RouterConfig, drafts: list[str], names: list[str], session: str, tls: TlsConfig
) -> LLMEngine:
    """The engine over the workers ``config`` lists (their clients carry ``session``)."""
    k = config.num_speculative_tokens if drafts or names else 0
    targets = config.addresses(config.target_workers)
    workers = build_remote_workers(targets, drafts, session, tls)
    spec = None
    if k:  # the model is a draft worker's; found later when only names are given
        model = workers.draft.describe().model if workers.draft else names[0]
        spec = SpeculativeConfig(model, k, adaptive_k=config.adaptive_k)
    return LLMEngine(
        EngineConfig(
            # The target workers hold the runners; the spec only names their model.
            runner=RunnerSpec(model=workers.target.describe().model),
            speculative=spec,
            overlap=config.overlap,
            log_stats_interval_s=None if config.disable_log_stats else config.log_stats_interval_s,
        ),
        workers,
    )


def _discovery(
    engine: LLMEngine, names: list[str], session: str, interval_s: float, tls: TlsConfig
) -> Discovery[DraftClient] | None:
    """Discovery of the draft workers behind ``names`` (None without names),
    after a first lookup, so the first requests already speculate."""
    if not names:
        return None
    connect = partial(
        GrpcDraftClient,
        connect_timeout_s=DISCOVERY_CONNECT_S,
        wait_for_ready=False,
        session=session,
        tls=tls,
    )
    same_tokenizer = SameTokenizer(engine.workers.tokenizer, engine.config.model)
    discovery = Discovery(engine.drafts, names, connect, same_tokenizer, interval_s)
    discovery.refresh()
    engine.drafts.up()
    return discovery
