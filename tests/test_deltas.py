"""What the engine loop's callers receive: tokens noted after each step, their
text decoded on the publisher's thread (off the round's path), in order."""

from __future__ import annotations

import queue
import threading

import pytest
from transformers import AutoTokenizer

import specserve
from router.deltas import Delta, Publisher, Stream
from router.params import SamplingParams
from router.sequence import SequenceState
from tests.test_sequence_state import state

TEXT = "def add(a, b):\n    return a + b  # naïve ✓\n"


@pytest.fixture(scope="module")
def tokenizer():  # type: ignore[no-untyped-def]
    return AutoTokenizer.from_pretrained(specserve.resolve_model("specserve/demo-target"))


def received(publisher: Publisher, seq: SequenceState, rounds: list[list[int]]) -> list[Delta]:
    """The deltas a caller gets when ``rounds`` of tokens are appended and noted."""
    deltas: queue.Queue[tuple[Delta, str]] = queue.Queue()
    stream = Stream(seq, lambda d: deltas.put((d, threading.current_thread().name)))
    for tokens in rounds:
        seq.append(tokens)
        publisher.note([stream])
        if seq.finished:  # the engine lets it go
            break
    publisher.stop()
    got = [deltas.get_nowait() for _ in range(deltas.qsize())]
    assert all(thread == "engine-output" for _, thread in got)  # never the loop's thread
    return [d for d, _ in got]


def rounds_of(ids: list[int], size: int = 3) -> list[list[int]]:
    return [ids[i : i + size] for i in range(0, len(ids), size)]


def test_a_round_appends_tokens_without_decoding_them(tokenizer) -> None:  # type: ignore[no-untyped-def]
    seq = state(tokenizer, SamplingParams(max_tokens=None))
    ids = tokenizer.encode(TEXT)
    seq.append(ids)
    assert seq.decoded == 0 and seq.detokenizer.text == ""
    assert seq.text == TEXT and seq.decoded == len(ids)  # decoded when read


def test_the_deltas_carry_every_token_and_the_whole_text_in_order(tokenizer) -> None:  # type: ignore[no-untyped-def]
    ids = tokenizer.encode(TEXT)
    seq = state(tokenizer, SamplingParams(max_tokens=len(ids)))
    deltas = received(Publisher(), seq, rounds_of(ids))
    assert [t for d in deltas for t in d.token_ids] == ids
    assert "".join(d.text for d in deltas) == TEXT
    assert [d.finish_reason for d in deltas][-1] == "length"
    assert all(d.finish_reason is None for d in deltas[:-1])


def test_text_a_stop_string_might_cut_is_held_back_until_it_cannot(tokenizer) -> None:  # type: ignore[no-untyped-def]
    ids = tokenizer.encode("x = 1 END y = 2")
    seq = state(tokenizer, SamplingParams(max_tokens=None, stop=["END"]))
    deltas = received(Publisher(), seq, [[t] for t in ids])
    assert "".join(d.text for d in deltas) == "x = 1 "
    assert (deltas[-1].finish_reason, deltas[-1].stop_reason) == ("stop", "END")
    for d in deltas[:-1]:  # no delta ends in text that could begin "END"
        assert not any(d.text.endswith("END"[:n]) for n in (1, 2))


def test_an_ending_comes_after_the_deltas_already_noted(tokenizer) -> None:  # type: ignore[no-untyped-def]
    ids = tokenizer.encode(TEXT)
    seq = state(tokenizer, SamplingParams(max_tokens=None))
    publisher, deltas = Publisher(), queue.Queue[Delta]()
    stream = Stream(seq, deltas.put)
    for tokens in rounds_of(ids):
        seq.append(tokens)
        publisher.note([stream])
    publisher.end(stream, "abort", error="the server is shutting down")
    publisher.stop()
    got = [deltas.get_nowait() for _ in range(deltas.qsize())]
    assert "".join(d.text for d in got) == TEXT and len(got) == len(rounds_of(ids)) + 1
    assert (got[-1].finish_reason, got[-1].error, got[-1].text) == (
        "abort",
        "the server is shutting down",
        "",
    )


def test_without_detokenizing_the_deltas_carry_tokens_and_no_text(tokenizer) -> None:  # type: ignore[no-untyped-def]
    ids = tokenizer.encode(TEXT)
    seq = state(tokenizer, SamplingParams(max_tokens=len(ids), detokenize=False))
    deltas = received(Publisher(), seq, rounds_of(ids))
    assert [t for d in deltas for t in d.token_ids] == ids
    assert all(d.text == "" for d in deltas)
