"""The one interface the engine drives workers through.

In-process, DraftWorker and TargetWorker (or their tensor-parallel forms) are
the clients themselves; over gRPC, ``router.grpc_clients`` implements the same
calls. Whoever builds an engine hands it its clients: the router never
imports a worker package.

A round's calls go through ``start_propose`` and ``prepare_verify``: a client
that can send a batch and wait for its result apart (gRPC's, with methods of
those names) lets the engine prepare the verify batch while the draft worker
drafts, and send to every worker of a pool before waiting on any; an
in-process worker simply runs its call (its device work is queued anyway).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from model_runtime.errors import WorkerUnavailableError
from protos.messages import Proposal, ProposeRequest, VerifyOutput, VerifyRequest, WorkerInfo


class DraftClient(Protocol):
    @property
    def num_free_blocks(self) -> int: ...
    def propose(self, requests: Sequence[ProposeRequest], k: int) -> Sequence[Proposal]: ...
    def release(self, seq_ids: Sequence[int]) -> int: ...
    def describe(self) -> WorkerInfo: ...
    def probe(self, timeout_s: float) -> bool: ...


class TargetClient(Protocol):
    @property
    def num_free_blocks(self) -> int: ...
    @property
    def vocab_size(self) -> int: ...
    def prefill(self, requests: Sequence[VerifyRequest]) -> list[VerifyOutput]: ...
    def verify(self, requests: Sequence[VerifyRequest]) -> Sequence[VerifyOutput]: ...
    def release(self, seq_ids: Sequence[int]) -> int: ...
    def describe(self) -> WorkerInfo: ...
    def probe(self, timeout_s: float) -> bool: ...


T = TypeVar("T")


def start_propose(
    client: DraftClient, requests: Sequence[ProposeRequest], k: int
) -> Callable[[], Sequence[Proposal]]:
    """Start proposing for ``requests``; what is returned waits for the
    proposals (and raises WorkerUnavailableError if the worker was lost)."""
    start = getattr(client, "start_propose", None)
    if start is not None:
        return start(requests, k)
    return _ran(lambda: client.propose(requests, k))


def prepare_verify(
    client: TargetClient, requests: Sequence[VerifyRequest]
) -> Callable[[object | None], Callable[[], Sequence[VerifyOutput]]]:
    """Prepare verifying ``requests``, whose drafts may be filled in until the
    returned call sends them; that call returns what waits for the outputs.
    A client that ``takes_wire_drafts`` may be given the batch's drafts as
    they came from a draft worker over the wire instead."""
    prepare = getattr(client, "prepare_verify", None)
    if prepare is not None:
        return prepare(requests)

    def send(wire: object | None) -> Callable[[], Sequence[VerifyOutput]]:
        assert wire is None, "a worker in process takes its drafts in the requests"
        return _ran(lambda: client.verify(requests))

    return send


def takes_wire_drafts(client: TargetClient) -> bool:
    """Whether ``prepare_verify``'s send takes drafts as they came over the wire."""
    return hasattr(client, "prepare_verify")


def _ran(call: Callable[[], T]) -> Callable[[], T]:
    """Run ``call`` now; what is returned gives its result or raises its
    WorkerUnavailableError."""
    try:
        result = call()
    except WorkerUnavailableError as e:
        error = e

        def failed() -> T:
            raise error

        return failed
    return lambda: result


def close_worker(worker: object) -> None:
    """Close a worker client that has a ``close`` (in-process workers have none)."""
    close = getattr(worker, "close", None)
    if close is not None:
        close()
