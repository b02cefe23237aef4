"""How a round calls its workers: the draft batches go out first, the verify
batches are prepared while the draft workers draft, and every worker of a
pool is sent to before any is waited on."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from transformers import AutoTokenizer

import specserve
from model_runtime.status import OK
from protos.messages import Proposal, ProposeRequest, VerifyOutput, VerifyRequest, WorkerInfo
from router.drafting import Drafter
from router.metrics import SpeculationMetrics
from router.params import SamplingParams
from router.pool import WorkerPool
from router.rounds import Rounds
from router.sequence import SequenceState, new_sequences
from router.verifying import Verifier

INFO = WorkerInfo("m", 512, 512, 16, 1024, 1024)


class SplitDraft:
    """A draft worker whose calls are sent and waited for apart, as over gRPC."""

    def __init__(self, name: str, events: list[str]):
        self.name, self.events, self.num_free_blocks = name, events, 1024

    def describe(self) -> WorkerInfo:
        return INFO

    def start_propose(
        self, requests: Sequence[ProposeRequest], k: int
    ) -> Callable[[], list[Proposal]]:
        self.events.append(f"send {self.name}")

        def wait() -> list[Proposal]:
            self.events.append(f"wait {self.name}")
            return [Proposal(r.tokens.seq_id, OK, [7] * k) for r in requests]

        return wait


class SplitTarget:
    """A target worker that accepts every draft, its calls split the same way."""

    def __init__(self, events: list[str]):
        self.events, self.num_free_blocks, self.vocab_size = events, 1024, 512
        self.sent: list[list[int]] = []

    def describe(self) -> WorkerInfo:
        return INFO

    def prepare_verify(
        self, requests: Sequence[VerifyRequest]
    ) -> Callable[[], Callable[[], list[VerifyOutput]]]:
        self.events.append("prepare verify")

        def send() -> Callable[[], list[VerifyOutput]]:
            self.events.append("send verify")
            self.sent = [list(r.draft_token_ids) for r in requests]
            return lambda: [
                VerifyOutput(r.tokens.seq_id, OK, [*r.draft_token_ids, 9], len(r.draft_token_ids))
                for r in requests
            ]

        return send


def running(num: int, num_drafts: int) -> list[SequenceState]:
    tokenizer = AutoTokenizer.from_pretrained(specserve.resolve_model("specserve/demo-target"))
    ids = itertools.count()
    seqs = []
    for i in range(num):
        params = SamplingParams(temperature=0, max_tokens=64)
        (seq,) = new_sequences(ids, f"r{i}", [1, 2, 3], params, tokenizer, 512, {})
        seq.target_worker, seq.target_cached, seq.draft_worker = 0, 3, i % num_drafts
        seqs.append(seq)
    return seqs


def one_round(num_drafts: int) -> tuple[list[str], SplitTarget]:
    events: list[str] = []
    drafts = WorkerPool([SplitDraft(f"draft {d}", events) for d in range(num_drafts)], "draft")
    target = SplitTarget(events)
    verifier = Verifier(WorkerPool([target], "target"), max_model_len=512)
    rounds = Rounds(Drafter(drafts, 3, overlap=False), verifier, SpeculationMetrics(3), None, False)
    rounds.run(running(4, num_drafts))
    return events, target


def test_a_round_prepares_its_verify_batch_while_the_draft_drafts() -> None:
    events, target = one_round(num_drafts=1)
    assert events == ["send draft 0", "prepare verify", "wait draft 0", "send verify"]
    assert target.sent == [[7, 7, 7]] * 4  # the drafts were filled in after preparing


def test_every_draft_worker_is_sent_its_batch_before_any_is_waited_on() -> None:
    events, _ = one_round(num_drafts=2)
    assert events[:2] == ["send draft 0", "send draft 1"]
    assert events[2:] == ["prepare verify", "wait draft 0", "wait draft 1", "send verify"]


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
