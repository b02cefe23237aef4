"""The next round's draft batch, cut from a round's verify outputs column by
column: each sequence that goes on asks for what its draft lacks, with the
sampling it will have, and one that surely finishes or cannot be drafted
for is left out."""

from __future__ import annotations

import itertools
from typing import Any

from transformers import AutoTokenizer

import specserve
from model_runtime.status import OK
from protos import convert
from protos.batch_columns import ProposeColumns, VerifyColumns
from protos.messages import ProposeRequest, SequenceTokens, VerifyOutput
from router.ahead import NextDrafts, ShareFacts, cut_next
from router.params import SamplingParams
from router.sequence import SequenceState, new_sequences

TOKENIZER = AutoTokenizer.from_pretrained(specserve.resolve_model("specserve/demo-target"))
IDS = itertools.count(100)


def seq(draft_worker: int = 0, **params: Any) -> SequenceState:
    """A sequence of 3 prompt tokens whose draft holds them and 2 drafts of 3."""
    options = {"temperature": 0, "max_tokens": 64, **params}
    (s,) = new_sequences(IDS, "r", [1, 2, 3], SamplingParams(**options), TOKENIZER, 512, {})
    s.draft_worker, s.draft_cached, s.target_cached = draft_worker, 5, 3
    return s


def cut(
    seqs: list[SequenceState],
    gained: list[list[int]],
    accepted: list[int],
    drafted: int = 3,
    failed: frozenset[int] = frozenset(),
    workers: tuple[int, ...] = (0, 1),
) -> dict[int, NextDrafts]:
    facts = ShareFacts.of(seqs)
    facts.drafted = [drafted] * len(seqs)
    flat = [t for tokens in gained for t in tokens]
    outputs = VerifyColumns([len(t) for t in gained], flat, accepted, failed, lambda: [])
    parts: dict[int, NextDrafts] = {}
    cut_next(facts, outputs, 3, workers, 512, into=parts)
    return parts


def asked(part: NextDrafts) -> list[tuple[int, int, list[int]]]:
    return [(r.tokens.seq_id, r.tokens.cached_len, r.tokens.token_ids) for r in part.batch]


def test_a_drafted_sequence_keeps_its_accepted_drafts_and_asks_for_the_rest() -> None:
    a, b = seq(), seq()
    parts = cut([a, b], gained=[[7, 8], [7, 7, 7, 9]], accepted=[1, 3])
    # a: 1 of its 3 drafts passed, then 8: the draft keeps 3 + 1, lacks the 8.
    # b: all 3 passed, then 9: it holds only the first 2 drafts, lacks 7 and 9.
    assert asked(parts[0]) == [(a.seq_id, 4, [8]), (b.seq_id, 5, [7, 9])]
    assert parts[0].num_tokens == [5, 7]  # their lengths once the tokens are appended
    assert parts[0].seqs == [a, b]


def test_a_sequence_not_drafted_for_also_asks_for_what_it_lacked_before() -> None:
    s = seq()
    s.draft_cached = 2  # (a round without drafts left it behind)
    parts = cut([s], gained=[[9]], accepted=[0], drafted=0)
    assert asked(parts[0]) == [(s.seq_id, 2, [3, 9])]


def test_sequences_that_surely_finish_or_failed_are_left_out() -> None:
    going = seq()
    by_length, by_stop_token = seq(max_tokens=2), seq(stop_token_ids=[8])
    failed = seq()
    parts = cut(
        [going, by_length, by_stop_token, failed],
        gained=[[7, 8]] * 4,
        accepted=[1] * 4,
        failed=frozenset({3}),
    )
    assert [r.tokens.seq_id for r in parts[0].batch] == [going.seq_id]


def test_a_sequence_whose_draft_worker_is_not_up_is_left_out() -> None:
    here, gone = seq(draft_worker=0), seq(draft_worker=1)
    parts = cut([here, gone], gained=[[9], [9]], accepted=[0, 0], workers=(0,))
    assert list(parts) == [0] and parts[0].seqs == [here]


def test_each_draft_worker_gets_its_own_sequences_with_their_samplings() -> None:
    a, b = seq(draft_worker=0), seq(draft_worker=1, temperature=0.7)
    parts = cut([a, b], gained=[[9], [9]], accepted=[0, 0])
    assert parts[0].seqs == [a] and parts[1].seqs == [b]
    assert [r.sampling for r in parts[0].batch] == [a.options]
    assert [r.sampling for r in parts[1].batch] == [b.options]


def test_a_sequence_short_of_min_tokens_is_asked_with_what_it_will_still_lack() -> None:
    s = seq(min_tokens=10, stop_token_ids=[8])
    parts = cut([s], gained=[[7, 9]], accepted=[1])
    (request,) = parts[0].batch
    assert request.sampling == s.sampling(2)
    assert request.sampling.min_tokens_left == 8


def test_two_shares_for_one_draft_worker_make_one_batch() -> None:
    a, b = seq(), seq(temperature=0.7)
    parts: dict[int, NextDrafts] = {}
    for s in (a, b):
        facts = ShareFacts.of([s])
        facts.drafted = [3]
        cut_next(facts, VerifyColumns([1], [9], [0], set(), lambda: []), 3, (0,), 512, parts)
    assert [(r.tokens.seq_id, r.sampling) for r in parts[0].batch] == [
        (a.seq_id, a.options),
        (b.seq_id, b.options),
    ]


def test_a_batch_in_columns_crosses_the_wire_as_its_requests_would() -> None:
    a, b = seq(), seq(temperature=0.7)
    columns = ProposeColumns([1, 2], [3, 4], [1, 2], [9, 7, 8], [a.options, b.options], [0, 1])
    requests = [
        ProposeRequest(SequenceTokens(1, 3, [9]), a.options),
        ProposeRequest(SequenceTokens(2, 4, [7, 8]), b.options),
    ]
    assert list(columns) == requests
    wire = convert.propose_batch_to_proto(5, columns, 3)
    assert wire == convert.propose_batch_to_proto(5, requests, 3)
    assert [r.tokens for r in convert.propose_batch_from_proto(wire)] == [
        r.tokens for r in requests
    ]


def test_verify_outputs_are_built_only_when_first_read_and_once() -> None:
    reads: list[int] = []

    def parse() -> list[VerifyOutput]:
        reads.append(1)
        return [VerifyOutput(1, OK, [9], 0)]

    lazy = VerifyColumns([1], [9], [0], set(), parse)
    assert lazy.token_ids == [9] and reads == []
    assert [o.token_ids for o in lazy] == [[9]] and lazy[0].seq_id == 1
    assert reads == [1]
