"""The DraftWorker gRPC service: converts wire messages and delegates to a
DraftWorker, one batch at a time.

Per-sequence problems (unknown sequence, bad tokens, no room) come back in each
proposal's status so that one sequence never fails its batch; a malformed
batch (k out of range, bad sampling values) aborts the stream with
INVALID_ARGUMENT.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial

import grpc

from draft_worker.parallel import ParallelDraftWorker, draft_rank_worker
from draft_worker.worker import DraftWorker, DraftWorkerConfig
from model_runtime.executors import ParallelConfig, start_executor
from model_runtime.serving_config import WorkerServerConfig
from protos import convert, draft_worker_pb2_grpc
from protos import draft_worker_pb2 as dpb
from protos.local_worker import WorkerServicer, serve_worker
from protos.messages import WorkerUnavailableError
from protos.serving import ServiceBinding

MAX_DRAFT_TOKENS = 32
SERVICE_NAME = "specserve.v1.DraftWorker"


class DraftWorkerService(WorkerServicer, draft_worker_pb2_grpc.DraftWorkerServicer):
    worker: DraftWorker | ParallelDraftWorker

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
                try:
                    proposals = self.worker.propose(requests, k)
                    free = self.worker.num_free_blocks
                except WorkerUnavailableError as e:
                    self.unavailable(context, e)
                    raise
            yield dpb.ProposeResult(
                batch_id=batch.batch_id,
                proposals=[convert.proposal_to_proto(p) for p in proposals],
                num_free_blocks=free,
            )


def build_worker(
    server: WorkerServerConfig, draft: DraftWorkerConfig, parallel: ParallelConfig
) -> DraftWorker | ParallelDraftWorker:
    """The worker in this process, or its ranks started by an executor."""
    if not parallel.uses_executor:
        return DraftWorker(server.build_runner(), draft, server.model)
    config = server.rank_config(parallel.tensor_parallel_size, partial(draft_rank_worker, draft))
    return ParallelDraftWorker(start_executor(config, parallel))


def serve(server: WorkerServerConfig, draft: DraftWorkerConfig, parallel: ParallelConfig) -> None:
    """Run a draft worker until SIGTERM."""
    worker = build_worker(server, draft, parallel)

    def bind(lost: Callable[[str], None]) -> ServiceBinding:
        servicer = DraftWorkerService(worker, lost)
        return draft_worker_pb2_grpc.add_DraftWorkerServicer_to_server, servicer, SERVICE_NAME

    serve_worker(worker, bind, f"{server.host}:{server.port}", server.grace_s, "draft worker")
