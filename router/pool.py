"""Workers of one kind: which are members, which of them can be reached, and
when to look again for one that was lost.

Membership can change while the engine runs: discovery (router/discovery.py)
offers workers that appeared and withdraws ones that went away, from its own
thread; the engine's thread applies those changes when it next asks which
workers are up. Indexes are never reused: a worker that left stays in
``workers``, retired, so the index a sequence holds keeps naming the worker
its cache was on.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Sequence
from typing import Generic, Protocol, TypeVar

from protos.messages import WorkerInfo
from router.clients import close_worker

logger = logging.getLogger(__name__)


class Member(Protocol):
    @property
    def num_free_blocks(self) -> int: ...
    def probe(self, timeout_s: float) -> bool: ...
    def describe(self) -> WorkerInfo: ...


W = TypeVar("W", bound=Member)


# How often to look for a lost worker again, and how long a round may wait for it.
RETRY_S = 1.0
PROBE_S = 0.05
# How long an idle engine waits for a member to answer its health probe.
IDLE_PROBE_S = 0.5


class WorkerPool(Generic[W]):
    def __init__(
        self, workers: Sequence[W], kind: str, retry_s: float = RETRY_S, probe_s: float = PROBE_S
    ):
        self.kind = kind
        self.retry_s = retry_s
        self.probe_s = probe_s
        self.workers: list[W] = []
        self.infos: list[WorkerInfo] = []  # each worker as it was when it joined
        self.addresses: list[str] = []
        self._retired: set[int] = set()
        self._lost_at: dict[int, float] = {}
        # (address, worker to add and its info | None to remove), from discovery's thread
        self._changes: queue.SimpleQueue[tuple[str, tuple[W, WorkerInfo] | None]] = (
            queue.SimpleQueue()
        )
        for worker in workers:
            address = getattr(worker, "address", f"{kind}-{len(self.workers)}")
            self._join(address, worker, worker.describe())

    def __len__(self) -> int:
        """Workers ever in the pool, retired ones included (the range of indexes)."""
        return len(self.workers)

    # ------------------------------------------------ changes (any thread)

    def offer(self, address: str, worker: W, info: WorkerInfo) -> None:
        """Add ``worker``, reached at ``address``, at the engine's next look."""
        self._changes.put((address, (worker, info)))

    def withdraw(self, address: str) -> None:
        """Retire the worker at ``address`` at the engine's next look."""
        self._changes.put((address, None))

    # ------------------------------------------------ the engine's thread

    def members(self) -> list[int]:
        return [i for i in range(len(self.workers)) if i not in self._retired]

    def is_member(self, index: int) -> bool:
        return 0 <= index < len(self.workers) and index not in self._retired

    def is_up(self, index: int) -> bool:
        return self.is_member(index) and index not in self._lost_at

    def up(self) -> list[int]:
        """Indexes of the workers to use now; lost ones are probed once per retry_s."""
        self._apply_changes()
        now = time.monotonic()
        for index, lost_at in list(self._lost_at.items()):
            if now - lost_at < self.retry_s:
                continue
            if self.workers[index].probe(self.probe_s):
                logger.info("%s worker %s is back", self.kind, self.addresses[index])
                del self._lost_at[index]
            else:
                self._lost_at[index] = now
        return [i for i in self.members() if i not in self._lost_at]

    def any_up(self) -> bool:
        """Whether a member was reachable at the last look."""
        return any(self.is_up(i) for i in range(len(self.workers)))

    def check(self, timeout_s: float = IDLE_PROBE_S) -> None:
        """Probe every member that is up (``up`` retries the lost ones): a
        member that does not answer within ``timeout_s`` is lost. For an idle engine, so that health
        follows workers without traffic."""
        for index in self.up():
            if not self.workers[index].probe(timeout_s):
                self.lose(index, "it does not answer")

    def first_model(self, default: str = "") -> str:
        """The model of the first member (``default`` when there is none)."""
        members = self.members()
        return self.infos[members[0]].model if members else default

    def kv_cache_usage(self) -> float:
        """The share of the reachable members' KV blocks in use, as they last said."""
        up = [i for i in range(len(self.workers)) if self.is_up(i)]
        total = sum(self.infos[i].num_blocks for i in up)
        free = sum(self.workers[i].num_free_blocks for i in up)
        return (total - free) / total if total else 0.0

    def lose(self, index: int, reason: object) -> None:
        if not self.is_member(index):
            return  # retired meanwhile: nothing more to say about it
        logger.warning("%s worker %s lost: %s", self.kind, self.addresses[index], reason)
        self._lost_at[index] = time.monotonic()

    def _apply_changes(self) -> None:
        while True:
            try:
                address, joining = self._changes.get_nowait()
            except queue.Empty:
                return
            current = [i for i in self.members() if self.addresses[i] == address]
            if joining is not None and not current:
                self._join(address, *joining)
                logger.info("%s worker %s joined", self.kind, address)
            elif joining is not None:
                close_worker(joining[0])  # already a member
            for index in current if joining is None else []:
                self._retired.add(index)
                self._lost_at.pop(index, None)
                close_worker(self.workers[index])
                logger.info("%s worker %s left", self.kind, address)

    def _join(self, address: str, worker: W, info: WorkerInfo) -> None:
        self.infos.append(info)
        self.workers.append(worker)
        self.addresses.append(address)
