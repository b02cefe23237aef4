"""Building and stopping specserve's gRPC servers the same way everywhere.

Every server carries the standard ``grpc.health.v1`` service (overall status
under the empty name and one status per service) and server reflection, so
stock tools (grpc_health_probe, grpcurl, Kubernetes gRPC probes) work against
any specserve process.
"""

from __future__ import annotations

import hmac
import signal
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from model_runtime.heap import freeze_startup_heap
from protos.tls import PLAIN, TlsConfig

# (add_XServicer_to_server, servicer, full service name) for each service.
ServiceBinding = tuple[Callable[[Any, grpc.Server], None], object, str]

# How long a service drains on SIGTERM: Kubernetes' own default termination
# grace (the manifests give pods a little more).
DEFAULT_GRACE_S = 30.0

# A health name every server reports SERVING for as long as it runs and can
# recover: for liveness probes, which must not restart a router only because
# its targets are away (readiness checks the overall status, which says that).
# A worker whose tensor-parallel rank died reports it NOT_SERVING (``fail``).
ALIVE = "specserve.alive"

# Pings on idle connections, both ways: a peer gone without a goodbye breaks
# its streams within about 15 s (a worker then frees what a lost router held).
KEEPALIVE_OPTIONS = [
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
]

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@dataclass
class RunningServer:
    """A started server, the port it is bound to, and its health service."""

    server: grpc.Server
    port: int
    health: health.HealthServicer
    service_names: tuple[str, ...]

    def set_serving(self, serving: bool) -> None:
        status = SERVING if serving else NOT_SERVING
        for name in ("", *self.service_names):
            self.health.set(name, status)

    def fail(self) -> None:
        """Report the process broken for good: NOT_SERVING everywhere, liveness
        included, so that whatever runs it restarts it."""
        self.set_serving(False)
        self.health.set(ALIVE, NOT_SERVING)

    def stop(self, grace_s: float, idle: Callable[[], bool] | None = None) -> None:
        """Report NOT_SERVING, then stop, letting calls in flight finish for
        ``grace_s``; once ``idle()`` says none is doing work (a worker's batch
        streams wait between batches, forever), the rest are ended at once."""
        self.set_serving(False)
        done = self.server.stop(grace_s)
        while not done.wait(0.1):
            if idle is not None and idle():
                self.server.stop(0).wait()
                return


def start_server(
    services: Sequence[ServiceBinding],
    address: str = "127.0.0.1:0",
    max_workers: int = 16,
    serving: bool = True,
    tls: TlsConfig = PLAIN,
    token: str | None = None,
) -> RunningServer:
    """Start a server for ``services`` on ``address`` (port 0 picks a free port),
    over TLS when ``tls`` has a certificate; with ``token``, every call of the
    services (health and reflection stay open, for probes) must carry it.

    With ``serving=False`` health starts as NOT_SERVING, for a process that is
    still loading its model; call ``set_serving(True)`` once it is ready.
    """
    names = tuple(name for _, _, name in services)
    interceptors: list[grpc.ServerInterceptor] = [BearerToken(token, names)] if token else []
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers),
        interceptors=interceptors,
        options=KEEPALIVE_OPTIONS,
    )
    for add, servicer, _ in services:
        add(servicer, server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (
            *names,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ),
        server,
    )
    credentials = tls.server_credentials()
    if credentials is None:
        port = server.add_insecure_port(address)
    else:
        port = server.add_secure_port(address, credentials)
    if port == 0:
        raise OSError(f"cannot bind a gRPC server to {address}")
    server.start()
    running = RunningServer(server, port, health_servicer, names)
    running.set_serving(serving)
    health_servicer.set(ALIVE, SERVING)
    return running


def serve_until_signalled(
    running: RunningServer,
    grace_s: float,
    ready_line: str,
    idle: Callable[[], bool] | None = None,
) -> None:
    """Print ``ready_line`` (with the bound port), serve until SIGTERM or SIGINT,
    then shut down in order: health NOT_SERVING, drain for ``grace_s`` (or until
    ``idle()``), stop. What startup built is frozen first (model_runtime/heap.py):
    the process serves until it exits."""
    received = catch_termination()
    freeze_startup_heap(ready_line.partition(" ready")[0])
    print(ready_line.format(port=running.port), flush=True)
    wait_for(received)
    running.stop(grace_s, idle)


def catch_termination() -> list[int]:
    """From now on SIGTERM and SIGINT are appended to the returned list.

    The handlers touch no lock: a handler that set a threading.Event could
    deadlock against the main thread waiting on that same Event (the handler
    runs in the main thread, in the middle of the wait), and the process would
    then never stop.
    """
    received: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _: received.append(signum))
    return received


def wait_for(received: list[int], poll_s: float = 0.1) -> None:
    """Return once ``received`` (from ``catch_termination``) holds a signal."""
    while not received:
        time.sleep(poll_s)


def bearer_matches(header: str | None, secret: str) -> bool:
    """Whether an authorization value is ``Bearer SECRET`` (the scheme in any
    case; compared in constant time, so timing tells nothing of the secret)."""
    scheme, _, value = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        value.strip().encode(), secret.encode()
    )


class BearerToken(grpc.ServerInterceptor):
    """Calls of ``services`` without ``authorization: Bearer TOKEN`` metadata
    fail with UNAUTHENTICATED."""

    def __init__(self, token: str, services: Sequence[str]):
        self.token = token
        self.prefixes = tuple(f"/{name}/" for name in services)

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(details)
        if handler is None or not details.method.startswith(self.prefixes):
            return handler
        metadata = {k: v for k, v in details.invocation_metadata}
        given = metadata.get("authorization")
        if bearer_matches(given if isinstance(given, str) else None, self.token):
            return handler
        return _refusing(handler)


def _refusing(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """A handler of the same kind as ``handler`` that refuses the call."""

    def refuse(request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, "a valid bearer token is required")

    codec = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(refuse, **codec)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(refuse, **codec)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(refuse, **codec)
    return grpc.stream_stream_rpc_method_handler(refuse, **codec)
