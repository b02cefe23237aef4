"""The TargetWorker gRPC service: converts wire messages and delegates to a
TargetWorker, one batch at a time (see draft_worker/service.py for how errors
are reported)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

import grpc

from model_runtime.serving_config import WorkerServerConfig
from protos import convert, target_worker_pb2_grpc
from protos import target_worker_pb2 as tpb
from protos.local_worker import WorkerServicer
from protos.messages import VerifyRequest
from protos.serving import serve_until_signalled, start_server
from target_worker.worker import TargetWorker, TargetWorkerConfig

SERVICE_NAME = "specserve.v1.TargetWorker"
M = TypeVar("M")


class TargetWorkerService(WorkerServicer, target_worker_pb2_grpc.TargetWorkerServicer):
    worker: TargetWorker

    def _requests(
        self,
        context: grpc.ServicerContext,
        convert_one: Callable[[M], VerifyRequest],
        messages: list[M],
    ) -> list[VerifyRequest]:
        try:
            return [convert_one(m) for m in messages]
        except ValueError as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            raise  # abort raises; this keeps the type checker informed

    def Prefill(
        self, request_iterator: Iterator[tpb.PrefillBatch], context: grpc.ServicerContext
    ) -> Iterator[tpb.PrefillResult]:
        for batch in request_iterator:
            requests = self._requests(
                context,
                convert.prefill_request_from_proto,
                list(batch.sequences),
            )
            with self.lock:
                outputs = self.worker.prefill(requests)
                free = self.worker.num_free_blocks
            yield tpb.PrefillResult(
                batch_id=batch.batch_id,
                outputs=[convert.prefill_output_to_proto(o) for o in outputs],
                num_free_blocks=free,
            )

    def Verify(
        self, request_iterator: Iterator[tpb.VerifyBatch], context: grpc.ServicerContext
    ) -> Iterator[tpb.VerifyResult]:
        for batch in request_iterator:
            requests = self._requests(
                context,
                convert.verify_request_from_proto,
                list(batch.sequences),
            )
            with self.lock:
                outputs = self.worker.verify(requests)
                free = self.worker.num_free_blocks
            yield tpb.VerifyResult(
                batch_id=batch.batch_id,
                outputs=[convert.verify_output_to_proto(o) for o in outputs],
                num_free_blocks=free,
            )


def serve(server: WorkerServerConfig, target: TargetWorkerConfig) -> None:
    """Run a target worker until SIGTERM."""
    worker = TargetWorker(server.build_runner(), target, server.model)
    running = start_server(
        [
            (
                target_worker_pb2_grpc.add_TargetWorkerServicer_to_server,
                TargetWorkerService(worker),
                SERVICE_NAME,
            )
        ],
        f"{server.host}:{server.port}",
    )
    serve_until_signalled(running, server.grace_s, f"target worker ready on {server.host}:{{port}}")
