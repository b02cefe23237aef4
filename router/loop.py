"""Running the engine on one thread for many concurrent callers.

Callers on other threads (gRPC handlers, the HTTP gateway's event loop) submit
requests with a callback for their deltas; the loop thread alone touches the
engine: it applies queued submissions and aborts, runs a step, and notes every
sequence's new tokens for the publisher (``router.deltas``), whose thread
decodes their text and calls the caller's callback (which must not block:
put it on a queue).
"""

from __future__ import annotations

import logging
import queue
import secrets
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from router.deltas import Delta, Publisher, Stream
from router.engine import LLMEngine
from router.params import SamplingParams

logger = logging.getLogger(__name__)

# How often an idle loop looks at its workers (health follows them meanwhile).
IDLE_CHECK_S = 1.0
# How long a loop whose requests all wait for KV room waits between steps.
STALLED_WAIT_S = 0.05


class DuplicateRequestError(ValueError):
    """A request id that is already in flight."""


@dataclass
class _Add:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    on_delta: Callable[[Delta], None]


@dataclass
class _Abort:
    request_id: str


class _Look:
    """Apply the pools' membership changes (discovery found or lost a worker)."""


@dataclass(frozen=True)
class Health:
    serving: bool  # a target worker is reachable
    speculating: bool  # a draft worker is reachable


class EngineLoop:
    def __init__(self, engine: LLMEngine, on_health_change: Callable[[Health], None] | None = None):
        """``on_health_change`` hears whenever the engine starts or stops being
        able to serve, or to speculate (on the loop's thread)."""
        self.engine = engine
        self._on_health_change = on_health_change
        self.health = Health(engine.serving, engine.speculating)
        self._commands: queue.Queue[_Add | _Abort | _Look | None] = queue.Queue()
        self._streams: dict[str, Stream] = {}
        self._publisher = Publisher()
        # Ids of the requests submitted and not finished, kept by callers' threads.
        self._active: set[str] = set()
        self._active_lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)
        self._thread.start()

    @property
    def num_requests(self) -> int:
        """Requests submitted and not yet finished (read from any thread)."""
        return len(self._active)

    def new_request_id(self) -> str:
        """An id no one can guess: knowing it is the right to abort its request."""
        return f"req-{secrets.token_hex(12)}"

    def submit(
        self,
        request_id: str,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        on_delta: Callable[[Delta], None],
    ) -> None:
        """Queue a request whose deltas go to ``on_delta`` (called on the
        publisher's thread); raises ValueError for a prompt the engine cannot serve, and
        DuplicateRequestError for an id already in flight."""
        self.engine.check_prompt(request_id, prompt_ids)
        with self._active_lock:
            if request_id in self._active:
                raise DuplicateRequestError(f"request {request_id!r} is already in flight")
            self._active.add(request_id)
        self._commands.put(_Add(request_id, list(prompt_ids), params, on_delta))

    def abort(self, request_id: str) -> bool:
        """Abort a request; False if none with that id is in flight."""
        if request_id not in self._active:
            return False
        self._commands.put(_Abort(request_id))
        return True

    def _finished(self, request_id: str) -> None:
        self._streams.pop(request_id, None)
        with self._active_lock:
            self._active.discard(request_id)

    def look_at_pools(self) -> None:
        """Have the loop apply the worker pools' changes now, even while idle."""
        self._commands.put(_Look())

    def stop(self) -> None:
        """Stop the loop; requests still in flight are aborted, so the workers
        free their KV now rather than when their leases lapse."""
        self._stopped.set()
        self._commands.put(None)
        self._thread.join(timeout=30)
        if not self._thread.is_alive():  # (else it still owns the engine)
            self._fail_all("the server is shutting down")
            self.engine.close()
        self._publisher.stop()

    def _apply(self, command: _Add | _Abort | _Look | None) -> None:
        if isinstance(command, _Look):
            self.engine.drafts.up()
            self._report_health()
        elif isinstance(command, _Add):
            (seq,) = self.engine.add_request(command.request_id, command.prompt_ids, command.params)
            self._streams[command.request_id] = Stream(seq, command.on_delta)
        elif isinstance(command, _Abort):
            stream = self._streams.get(command.request_id)
            self._finished(command.request_id)
            if stream is not None and not stream.seq.finished:
                self.engine.abort(command.request_id)
                self._publisher.end(stream, "abort")

    def _run(self) -> None:
        while not self._stopped.is_set():
            if not self._take_commands():  # idle, and nothing came for a while
                self.engine.check_workers()
                self._report_health()
                continue
            if self.engine.has_unfinished():
                try:
                    self.engine.step()
                except Exception as e:  # a worker failed: fail every request in flight
                    logger.exception("engine step failed")
                    self._fail_all(f"{type(e).__name__}: {e}")
                    continue
                self._publish()
                self._report_health()

    def _take_commands(self) -> bool:
        """Apply what has queued up (when idle, waiting up to IDLE_CHECK_S for
        something); False when idle and nothing came."""
        idle = not self.engine.has_unfinished()
        try:
            if idle:
                command = self._commands.get(timeout=IDLE_CHECK_S)
            elif self.engine.stalled:  # nothing can run until KV frees: don't spin
                command = self._commands.get(timeout=STALLED_WAIT_S)
            else:
                command = self._commands.get_nowait()
        except queue.Empty:
            return not idle
        while True:
            self._apply(command)
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return True

    def _report_health(self) -> None:
        health = Health(self.engine.serving, self.engine.speculating)
        if health != self.health:
            self.health = health
            if self._on_health_change is not None:
                self._on_health_change(health)

    def _publish(self) -> None:
        for stream in self._publisher.note(list(self._streams.values())):
            self._finished(stream.seq.request_id)

    def _fail_all(self, message: str) -> None:
        for request_id, stream in list(self._streams.items()):
            self._publisher.end(stream, "abort", error=message)
            self.engine.abort(request_id)
            self._finished(request_id)
