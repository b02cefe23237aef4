"""Who owns each sequence a worker holds, and what a departed owner left.

A router opens its batch streams with metadata naming its *session*
(``protos.sessions``): the router's name (host and port) and a random id per
router process. Every
sequence a batch carries is leased to the session of its stream. The lease
holds while one of the session's streams is open; once none is, it lapses
after ``ttl_s`` (a router whose stream broke opens it again on its next call)
and the worker frees the session's sequences. A new session under the same
name frees the old one's sequences at once: a restarted router clears what
its previous life left. A stream without the metadata is a session of its own.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from protos.sessions import new_session, session_name


@dataclass
class _Session:
    name: str
    streams: int = 0  # open now
    closed_at: float = 0.0  # when the last one closed
    seq_ids: set[int] = field(default_factory=set)


class Leases:
    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.monotonic):
        if ttl_s <= 0:
            raise ValueError(f"the lease time must be > 0 seconds, got {ttl_s}")
        self.ttl_s = ttl_s
        self.clock = clock
        self._sessions: dict[str, _Session] = {}
        self._owner: dict[int, str] = {}  # seq_id -> session
        self._lock = threading.Lock()

    def opened(self, session: str | None) -> tuple[str, list[int]]:
        """A stream of ``session`` opened (None: an anonymous one); returns its
        session, and the sequences of an earlier session of the same name,
        which are no longer anyone's and must be freed."""
        session = session or new_session(f"anonymous-{uuid.uuid4().hex}")  # a name of its own
        name = session_name(session)
        with self._lock:
            stale = [s for s, held in self._sessions.items() if held.name == name and s != session]
            orphans = [seq for s in stale for seq in self._drop(s)]
            self._sessions.setdefault(session, _Session(name)).streams += 1
        return session, orphans

    def closed(self, session: str) -> None:
        with self._lock:
            held = self._sessions.get(session)
            if held is not None:
                held.streams -= 1
                held.closed_at = self.clock()

    def hold(self, session: str, seq_ids: Iterable[int]) -> None:
        """``session`` holds these sequences now (a sequence moves to the latest)."""
        with self._lock:
            held = self._sessions.get(session)
            if held is None:
                return
            for seq_id in seq_ids:
                previous = self._owner.get(seq_id)
                if previous is not None and previous != session:
                    self._sessions[previous].seq_ids.discard(seq_id)
                self._owner[seq_id] = session
                held.seq_ids.add(seq_id)

    def forget(self, seq_ids: Sequence[int]) -> None:
        """These sequences were released."""
        with self._lock:
            for seq_id in seq_ids:
                session = self._owner.pop(seq_id, None)
                if session is not None:
                    self._sessions[session].seq_ids.discard(seq_id)

    def lapsed(self) -> list[int]:
        """The sequences of every session with no open stream for ``ttl_s``,
        now forgotten (the caller frees them)."""
        now = self.clock()
        with self._lock:
            gone = [
                s
                for s, held in self._sessions.items()
                if held.streams <= 0 and now - held.closed_at >= self.ttl_s
            ]
            return [seq for s in gone for seq in self._drop(s)]

    def _drop(self, session: str) -> list[int]:
        held = self._sessions.pop(session)
        for seq_id in held.seq_ids:
            self._owner.pop(seq_id, None)
        return sorted(held.seq_ids)
