"""The wire contract: committed stubs match the .proto files, the services and
messages later issues build on exist, every server answers the standard
health and reflection services, and a router talks only to workers of its
wire version."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from protos import draft_worker_pb2_grpc, router_pb2, target_worker_pb2
from protos.generate import PROTO_DIR, generate
from protos.server import start_server


def test_committed_stubs_match_the_proto_files(tmp_path: Path) -> None:
    fresh = generate(tmp_path)
    assert fresh, "grpcio-tools produced no stubs"
    for path in fresh:
        committed = PROTO_DIR / path.name
        assert committed.is_file(), f"{path.name} is not committed; run python -m protos.generate"
        assert committed.read_text() == path.read_text(), (
            f"{path.name} is stale; run python -m protos.generate and commit the result"
        )


def test_services_have_the_streaming_shapes_of_the_design() -> None:
    def methods(module: object, service: str) -> dict[str, tuple[bool, bool]]:
        desc = module.DESCRIPTOR.services_by_name[service]  # type: ignore[attr-defined]
        return {m.name: (m.client_streaming, m.server_streaming) for m in desc.methods}

    assert methods(router_pb2, "Router") == {
        "Generate": (False, True),
        "Abort": (False, False),
        "Describe": (False, False),
    }
    assert methods(target_worker_pb2, "TargetWorker") == {
        "Prefill": (True, True),
        "Verify": (True, True),
        "Release": (False, False),
        "Describe": (False, False),
    }
    from protos import draft_worker_pb2

    assert methods(draft_worker_pb2, "DraftWorker") == {
        "Propose": (True, True),
        "Release": (False, False),
        "Describe": (False, False),
    }


@pytest.fixture
def server():  # type: ignore[no-untyped-def]
    running = start_server(
        [
            (
                draft_worker_pb2_grpc.add_DraftWorkerServicer_to_server,
                draft_worker_pb2_grpc.DraftWorkerServicer(),
                "specserve.v1.DraftWorker",
            )
        ]
    )
    yield running
    running.stop(grace_s=0)


def test_every_server_answers_health_checks(server) -> None:  # type: ignore[no-untyped-def]
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for name in ("", "specserve.v1.DraftWorker"):
            reply = health.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        server.set_serving(False)
        reply = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING


def test_every_server_lists_its_services_by_reflection(server) -> None:  # type: ignore[no-untyped-def]
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        reply = next(stub.ServerReflectionInfo(iter([request]), timeout=5))
        names = {s.name for s in reply.list_services_response.service}
    assert {"specserve.v1.DraftWorker", "grpc.health.v1.Health"} <= names


class OlderWorker(draft_worker_pb2_grpc.DraftWorkerServicer):
    """A draft worker of a release before WorkerInfo.wire_version (it says 0)."""

    def __init__(self) -> None:
        self.described = 0

    def Describe(self, request, context):  # type: ignore[no-untyped-def]
        from protos import common_pb2 as pb

        self.described += 1
        return pb.WorkerInfo(model="m", vocab_size=8, max_model_len=64, block_size=16)


@pytest.fixture
def older_worker():  # type: ignore[no-untyped-def]
    worker = OlderWorker()
    bind = draft_worker_pb2_grpc.add_DraftWorkerServicer_to_server
    running = start_server([(bind, worker, "specserve.v1.DraftWorker")])
    yield f"127.0.0.1:{running.port}", worker
    running.stop(grace_s=0)


def test_a_router_refuses_a_worker_of_another_wire_version_by_name(older_worker) -> None:  # type: ignore[no-untyped-def]
    # Each side would drop, or ignore, what the other added: they must not talk.
    from model_runtime.errors import WorkerUnavailableError
    from protos.messages import WIRE_VERSION
    from router.grpc_clients import GrpcDraftClient

    address, _ = older_worker
    with pytest.raises(WorkerUnavailableError, match=f"version 0 and this router {WIRE_VERSION}"):
        GrpcDraftClient(address, timeout_s=5)


def test_a_discovered_worker_of_another_wire_version_is_refused_once_not_retried(
    older_worker,
    caplog,  # type: ignore[no-untyped-def]
) -> None:
    from router.discovery import Discovery
    from router.grpc_clients import GrpcDraftClient
    from router.pool import WorkerPool

    address, worker = older_worker
    pool: WorkerPool = WorkerPool([], "draft")
    discovery = Discovery(
        pool, ["drafts"], GrpcDraftClient, lambda info: None, 60.0, resolver=lambda name: {address}
    )
    discovery.refresh()
    discovery.refresh()
    assert worker.described == 1 and not pool.members()
    assert "cannot join" in caplog.text and "wire version 0" in caplog.text
