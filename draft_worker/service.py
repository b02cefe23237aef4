"""The DraftWorker gRPC service: converts wire messages and delegates to a
DraftWorker, one batch at a time.

Per-sequence problems (unknown sequence, bad tokens, no room) come back in each
proposal's status so that one sequence never fails its batch; a malformed
batch (k out of range, bad sampling values) aborts the stream with
INVALID_ARGUMENT.
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc

from draft_worker.worker import DraftWorker, DraftWorkerConfig
from model_runtime.serving_config import WorkerServerConfig
from protos import convert, draft_worker_pb2_grpc
from protos import draft_worker_pb2 as dpb
from protos.local_worker import WorkerServicer
from protos.serving import serve_until_signalled, start_server

MAX_DRAFT_TOKENS = 32
SERVICE_NAME = "specserve.v1.DraftWorker"


class DraftWorkerService(WorkerServicer, draft_worker_pb2_grpc.DraftWorkerServicer):
    worker: DraftWorker

    def Propose(
        self, request_iterator: Iterator[dpb.ProposeBatch], context: grpc.ServicerContext
    ) -> Iterator[dpb.ProposeResult]:
        for batch in request_iterator:
            k = batch.num_draft_tokens
            if not 1 <= k <= MAX_DRAFT_TOKENS:
                context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"num_draft_tokens must be in [1, {MAX_DRAFT_TOKENS}], got {k}",
                )
            try:
                requests = convert.propose_batch_from_proto(batch)
            except ValueError as e:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            with self.lock:
                proposals = self.worker.propose(requests, k)
                free = self.worker.num_free_blocks
            yield dpb.ProposeResult(
                batch_id=batch.batch_id,
                proposals=[convert.proposal_to_proto(p) for p in proposals],
                num_free_blocks=free,
            )


def serve(server: WorkerServerConfig, draft: DraftWorkerConfig) -> None:
    """Run a draft worker until SIGTERM."""
    worker = DraftWorker(server.build_runner(), draft, server.model)
    running = start_server(
        [
            (
                draft_worker_pb2_grpc.add_DraftWorkerServicer_to_server,
                DraftWorkerService(worker),
                SERVICE_NAME,
            )
        ],
        f"{server.host}:{server.port}",
    )
    serve_until_signalled(running, server.grace_s, f"draft worker ready on {server.host}:{{port}}")
