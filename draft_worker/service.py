"""The DraftWorker gRPC service: converts wire messages and delegates to a
DraftWorker (or its ranks), one batch at a time, through the shared batch loop
(``worker_base.servicer``: how errors are reported)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial

import grpc

from draft_worker.tensor_parallel import ParallelDraftWorker, draft_rank_worker
from draft_worker.worker import DraftWorker, DraftWorkerConfig
from model_runtime.specs import ParallelConfig, RunnerSpec
from protos import convert, draft_worker_pb2_grpc
from protos import draft_worker_pb2 as dpb
from protos.messages import MAX_DRAFT_TOKENS, Proposal
from protos.tls import PLAIN, TlsConfig
from worker_base.serve import ServerConfig, serve_worker, start_worker
from worker_base.servicer import WorkerServicer, check_distinct

SERVICE_NAME = "specserve.v1.DraftWorker"


class DraftWorkerService(WorkerServicer, draft_worker_pb2_grpc.DraftWorkerServicer):
    worker: DraftWorker | ParallelDraftWorker

    def Propose(
        self, request_iterator: Iterator[dpb.ProposeBatch], context: grpc.ServicerContext
    ) -> Iterator[dpb.ProposeResult]:
        return self.batch_loop(request_iterator, context, self._prepare, _result)

    def _prepare(self, batch: dpb.ProposeBatch) -> Callable[[], list[Proposal]]:
        k = batch.num_draft_tokens
        if not 1 <= k <= MAX_DRAFT_TOKENS:
            raise ValueError(f"num_draft_tokens must be in [1, {MAX_DRAFT_TOKENS}], got {k}")
        requests = convert.propose_batch_from_proto(batch)
        check_distinct(r.tokens.seq_id for r in requests)
        return partial(self.worker.propose, requests, k)


def _result(batch: dpb.ProposeBatch, proposals: list[Proposal], free: int) -> dpb.ProposeResult:
    return convert.propose_result_to_proto(batch.batch_id, proposals, free)


def build_draft_worker(
    runner: RunnerSpec, draft: DraftWorkerConfig, parallel: ParallelConfig
) -> DraftWorker | ParallelDraftWorker:
    """The draft worker in this process, or its ranks started by an executor."""
    factory = partial(draft_rank_worker, draft)
    return start_worker(runner, parallel, factory, ParallelDraftWorker, "draft")


def serve(
    server: ServerConfig,
    runner: RunnerSpec,
    draft: DraftWorkerConfig,
    parallel: ParallelConfig,
    tls: TlsConfig = PLAIN,
) -> None:
    """Run a draft worker until SIGTERM."""
    serve_worker(
        build_draft_worker(runner, draft, parallel),
        DraftWorkerService,
        draft_worker_pb2_grpc.add_DraftWorkerServicer_to_server,
        SERVICE_NAME,
        server,
        "draft worker",
        tls,
    )
