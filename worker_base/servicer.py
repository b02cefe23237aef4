"""The gRPC servicer both worker services build on: Release, Describe, and the
one batch loop that serves every batch stream (Propose, Prefill, Verify).

The servicer only converts messages and delegates; the model runs one batch at
a time under ``lock``. A malformed batch aborts its stream with
INVALID_ARGUMENT; problems of one sequence come back in that sequence's
status. A worker that raises WorkerUnavailableError (a tensor-parallel rank
died) fails the call with UNAVAILABLE, and ``on_unavailable`` hears of it (the
service then reports NOT_SERVING).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol, TypeVar, cast

import grpc

from model_runtime.errors import WorkerUnavailableError
from protos import common_pb2 as pb
from protos.fields import worker_info_to_proto
from protos.messages import WorkerInfo
from protos.sessions import SESSION_KEY
from worker_base.leases import Leases

logger = logging.getLogger(__name__)

# How long a departed router's sequences are kept before they are freed.
DEFAULT_LEASE_TTL_S = 30.0
# A worker with no batch for this long is idle (it may stop at once).
IDLE_AFTER_S = 2.0

Batch = TypeVar("Batch")
Outputs = TypeVar("Outputs")
Result = TypeVar("Result")


def check_distinct(seq_ids: Iterable[int]) -> None:
    """ValueError (the batch's INVALID_ARGUMENT) for a sequence sent twice in one batch."""
    seen: set[int] = set()
    for seq_id in seq_ids:
        if seq_id in seen:
            raise ValueError(f"sequence {seq_id} appears twice in one batch")
        seen.add(seq_id)


class ServedWorker(Protocol):
    """What a worker service needs of its worker, in-process or on ranks."""

    @property
    def num_free_blocks(self) -> int: ...

    def release(self, seq_ids: Sequence[int]) -> int: ...

    def describe(self) -> WorkerInfo: ...


class WorkerServicer:
    def __init__(
        self,
        worker: ServedWorker,
        on_unavailable: Callable[[str], None] | None = None,
        lease_ttl_s: float = DEFAULT_LEASE_TTL_S,
    ):
        self.worker = worker
        self.lock = threading.Lock()
        self.on_unavailable = on_unavailable
        self.leases = Leases(lease_ttl_s)
        self._last_batch_at = 0.0
        self._janitor = threading.Thread(target=self._reclaim_forever, name="leases", daemon=True)
        self._janitor.start()

    def _reclaim_forever(self) -> None:
        """Free what lapsed leases held, a few times per lease time."""
        interval = min(1.0, self.leases.ttl_s / 4)
        while True:
            time.sleep(interval)
            try:
                self.free(self.leases.lapsed(), "its router is gone")
            except Exception:  # never let one bad pass end reclaiming
                logger.exception("reclaiming lapsed leases failed; trying again")

    def free(self, seq_ids: list[int], why: str) -> None:
        """Release sequences no one owns any more (best effort)."""
        if not seq_ids:
            return
        logger.info("freeing %d sequences: %s", len(seq_ids), why)
        with self.lock:
            try:
                self.worker.release(seq_ids)
            except WorkerUnavailableError as e:
                logger.warning("could not free them: %s", e)

    def _open_session(self, context: grpc.ServicerContext) -> str:
        """The session of a batch stream (its leases hold until it ends)."""
        given = dict(context.invocation_metadata()).get(SESSION_KEY)
        session, orphans = self.leases.opened(given if isinstance(given, str) else None)
        self.free(orphans, "its router started again")
        if not context.add_callback(lambda: self.leases.closed(session)):
            self.leases.closed(session)  # the stream has already ended
        return session

    def idle(self) -> bool:
        """Whether no batch has run for IDLE_AFTER_S (a draining worker may then
        end its streams: the router moves their sequences elsewhere). A worker
        under load is never idle, so its requests get the whole grace."""
        quiet = time.monotonic() - self._last_batch_at >= IDLE_AFTER_S
        return quiet and not self.lock.locked()

    def unavailable(self, context: grpc.ServicerContext, error: WorkerUnavailableError) -> None:
        if self.on_unavailable is not None:
            self.on_unavailable(str(error))
        context.abort(grpc.StatusCode.UNAVAILABLE, f"this worker has failed: {error}")

    def batch_loop(
        self,
        batches: Iterator[Batch],
        context: grpc.ServicerContext,
        prepare: Callable[[Batch], Callable[[], Outputs]],
        reply: Callable[[Batch, Outputs, int], Result],
    ) -> Iterator[Result]:
        """One result per batch: ``prepare`` checks and converts a batch into the
        worker call to make (ValueError: INVALID_ARGUMENT), the call runs under
        the lock, and ``reply`` converts its outputs and the KV blocks still
        free into the result. Every sequence a batch carries is leased to the
        stream's session (``worker_base.leases``)."""
        session = self._open_session(context)
        for batch in batches:
            try:
                call = prepare(batch)
            except ValueError as e:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            self.leases.hold(session, cast(Any, batch).sequences.seq_ids)
            with self.lock:
                self._last_batch_at = time.monotonic()
                try:
                    outputs, free = call(), self.worker.num_free_blocks
                except WorkerUnavailableError as e:
                    self.unavailable(context, e)
                    raise
            yield reply(batch, outputs, free)

    def Release(
        self, request: pb.ReleaseRequest, context: grpc.ServicerContext
    ) -> pb.ReleaseResponse:
        self.leases.forget(request.seq_ids)
        with self.lock:
            try:
                released = self.worker.release(list(request.seq_ids))
            except WorkerUnavailableError as e:
                self.unavailable(context, e)
                raise
            free = self.worker.num_free_blocks
            return pb.ReleaseResponse(num_released=released, num_free_blocks=free)

    def Describe(self, request: pb.DescribeRequest, context: grpc.ServicerContext) -> pb.WorkerInfo:
        with self.lock:
            try:
                info = self.worker.describe()
            except WorkerUnavailableError as e:
                self.unavailable(context, e)
                raise
            return worker_info_to_proto(info)
