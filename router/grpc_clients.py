"""The engine's worker interface (``router.clients``) over gRPC.

Each client keeps persistent bidirectional streams: one message per batch each
way, so nothing per sequence per token crosses the network. A broken stream
becomes WorkerUnavailableError and is opened again on the next call.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from model_runtime.errors import IncompatibleWorkerError, WorkerUnavailableError
from protos import common_pb2 as pb
from protos import convert
from protos import draft_worker_pb2 as dpb
from protos import target_worker_pb2 as tpb
from protos.draft_worker_pb2_grpc import DraftWorkerStub
from protos.fields import worker_info_from_proto
from protos.messages import (
    WIRE_VERSION,
    Proposal,
    ProposeRequest,
    VerifyOutput,
    VerifyRequest,
    WorkerInfo,
)
from protos.server import KEEPALIVE_OPTIONS
from protos.sessions import SESSION_KEY
from protos.target_worker_pb2_grpc import TargetWorkerStub
from protos.tls import PLAIN, TlsConfig
from router.batch_stream import BatchStream, reason

logger = logging.getLogger(__name__)

# Reconnect to a restarted worker within about a second, not gRPC's default two minutes.
CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    # A peer that vanishes without closing its connection (a node lost, a
    # partition) is noticed within about 15 s, its streams broken.
    *KEEPALIVE_OPTIONS,
]


Result = TypeVar("Result")
Parsed = TypeVar("Parsed")


class _GrpcWorker:
    """What both kinds of worker client share: a channel, Describe and Release."""

    stub_class: type[DraftWorkerStub] | type[TargetWorkerStub]
    stub: DraftWorkerStub | TargetWorkerStub
    info: WorkerInfo  # as last described

    def __init__(
        self,
        address: str,
        timeout_s: float = 60.0,
        connect_timeout_s: float | None = None,
        wait_for_ready: bool = True,
        session: str | None = None,
        tls: TlsConfig = PLAIN,
    ):
        """Connect to the worker at ``address``, waiting up to ``connect_timeout_s``
        (default ``timeout_s``) for it to answer; without ``wait_for_ready``, an
        address that refuses the connection fails at once. The batch streams
        carry ``session`` (``protos.sessions``): the worker frees what they
        hold when the session ends. ``tls`` secures the channel."""
        self.address = address
        self.metadata = () if session is None else ((SESSION_KEY, session),)
        self.timeout_s = timeout_s
        self.channel = tls.channel(address, CHANNEL_OPTIONS)
        self.stub = self.stub_class(self.channel)
        self._health = health_pb2_grpc.HealthStub(self.channel)
        self._batch_ids = itertools.count()
        self._free_blocks = 0
        try:
            self.info = self._describe(wait_for_ready, connect_timeout_s)
        except WorkerUnavailableError:
            self.channel.close()
            raise
        self._open_streams()

    def _open_streams(self) -> None:
        """Set up the worker's batch streams (opened on first use)."""

    def _describe(self, wait_for_ready: bool = False, timeout_s: float | None = None) -> WorkerInfo:
        try:
            m = self.stub.Describe(
                pb.DescribeRequest(),
                timeout=timeout_s or self.timeout_s,
                wait_for_ready=wait_for_ready,
            )
        except (grpc.RpcError, ValueError) as e:
            raise WorkerUnavailableError(f"worker {self.address}: {reason(e)}") from e
        info = worker_info_from_proto(m)
        if info.wire_version != WIRE_VERSION:
            raise IncompatibleWorkerError(
                f"worker {self.address} speaks batch wire version {info.wire_version} and this "
                f"router {WIRE_VERSION}: run one specserve version on the router and its workers"
            )
        self.info, self._free_blocks = info, info.num_free_blocks
        return info

    def describe(self) -> WorkerInfo:
        return self._describe()

    @property
    def num_free_blocks(self) -> int:
        return self._free_blocks

    def probe(self, timeout_s: float) -> bool:
        """Whether the worker says it serves within ``timeout_s`` (waiting for a
        reconnect). Its health service answers at once even while a batch runs,
        so a busy worker is never taken for a lost one."""
        request = health_pb2.HealthCheckRequest()
        try:
            reply = self._health.Check(request, timeout=timeout_s, wait_for_ready=True)
        except (grpc.RpcError, ValueError):
            return False
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)

    def _parsed(
        self,
        wait: Callable[[], Any],
        parse: Callable[[Any, Sequence[Any]], Parsed],
        requests: Sequence[Any],
    ) -> Callable[[], Parsed]:
        """What waits for a sent batch's result and parses it (``_read``)."""

        def parsed() -> Parsed:
            result = wait()
            self._free_blocks = result.num_free_blocks
            return self._read(parse, result, requests)

        return parsed

    def _read(
        self,
        parse: Callable[[Result, Sequence[Any]], Parsed],
        result: Result,
        requests: Sequence[Any],
    ) -> Parsed:
        """``result`` parsed as the answer to ``requests``."""
        try:
            return parse(result, requests)
        except ValueError as e:  # a worker that answers nonsense is as good as lost
            raise WorkerUnavailableError(
                f"worker {self.address} sent a malformed result: {e}"
            ) from e

    def release(self, seq_ids: Sequence[int]) -> int:
        """Best effort: a worker that is gone has nothing left to free."""
        try:
            reply = self.stub.Release(
                pb.ReleaseRequest(seq_ids=list(seq_ids)), timeout=self.timeout_s
            )
        except (grpc.RpcError, ValueError) as e:
            logger.warning("release on %s failed: %s", self.address, reason(e))
            return 0
        self._free_blocks = reply.num_free_blocks  # admission reads it next
        return int(reply.num_released)


class GrpcDraftClient(_GrpcWorker):
    stub_class = DraftWorkerStub
    stub: DraftWorkerStub

    def _open_streams(self) -> None:
        self._propose: BatchStream[dpb.ProposeBatch, dpb.ProposeResult] = BatchStream(
            self.stub.Propose, self.address, self.metadata
        )

    def propose(self, requests: Sequence[ProposeRequest], k: int) -> Sequence[Proposal]:
        return self.start_propose(requests, k)()

    def start_propose(
        self, requests: Sequence[ProposeRequest], k: int
    ) -> Callable[[], Sequence[Proposal]]:
        """Send the batch now; what is returned waits for its proposals."""
        message = convert.propose_batch_to_proto(next(self._batch_ids), requests, k)
        wait = self._propose.start(message)

        return self._parsed(wait, convert.propose_result_from_proto, requests)

    def close(self) -> None:
        self._propose.close()
        self.channel.close()


class GrpcTargetClient(_GrpcWorker):
    stub_class = TargetWorkerStub
    stub: TargetWorkerStub

    def _open_streams(self) -> None:
        self._prefill: BatchStream[tpb.PrefillBatch, tpb.PrefillResult] = BatchStream(
            self.stub.Prefill, self.address, self.metadata
        )
        self._verify: BatchStream[tpb.VerifyBatch, tpb.VerifyResult] = BatchStream(
            self.stub.Verify, self.address, self.metadata
        )

    @property
    def vocab_size(self) -> int:
        return self.info.vocab_size

    def prefill(self, requests: Sequence[VerifyRequest]) -> list[VerifyOutput]:
        message = convert.prefill_batch_to_proto(next(self._batch_ids), requests)
        result = self._prefill.call(message)
        self._free_blocks = result.num_free_blocks
        return [convert.prefill_output_from_proto(o) for o in result.outputs]

    def verify(self, requests: Sequence[VerifyRequest]) -> Sequence[VerifyOutput]:
        return self.prepare_verify(requests)(None)()

    def prepare_verify(
        self, requests: Sequence[VerifyRequest]
    ) -> Callable[[object | None], Callable[[], Sequence[VerifyOutput]]]:
        """Encode the batch's sequences now; what is returned sends the batch
        with the drafts ``requests`` hold by then (or those given as they came
        from a draft worker), and returns what waits for the outputs."""
        sequences = convert.sequences_of(requests)

        def send(wire: object | None = None) -> Callable[[], Sequence[VerifyOutput]]:
            assert wire is None or isinstance(wire, pb.Drafts)
            batch_id = next(self._batch_ids)
            message = convert.verify_batch_to_proto(batch_id, requests, sequences, wire)
            wait = self._verify.start(message)
            return self._parsed(wait, convert.verify_result_from_proto, requests)

        return send

    def close(self) -> None:
        self._prefill.close()
        self._verify.close()
        self.channel.close()
