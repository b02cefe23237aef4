"""Drafts that came from a draft worker over the wire go to a target over
the wire as they came, when one batch drafted exactly a verify batch's
sequences: no message per sequence is read or written on the round's path.
Otherwise each request carries its own drafts, as before."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from model_runtime.sampling import SamplingOptions
from model_runtime.status import OK, SequenceStatus, StatusCode
from protos import convert
from protos.messages import Proposal, ProposeRequest, SequenceTokens
from router.drafting import Drafter
from router.metrics import SpeculationMetrics
from router.pool import WorkerPool
from router.rounds import Rounds
from router.verifying import Verifier
from tests.test_round_calls import SplitDraft, SplitTarget, running


class WireDraft(SplitDraft):
    """A draft worker whose results cross the wire's encoding, as a gRPC client's do."""

    def __init__(self, events: list[str], lost: int | None = None):
        super().__init__("draft 0", events)
        self.lost = lost  # the index of a sequence the worker does not hold

    def start_propose(
        self, requests: Sequence[ProposeRequest], k: int
    ) -> Callable[[], Sequence[Proposal]]:
        wait = super().start_propose(requests, k)

        def parsed() -> Sequence[Proposal]:
            proposals = wait()
            if self.lost is not None:
                gone = SequenceStatus(StatusCode.NOT_FOUND, "not here")
                proposals[self.lost] = Proposal(proposals[self.lost].seq_id, gone)
            wire = convert.propose_result_to_proto(1, proposals, 1024)
            return convert.propose_result_from_proto(wire, requests)

        return parsed


def one_round(
    num: int = 3, max_model_len: int = 512, lost: int | None = None
) -> tuple[SplitTarget, Rounds]:
    events: list[str] = []
    target = SplitTarget(events)
    verifier = Verifier(WorkerPool([target], "target"), max_model_len)
    drafter = Drafter(WorkerPool([WireDraft(events, lost)], "draft"), 3, overlap=False)
    rounds = Rounds(drafter, verifier, SpeculationMetrics(3), None, False)
    shares = rounds.run(running(num, 1))
    assert [len(r.draft_token_ids) for r in shares[0].requests] == [
        len(drafts) for drafts in target.sent
    ]  # each request holds its drafts too (the engine counts them)
    return target, rounds


def test_a_batch_drafted_whole_goes_to_the_target_as_it_came() -> None:
    target, _ = one_round()
    assert target.wires[0] is not None
    assert target.sent == [[7, 7, 7]] * 3


def test_drafts_that_must_be_cut_go_in_each_request() -> None:
    target, _ = one_round(max_model_len=6)  # 3 tokens + 3 drafts + 1 would pass it
    assert target.wires == [None]
    assert target.sent == [[7, 7]] * 3


def test_a_batch_with_a_sequence_the_draft_lost_goes_in_each_request() -> None:
    target, _ = one_round(lost=1)
    assert target.wires == [None]
    assert target.sent == [[7, 7, 7], [], [7, 7, 7]]


REQUEST = ProposeRequest(SequenceTokens(5, 0, [1]), SamplingOptions())


def test_proposals_from_the_wire_give_their_counts_and_read_as_proposals() -> None:
    wire = convert.propose_result_to_proto(1, [Proposal(5, OK, [1, 2])], 8)
    columns = convert.propose_result_from_proto(wire, [REQUEST])
    assert columns.num_drafts == [2] and columns.seq_ids == [5]
    assert list(columns) == [Proposal(5, OK, [1, 2])]


def test_a_malformed_drafts_batch_is_refused_when_it_comes_not_when_read() -> None:
    wire = convert.propose_result_to_proto(1, [Proposal(5, OK, [1, 2])], 8)
    wire.drafts.num_drafts[0] = 3  # more drafts counted than sent
    with pytest.raises(ValueError, match="2 tokens for counts adding up to 3"):
        convert.propose_result_from_proto(wire, [REQUEST])
