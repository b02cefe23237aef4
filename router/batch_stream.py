"""One long-lived bidirectional gRPC stream per kind of batch call: a batch
is sent, its result received, and the caller may work in between."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

import grpc

from model_runtime.errors import WorkerUnavailableError

Batch = TypeVar("Batch")
Result = TypeVar("Result")

# How long ``start`` waits for gRPC's sending thread to put a batch on the
# wire before it returns anyway (only a first batch, or a broken stream, waits).
SEND_WAIT_S = 0.01


class BatchStream(Generic[Batch, Result]):
    """One long-lived bidirectional stream: send a batch, receive its result.

    gRPC sends a stream's batches from a thread of its own, which needs the
    GIL: ``start`` returns once its batch was sent, so that what the caller
    does next (preparing the verify batch while the draft worker drafts)
    does not hold the batch back. A stream that breaks is opened again on
    the next call.
    """

    def __init__(
        self,
        start_call: Callable[..., Iterator[Result]],
        address: str,
        metadata: tuple[tuple[str, str], ...] = (),
    ):
        self._start_call = start_call
        self._metadata = metadata
        self._address = address
        self._lock = threading.Lock()
        self._outbox: queue.Queue[Batch | None] | None = None
        self._results: Iterator[Result] | None = None
        self._sent = threading.Condition()
        self._num_sent = 0  # batches gRPC has sent (it asked for the next one)

    def call(self, message: Batch) -> Result:
        return self.start(message)()

    def start(self, message: Batch) -> Callable[[], Result]:
        """Send ``message`` now; what is returned waits for its result (call it
        once: the stream carries one batch at a time until then)."""
        self._lock.acquire()
        try:
            if self._outbox is None or self._results is None:
                self._outbox = queue.Queue()
                self._results = self._start_call(
                    self._batches(self._outbox), metadata=self._metadata
                )
            with self._sent:
                sent = self._num_sent
                self._outbox.put(message)
                self._sent.wait_for(lambda: self._num_sent > sent, SEND_WAIT_S)
        except (grpc.RpcError, ValueError) as e:
            self._lock.release()
            raise self._broken(e) from e
        results = self._results

        def result() -> Result:
            try:
                return next(results)
            except (grpc.RpcError, StopIteration, ValueError) as e:
                raise self._broken(e) from e
            finally:
                self._lock.release()

        return result

    def _batches(self, outbox: queue.Queue[Batch | None]) -> Iterator[Batch]:
        """What gRPC's sending thread reads: each batch put in ``outbox``,
        counted as sent when it asks for the next."""
        while (message := outbox.get()) is not None:
            yield message
            with self._sent:
                self._num_sent += 1
                self._sent.notify_all()

    def _broken(self, e: Exception) -> WorkerUnavailableError:
        # ValueError: the channel was closed (the worker left the pool).
        self.close()
        return WorkerUnavailableError(f"worker {self._address}: {reason(e)}")

    def close(self) -> None:
        if self._outbox is not None:
            self._outbox.put(None)
        self._outbox = self._results = None


def reason(e: Exception) -> object:
    if isinstance(e, grpc.RpcError):
        return e.code()
    return "stream ended" if isinstance(e, StopIteration) else e
