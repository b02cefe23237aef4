"""What the engine loop's callers receive, and the thread that hands it to them.

After each step the loop thread notes what every request gained (a few list
slices per sequence) and queues it; the publisher's thread turns that into
deltas: it decodes the new tokens' text, holds back text that a stop string
might still cut, and calls the request's callback. Decoding here keeps it off
the round's path, as vLLM's output processor does in a process of its own:
the publisher runs while the loop waits on its workers. A sequence with stop
strings is decoded in the round (one of its tokens may stop it), so its text
is taken on the loop thread and only cut here.

Every delta of a request, its last included (finished, aborted, failed),
goes through the one queue, so a caller sees them in order.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from model_runtime.logprobs import TokenLogprob
from router.sequence import SequenceState


@dataclass
class Delta:
    """New output of one request since its previous delta."""

    token_ids: list[int]
    text: str
    finish_reason: str | None
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    error: str | None = None
    logprobs: list[TokenLogprob] = field(default_factory=list)  # one per token, if asked
    prompt_logprobs: list[TokenLogprob] | None = None  # in the first delta, if asked
    # In the last delta: the stop token id or stop string that ended it (None: EOS, length)
    stop_reason: int | str | None = None


@dataclass
class Stream:
    """One request's sequence and where its deltas go."""

    seq: SequenceState
    on_delta: Callable[[Delta], None]
    sent_tokens: int = 0  # output tokens noted (the loop thread's)
    sent_text: int = 0  # characters sent (the publisher's)


@dataclass
class _Noted:
    """What a step gave one request: a delta whose text is still to be made."""

    stream: Stream
    delta: Delta
    num_tokens: int  # output tokens the text covers
    text: str | None  # taken in the round (stop strings), or None: decode here


class Publisher:
    def __init__(self) -> None:
        self._queue: queue.Queue[list[_Noted] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="engine-output", daemon=True)
        self._thread.start()

    def note(self, streams: list[Stream]) -> list[Stream]:
        """Queue what each of ``streams`` gained since it was last noted (on the
        loop thread, between steps); return those whose sequence finished."""
        noted, finished = [], []
        for stream in streams:
            seq = stream.seq
            new_tokens = seq.output_ids[stream.sent_tokens :]
            if not new_tokens and not seq.finished:
                continue
            delta = Delta(
                token_ids=new_tokens,
                text="",
                finish_reason=seq.finish_reason,
                num_drafts=seq.counts.num_drafts,
                num_draft_tokens=seq.counts.num_draft_tokens,
                num_accepted_tokens=seq.counts.num_accepted_tokens,
                error=seq.error,
                logprobs=seq.logprobs[stream.sent_tokens :],
                prompt_logprobs=seq.prompt_logprobs if not stream.sent_tokens else None,
                stop_reason=seq.stop_reason if seq.finished else None,
            )
            stream.sent_tokens = len(seq.output_ids)
            text = seq.text if seq.params.stop_strings else None  # decoded in the round
            noted.append(_Noted(stream, delta, stream.sent_tokens, text))
            if seq.finished:
                finished.append(stream)
        if noted:
            self._queue.put(noted)
        return finished

    def end(self, stream: Stream, reason: str, error: str | None = None) -> None:
        """Queue a last delta with no tokens and no text (aborted, or failed
        with ``error``)."""
        counts = stream.seq.counts
        delta = Delta(
            [], "", reason, counts.num_drafts, counts.num_draft_tokens,
            counts.num_accepted_tokens, error=error,
        )  # fmt: skip
        self._queue.put([_Noted(stream, delta, stream.sent_tokens, "")])

    def stop(self) -> None:
        """Deliver what is queued, then end the thread."""
        self._queue.put(None)
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while (batch := self._queue.get()) is not None:
            for noted in batch:
                self._send(noted)

    def _send(self, noted: _Noted) -> None:
        stream, delta, seq = noted.stream, noted.delta, noted.stream.seq
        text = seq.text_of(noted.num_tokens) if noted.text is None else noted.text
        # Text that a stop string might still cut waits until more comes.
        stops = seq.params.stop_strings
        held_back = 0 if delta.finish_reason else max((len(s) - 1 for s in stops), default=0)
        end = max(stream.sent_text, len(text) - held_back)
        delta.text, stream.sent_text = text[stream.sent_text : end], end
        stream.on_delta(delta)
