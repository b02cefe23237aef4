"""How a round calls its workers: the draft batches go out first, the verify
batches are prepared while the draft workers draft, every worker of a pool
is sent to before any is waited on, and the next round's drafts are asked
for as soon as the verify outputs come."""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Callable, Sequence

from transformers import AutoTokenizer

import specserve
from model_runtime.status import OK
from protos import common_pb2 as pb
from protos.columns import split
from protos.messages import Proposal, ProposeRequest, VerifyOutput, VerifyRequest, WorkerInfo
from router.adaptive import AdaptiveConfig, KChooser
from router.drafting import Drafter
from router.metrics import SpeculationMetrics
from router.params import SamplingParams
from router.pool import WorkerPool
from router.rounds import Rounds
from router.sequence import SequenceState, new_sequences
from router.verifying import Verifier

INFO = WorkerInfo("m", 512, 502, 16, 1024, 1024)


class SplitDraft:
    """A draft worker whose calls are sent and waited for apart, as over gRPC."""

    def __init__(self, name: str, events: list[str]):
        self.name, self.events, self.num_free_blocks = name, events, 1024
        self.asked: list[list[ProposeRequest]] = []  # each batch sent

    def describe(self) -> WorkerInfo:
        return INFO

    def start_propose(
        self, requests: Sequence[ProposeRequest], k: int
    ) -> Callable[[], list[Proposal]]:
        self.events.append(f"send {self.name}")
        self.asked.append(list(requests))

        def wait() -> list[Proposal]:
            self.events.append(f"wait {self.name}")
            return [Proposal(r.tokens.seq_id, OK, [7] * k) for r in requests]

        return wait


class SplitTarget:
    """A target worker that accepts every draft, its calls split the same way."""

    def __init__(self, events: list[str]):
        self.events, self.num_free_blocks, self.vocab_size = events, 1024, 512
        self.sent: list[list[int]] = []
        self.wires: list[object] = []  # the drafts each batch was sent with as they came

    def describe(self) -> WorkerInfo:
        return INFO

    def prepare_verify(
        self, requests: Sequence[VerifyRequest]
    ) -> Callable[[], Callable[[], list[VerifyOutput]]]:
        self.events.append("prepare verify")

        def send(wire: object = None) -> Callable[[], list[VerifyOutput]]:
            self.events.append("send verify")
            self.wires.append(wire)
            if isinstance(wire, pb.Drafts):  # the drafts as a draft worker sent them
                self.sent = split(wire.token_ids, wire.num_drafts)
            else:
                self.sent = [list(r.draft_token_ids) for r in requests]

            def wait() -> list[VerifyOutput]:
                self.events.append("wait verify")
                return [
                    VerifyOutput(
                        r.tokens.seq_id, OK, [*r.draft_token_ids, 9], len(r.draft_token_ids)
                    )
                    for r in requests
                ]

            return wait

        return send


def running(num: int, num_drafts: int, max_tokens: int = 64) -> list[SequenceState]:
    tokenizer = AutoTokenizer.from_pretrained(specserve.resolve_model("specserve/demo-target"))
    ids = itertools.count(secrets.randbits(32))
    seqs = []
    for i in range(num):
        params = SamplingParams(temperature=0, max_tokens=max_tokens)
        (seq,) = new_sequences(ids, f"r{i}", [1, 2, 3], params, tokenizer, 512, {})
        seq.target_worker, seq.target_cached, seq.draft_worker = 0, 3, i % num_drafts
        seqs.append(seq)
    return seqs


class Workers:
    """Rounds over split draft workers and one split target, and what they saw."""

    def __init__(self, num_drafts: int, chooser: KChooser | None = None):
        self.events: list[str] = []
        self.drafts = [SplitDraft(f"draft {d}", self.events) for d in range(num_drafts)]
        self.target = SplitTarget(self.events)
        verifier = Verifier(WorkerPool([self.target], "target"), max_model_len=512)
        drafter = Drafter(WorkerPool(self.drafts, "draft"), 3, overlap=False)
        self.rounds = Rounds(drafter, verifier, SpeculationMetrics(3), chooser, False)

    def round(self, seqs: list[SequenceState]) -> list[str]:
        """Run a round and apply its outputs as the engine does; the events it caused."""
        self.events.clear()
        shares = self.rounds.run(seqs)
        for share in shares:
            assert isinstance(share.outputs, list)
            for seq, out in zip(share.seqs, share.outputs, strict=True):
                seq.target_cached = seq.num_tokens + out.num_accepted_drafts
                seq.append(out.token_ids)
        return list(self.events)


def test_a_round_prepares_its_verify_batch_while_the_draft_drafts() -> None:
    workers = Workers(num_drafts=1)
    events = workers.round(running(4, 1))
    assert events[:4] == ["send draft 0", "prepare verify", "wait draft 0", "send verify"]
    assert workers.target.sent == [[7, 7, 7]] * 4  # the drafts were filled in after preparing


def test_every_draft_worker_is_sent_its_batch_before_any_is_waited_on() -> None:
    events = Workers(num_drafts=2).round(running(4, 2))
    assert events[:2] == ["send draft 0", "send draft 1"]
    assert events[2:5] == ["prepare verify", "wait draft 0", "wait draft 1"]


def test_the_next_rounds_drafts_are_asked_for_as_soon_as_the_outputs_come() -> None:
    workers = Workers(num_drafts=1)
    seqs = running(2, 1)
    events = workers.round(seqs)
    assert events[3:] == ["send verify", "wait verify", "send draft 0"]
    # Each sequence had 3 tokens and the draft 3 + 2 drafts; all 3 drafts
    # passed, and 9 followed: the draft lacks the last draft and the 9.
    ahead = workers.drafts[0].asked[-1]
    assert [(r.tokens.cached_len, r.tokens.token_ids) for r in ahead] == [(5, [7, 9])] * 2
    assert [s.output_ids for s in seqs] == [[7, 7, 7, 9]] * 2  # applied after sending


def test_a_round_uses_the_drafts_sent_ahead_without_asking_again() -> None:
    workers = Workers(num_drafts=1)
    seqs = running(2, 1)
    workers.round(seqs)
    events = workers.round(seqs)
    assert events == [
        *["prepare verify", "wait draft 0", "send verify", "wait verify", "send draft 0"]
    ]
    assert workers.target.sent == [[7, 7, 7]] * 2


def test_a_sequence_that_surely_finishes_is_not_drafted_ahead() -> None:
    workers = Workers(num_drafts=1)
    seqs = running(1, 1, max_tokens=6) + running(1, 1, max_tokens=4)  # 4 tokens a round
    workers.round(seqs)
    assert [r.tokens.seq_id for r in workers.drafts[0].asked[-1]] == [seqs[0].seq_id]


def test_a_sequence_admitted_after_the_drafts_went_ahead_is_drafted_in_its_first_round() -> None:
    workers = Workers(num_drafts=1)
    first, later = running(1, 1), running(1, 1)
    workers.round(first)
    events = workers.round(first + later)
    assert events[:3] == ["wait draft 0", "send draft 0", "prepare verify"]
    assert [r.tokens.seq_id for r in workers.drafts[0].asked[-2]] == [later[0].seq_id]
    assert workers.target.sent == [[7, 7, 7]] * 2


def test_a_sequence_admitted_late_goes_to_the_draft_worker_the_others_load_least() -> None:
    workers = Workers(num_drafts=2)
    first, later = running(2, 1), running(1, 1)  # the first two on draft 0
    later[0].draft_worker = -1  # new: not placed yet
    workers.round(first)
    workers.round(first + later)
    assert later[0].draft_worker == 1


def test_a_sequence_too_long_to_draft_for_does_not_hold_the_drafts_sent_ahead_back() -> None:
    workers = Workers(num_drafts=1)
    short, long = running(1, 1), running(1, 1)
    long[0].prompt_ids = list(range(501))  # 501 + 2 drafts kept > the draft's 502
    long[0].num_tokens = long[0].target_cached = 501
    long[0].draft_worker = -1  # (never placed on a draft worker: too long from the start)
    workers.round(short + long)
    events = workers.round(short + long)
    assert events[:2] == ["prepare verify", "wait draft 0"]  # nothing sent late
    assert workers.target.sent == [[7, 7, 7], []]


def test_drafts_sent_ahead_with_no_round_to_go_to_are_waited_for() -> None:
    workers = Workers(num_drafts=1)
    workers.round(running(1, 1))
    workers.events.clear()
    workers.rounds.drop_ahead()
    assert workers.events == ["wait draft 0"]


def test_drafts_sent_ahead_for_a_sequence_a_stop_string_ended_are_not_left_in_flight() -> None:
    # A stop string is not foreseen: the last sequence's next drafts went
    # ahead, and with nothing left running the engine waits for them at once.
    spec = {"model": "specserve/demo-draft", "num_speculative_tokens": 3}
    llm = specserve.LLM(
        "specserve/demo-target", dtype="float32", max_model_len=256, speculative_config=spec
    )
    params = SamplingParams(temperature=0, max_tokens=64, stop=["\n"])
    (out,) = llm.generate(["def f(x):"], params, use_tqdm=False)
    assert out.outputs[0].stop_reason == "\n"
    assert not llm.engine.rounds.drafts_in_flight


def test_a_sequence_admitted_late_is_not_held_to_the_k_cut_short_for_the_others() -> None:
    # The drafts sent ahead were cut to what a sequence 2 tokens from its end keeps.
    chooser = KChooser(3, AdaptiveConfig(time_first=1, time_every=1000, probe_every=10**9))
    chooser.best = lambda batch, mix=None: 3  # type: ignore[method-assign]
    workers = Workers(num_drafts=1, chooser=chooser)
    ending, later = running(1, 1, max_tokens=6), running(1, 1)
    workers.round(ending)  # 4 tokens: 2 left
    workers.round(ending + later)
    assert workers.target.sent == [[7], [7, 7, 7]]
