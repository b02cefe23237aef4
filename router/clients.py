"""The one interface the engine drives workers through.

In-process, DraftWorker and TargetWorker (or their tensor-parallel forms) are
the clients themselves; over gRPC, ``router.grpc_clients`` implements the same
calls. Whoever builds an engine hands it its clients: the router never
imports a worker package.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from protos.messages import Proposal, ProposeRequest, VerifyOutput, VerifyRequest, WorkerInfo


class DraftClient(Protocol):
    @property
    def num_free_blocks(self) -> int: ...
    def propose(self, requests: Sequence[ProposeRequest], k: int) -> list[Proposal]: ...
    def release(self, seq_ids: Sequence[int]) -> int: ...
    def describe(self) -> WorkerInfo: ...
    def probe(self, timeout_s: float) -> bool: ...


class TargetClient(Protocol):
    @property
    def num_free_blocks(self) -> int: ...
    @property
    def vocab_size(self) -> int: ...
    def prefill(self, requests: Sequence[VerifyRequest]) -> list[VerifyOutput]: ...
    def verify(self, requests: Sequence[VerifyRequest]) -> list[VerifyOutput]: ...
    def release(self, seq_ids: Sequence[int]) -> int: ...
    def describe(self) -> WorkerInfo: ...
    def probe(self, timeout_s: float) -> bool: ...


def close_worker(worker: object) -> None:
    """Close a worker client that has a ``close`` (in-process workers have none)."""
    close = getattr(worker, "close", None)
    if close is not None:
        close()
