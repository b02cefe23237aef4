"""Adaptive k near a sequence's end: no round drafts more than its sequences
can keep, and the next round is chosen for the tokens they will have left."""

from __future__ import annotations

from router.adaptive import AdaptiveConfig, KChooser
from specserve import LLM, SamplingParams
from tests.test_adaptive_rounds import make_llm


def test_no_round_drafts_more_than_its_sequence_can_keep() -> None:
    # Near max_tokens the drafts past the tokens left would be drawn for nothing.
    llm = make_llm(adaptive_k=True)
    chooser = KChooser(3, AdaptiveConfig(probe_every=10**9))
    chooser.best = lambda batch, mix=None: 3  # type: ignore[method-assign]
    llm.engine.rounds.chooser = chooser
    drafted: list[tuple[int, int]] = []  # (k, tokens the sequence had left)
    accepted = llm.engine.rounds.accepted
    llm.engine.rounds.accepted = lambda seq, k, n: (  # type: ignore[method-assign]
        drafted.append((k, seq.room)) or accepted(seq, k, n)
    )
    for max_tokens in range(4, 10):
        params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
        llm.generate(["def f(x):"], params, use_tqdm=False)
    assert all(k <= room - 1 for k, room in drafted)
    assert any(k < 3 for k, _ in drafted)  # the limit was met


def asked_of(chooser: KChooser) -> list[tuple[int, list[int] | None]]:
    """The batch and rooms of every choice ``chooser`` makes from now on."""
    asked: list[tuple[int, list[int] | None]] = []
    choose = chooser.choose
    chooser.choose = lambda batch, kinds=(), *, round_number, rooms=None: (  # type: ignore[method-assign]
        asked.append((batch, None if rooms is None else list(rooms)))
        or choose(batch, kinds, round_number=round_number, rooms=rooms)
    )
    return asked


def test_the_next_round_is_chosen_with_the_rooms_its_sequences_will_have() -> None:
    llm = make_llm(adaptive_k=True)
    chooser = KChooser(3, AdaptiveConfig(probe_every=10**9))
    chooser.best = lambda batch, mix=None: 3  # type: ignore[method-assign]
    asked = asked_of(chooser)
    llm.engine.rounds.chooser = chooser
    had: list[int] = []  # each drafted round's room, as the round ran
    accepted = llm.engine.rounds.accepted
    llm.engine.rounds.accepted = lambda seq, k, n: (  # type: ignore[method-assign]
        had.append(seq.room) or accepted(seq, k, n)
    )
    params = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)
    llm.generate(["def f(x):"], params, use_tqdm=False)
    rooms = [room for _, rs in asked if rs is not None for room in rs]
    assert len(had) > 4 and [room for room in rooms if room > 1] == had  # (room 1: k = 0)


def ends_and_waits(llm: LLM, waiting: bool) -> tuple[int, list[tuple[int, list[int] | None]]]:
    """The batch a chooser was asked about when the first of two sequences
    ended by its length (after 6 tokens, the other after 30), with a third
    prompt waiting for a place or not; and all it was asked."""
    chooser = KChooser(3, AdaptiveConfig(probe_every=10**9))
    asked = asked_of(chooser)
    llm.engine.rounds.chooser = chooser
    short, long = (SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for n in (6, 30))
    prompts, params = ["def f(x):", "class A:", "import os"], [short, long, long]
    llm.generate(prompts[: 2 + waiting], params[: 2 + waiting], use_tqdm=False)
    # Until then both went on (two rooms); the first choice with one room was its round's.
    ended = next(batch for batch, rooms in asked if rooms is not None and len(rooms) == 1)
    assert all(room > 0 for _, rooms in asked for room in rooms or [])
    return ended, asked


def test_a_sequence_its_length_ends_leaves_a_closed_batch_smaller_for_the_next_round() -> None:
    ended, _ = ends_and_waits(make_llm(adaptive_k=True), waiting=False)
    assert ended == 1  # the next round's k chosen for the long one alone


def test_a_sequence_that_ends_is_counted_in_the_next_batch_where_one_waits_for_its_place() -> None:
    spec = {"model": "specserve/demo-draft", "num_speculative_tokens": 3, "adaptive_k": True}
    llm = LLM("specserve/demo-target", dtype="float32", max_model_len=256, max_num_seqs=2,
              speculative_config=spec)  # fmt: skip
    ended, asked = ends_and_waits(llm, waiting=True)
    # Counted in the batch (the waiting one takes its place), not in the mix.
    assert ended == 2
    assert any(batch == 1 for batch, _ in asked)  # (at the end, nothing waits)
