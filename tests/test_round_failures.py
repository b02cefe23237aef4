"""What a round does when a worker refuses, is lost or cannot be called:
its sequences are drafted for again where they run next, nothing it sent is
left unread, and no unverified draft is counted as kept."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from model_runtime.errors import WorkerUnavailableError
from model_runtime.status import SequenceStatus, StatusCode
from protos.messages import ProposeRequest, VerifyOutput, VerifyRequest
from router.drafting import Drafter
from router.metrics import SpeculationMetrics
from router.pool import WorkerPool
from router.rounds import Rounds
from router.verifying import Verifier
from tests.test_round_calls import SplitDraft, SplitTarget, Workers, running


def test_a_sequence_the_target_refused_is_drafted_for_when_it_runs_again() -> None:
    class RefusingOnce(SplitTarget):
        refused = False

        def prepare_verify(self, requests: Sequence[VerifyRequest]) -> Any:
            send = super().prepare_verify(requests)
            if self.refused:
                return send
            self.refused = True
            gone = SequenceStatus(StatusCode.NOT_FOUND, "not here")

            def refusing(wire: object = None) -> Callable[[], list[VerifyOutput]]:
                outputs = send(wire)()
                outputs[1] = VerifyOutput(outputs[1].seq_id, gone)
                return lambda: outputs

            return refusing

    workers = Workers(num_drafts=1)
    workers.target = RefusingOnce(workers.events)
    workers.rounds.verifier.pool = WorkerPool([workers.target], "target")
    seqs = running(2, 1)
    workers.round(seqs)  # (the engine requeues the refused one, and prefills it again)
    workers.round(seqs)
    assert workers.target.sent == [[7, 7, 7]] * 2


def test_a_sequence_whose_draft_worker_was_lost_is_drafted_on_another_in_its_next_round() -> None:
    workers = Workers(num_drafts=2)
    seqs = running(2, 2)  # one on each draft worker
    verify = workers.target.prepare_verify

    def losing_draft_1(requests: Sequence[VerifyRequest]) -> Any:
        workers.rounds.drafter.pool.lose(1, "gone")  # while the round verifies
        return verify(requests)

    workers.target.prepare_verify = losing_draft_1  # type: ignore[method-assign]
    workers.round(seqs)
    workers.target.prepare_verify = verify  # type: ignore[method-assign]
    workers.round(seqs)
    assert seqs[1].draft_worker == 0
    assert workers.target.sent == [[7, 7, 7]] * 2


def test_a_sequence_whose_target_was_lost_keeps_none_of_its_drafts_on_the_draft() -> None:
    class Lost(SplitTarget):
        def prepare_verify(self, requests: Sequence[VerifyRequest]) -> Any:
            def send(wire: object = None) -> Any:
                raise WorkerUnavailableError("target gone")

            return send

    workers = Workers(num_drafts=1)
    workers.rounds.verifier.pool = WorkerPool([Lost(workers.events)], "target")
    seqs = running(1, 1)
    shares = workers.rounds.run(seqs)
    assert isinstance(shares[0].outputs, WorkerUnavailableError)
    assert seqs[0].draft_cached == 3  # its 2 drafts kept were never verified


def test_a_round_that_fails_while_preparing_still_waits_for_the_drafts_it_sent() -> None:
    # A sent batch holds its worker's stream until its result is read: an
    # error in between must not leave the stream held for every later round.
    class Failing(SplitTarget):
        def prepare_verify(self, requests: Sequence[VerifyRequest]) -> Any:
            raise ValueError("cannot encode")

    events: list[str] = []
    drafts = WorkerPool([SplitDraft("draft 0", events)], "draft")
    verifier = Verifier(WorkerPool([Failing(events)], "target"), max_model_len=512)
    rounds = Rounds(Drafter(drafts, 3, overlap=False), verifier, SpeculationMetrics(3), None, False)
    with pytest.raises(ValueError, match="cannot encode"):
        rounds.run(running(2, 1))
    assert events == ["send draft 0", "wait draft 0"]


def test_a_draft_batch_that_cannot_be_sent_still_lets_the_ones_sent_be_read() -> None:
    class Unsendable(SplitDraft):
        def start_propose(self, requests: Sequence[ProposeRequest], k: int) -> Any:
            raise ValueError("cannot encode")

    events: list[str] = []
    pool = WorkerPool([SplitDraft("draft 0", events), Unsendable("draft 1", events)], "draft")
    with pytest.raises(ValueError, match="cannot encode"):
        Drafter(pool, 3, overlap=False).send(running(4, 2), 3)
    assert events == ["send draft 0", "wait draft 0"]
