"""An in-process draft's tokens stay on the device from drafting into the
verify: counted and cut without being read, and verified exactly as the same
tokens sent as a list."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from model_runtime.random_checkpoint import save_random_checkpoint
from model_runtime.sampling import SamplingOptions
from protos.messages import DeviceTokens, DraftedBatch, SequenceTokens, VerifyRequest
from router.acceptance import GREEDY
from router.adaptive import AdaptiveConfig, KChooser
from router.drafting import Drafts
from router.metrics import SpeculationMetrics
from router.rounds import Rounds
from specserve import LLM

PROMPT = [5, 6, 7, 8, 9]


def test_count_and_prefix_need_no_read_back_and_values_read_the_batch_once() -> None:
    batch = DraftedBatch(torch.tensor([[1, 2, 3], [4, 5, 6]]))
    first, second = DeviceTokens(batch, 0, 3), DeviceTokens(batch, 1, 3)
    cut = second[:2]
    assert len(first) == 3 and isinstance(cut, DeviceTokens) and cut.tensor.tolist() == [4, 5]
    assert not batch.on_host
    assert list(first) == [1, 2, 3] and batch.on_host
    assert list(cut) == [4, 5] and second[-1] == 6


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> object:
    folder = save_random_checkpoint(tmp_path_factory.mktemp("ckpt") / "m", seed=0)
    llm = LLM(str(folder), dtype="float32", max_model_len=128)
    return llm.engine.workers.target


def verify(target: object, seq_id: int, drafts: list[int], on_device: bool, greedy: bool) -> list:
    """Prefill ``seq_id`` with PROMPT, then verify ``drafts`` after its first token."""
    options = SamplingOptions(temperature=0.0 if greedy else 1.0, seed=3)
    (first,) = target.prefill([VerifyRequest(SequenceTokens(seq_id, 0, PROMPT), options)])  # type: ignore[attr-defined]
    tokens = drafts
    if on_device:
        tokens = DeviceTokens(DraftedBatch(torch.tensor([drafts])), 0, len(drafts))  # type: ignore[assignment]
    request = VerifyRequest(SequenceTokens(seq_id, len(PROMPT), first.token_ids), options, tokens)
    (out,) = target.verify([request])  # type: ignore[attr-defined]
    assert not on_device or not tokens.batch.on_host  # type: ignore[attr-defined]
    return [out.token_ids, out.num_accepted_drafts]


@pytest.mark.parametrize("greedy", [True, False])
def test_drafts_on_the_device_verify_as_the_same_drafts_in_a_list(
    target: object, greedy: bool
) -> None:
    # The target's own greedy continuation: every draft passes, up to a point.
    plain = verify(target, 1, [0, 0, 0], on_device=False, greedy=True)
    own = [plain[0][0], 11, 12]
    assert verify(target, 2, own, False, greedy) == verify(target, 3, own, True, greedy)


def test_a_device_draft_outside_the_targets_vocabulary_is_rejected(target: object) -> None:
    vocab = target.vocab_size  # type: ignore[attr-defined]
    tokens, accepted = verify(target, 4, [vocab + 5, 1], on_device=True, greedy=True)
    assert accepted == 0 and len(tokens) == 1 and 0 <= tokens[0] < vocab


def test_only_timed_rounds_read_the_drafts_back_before_verifying() -> None:
    batches: list[DraftedBatch] = []

    def propose(seqs: list, k: int) -> dict:
        batches.append(DraftedBatch(torch.zeros(len(seqs), k, dtype=torch.int64)))
        return {s.seq_id: (DeviceTokens(batches[-1], i, k), None, None) for i, s in enumerate(seqs)}

    seq = SimpleNamespace(
        seq_id=1,
        num_tokens=70,
        draft_cached=69,
        options=SamplingOptions(),
        acceptance_kind=GREEDY,
        room=100,
    )
    chooser = KChooser(3, AdaptiveConfig(time_first=1, time_every=4))
    chooser.pin(3)
    drafter = SimpleNamespace(
        k=3, send=lambda seqs, k: (seqs, k), receive=lambda plan, seqs: Drafts.of(propose(*plan))
    )
    verifier = SimpleNamespace(
        prepare=lambda seqs, note_next=False: [], send=lambda prepared, drafts: []
    )
    rounds = Rounds(drafter, verifier, SpeculationMetrics(3), chooser, overlap=False)  # type: ignore[arg-type]
    for _ in range(4):
        rounds.run([seq])  # type: ignore[list-item]
    assert [b.on_host for b in batches] == [True, False, True, False]
    assert chooser.draft_step_s.count(1) == 2  # priced from the timed rounds only
