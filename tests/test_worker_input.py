"""Workers trust no caller: a malformed batch is INVALID_ARGUMENT, a bad
sequence gets its own status, and one call cannot hold more than the worker's
batch limits (the rest answer RESOURCE_EXHAUSTED, to be sent again)."""

from __future__ import annotations

import math
from collections.abc import Iterator

import grpc
import pytest
import torch

from model_runtime.sampling import SamplingOptions
from model_runtime.status import StatusCode
from protos import common_pb2 as pb
from protos import convert
from protos import target_worker_pb2 as tpb
from protos.draft_worker_pb2_grpc import DraftWorkerStub
from protos.messages import ProposeRequest, SequenceTokens, VerifyRequest
from protos.target_worker_pb2_grpc import TargetWorkerStub
from specserve.launch import service

VOCAB = 4096
LIMITS = ("--max-num-batched-tokens", "600", "--max-num-seqs", "4")
ARGS = ("--dtype", "float32", "--max-model-len", "512", "--num-kv-blocks", "256", *LIMITS)
GREEDY = SamplingOptions()


@pytest.fixture(scope="module")
def target() -> Iterator[TargetWorkerStub]:
    with (
        service("target-worker", "--model", "specserve/demo-target", *ARGS) as (address, _),
        grpc.insecure_channel(address) as channel,
    ):
        yield TargetWorkerStub(channel)


@pytest.fixture(scope="module")
def draft() -> Iterator[DraftWorkerStub]:
    with (
        service("draft-worker", "--model", "specserve/demo-draft", *ARGS) as (address, _),
        grpc.insecure_channel(address) as channel,
    ):
        yield DraftWorkerStub(channel)


def prefill(stub: TargetWorkerStub, *sequences: tuple[int, list[int]]) -> tpb.PrefillResult:
    """Prefill each (seq_id, prompt) greedily, in one batch."""
    requests = [VerifyRequest(SequenceTokens(i, 0, ids), GREEDY) for i, ids in sequences]
    (result,) = stub.Prefill(iter([convert.prefill_batch_to_proto(0, requests)]), timeout=60)
    return result


def test_a_sequence_twice_in_one_batch_is_an_invalid_argument(
    target: TargetWorkerStub, draft: DraftWorkerStub
) -> None:
    with pytest.raises(grpc.RpcError) as info:
        prefill(target, (1, [5, 6]), (1, [7]))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "appears twice" in str(info.value.details())
    proposals = [ProposeRequest(SequenceTokens(2, 0, [i]), GREEDY) for i in (5, 6)]
    batch = convert.propose_batch_to_proto(0, proposals, 2)
    with pytest.raises(grpc.RpcError) as info:
        list(draft.Propose(iter([batch]), timeout=30))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_a_batch_whose_columns_do_not_fit_together_is_an_invalid_argument(
    target: TargetWorkerStub,
) -> None:
    batch = convert.prefill_batch_to_proto(0, [VerifyRequest(SequenceTokens(3, 0, [5]), GREEDY)])
    batch.sequences.num_tokens[0] = 2
    with pytest.raises(grpc.RpcError) as info:
        list(target.Prefill(iter([batch]), timeout=30))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "1 tokens for counts adding up to 2" in str(info.value.details())


@pytest.mark.parametrize(
    ("drafts", "support", "probs", "problem"),
    [
        ([VOCAB + 5], None, None, "outside [0, 4096)"),
        ([5], [[VOCAB + 5]], [[1.0]], "token ids outside"),
        ([5], [[5, 6]], [[math.nan, 0.5]], "finite and >= 0"),
        ([5], [[5, 6]], [[1.5, -0.5]], "finite and >= 0"),
        ([5], [[5, 6]], [[0.9, 0.9]], "sum to more than 1"),
        ([5] * 500, None, None, "500 drafts"),
    ],
    ids=["draft token", "support", "nan", "negative", "over one", "too many"],
)
def test_bad_drafts_get_their_sequences_own_invalid_argument(
    target: TargetWorkerStub,
    drafts: list[int],
    support: list[list[int]] | None,
    probs: list[list[float]] | None,
    problem: str,
) -> None:
    assert prefill(target, (10, [5, 6, 7])).outputs[0].status.code == pb.SequenceStatus.OK
    good = VerifyRequest(SequenceTokens(11, 0, [8, 9]), GREEDY)
    bad = VerifyRequest(
        SequenceTokens(10, 3, [9]),
        GREEDY,
        drafts,
        None if support is None else torch.tensor(support),
        None if probs is None else torch.tensor(probs),
    )
    batch = convert.verify_batch_to_proto(0, [bad, good])
    (result,) = target.Verify(iter([batch]), timeout=60)
    statuses = convert.verify_result_from_proto(result, [bad, good])
    assert statuses[0].status.code == StatusCode.INVALID_ARGUMENT
    assert problem in statuses[0].status.message
    assert statuses[1].status.ok  # the batch went on without it
    target.Release(pb.ReleaseRequest(seq_ids=[10, 11]), timeout=10)


def test_one_call_holds_no_more_than_the_batch_limits(target: TargetWorkerStub) -> None:
    info = target.Describe(pb.DescribeRequest(), timeout=10)
    assert (info.max_num_batched_tokens, info.max_num_seqs) == (600, 4)
    # 200-token prompts: three fit the 600-token call, the rest must come again.
    many = [(100 + i, [5] * 200) for i in range(6)]
    codes = [o.status.code for o in prefill(target, *many).outputs]
    assert codes == [pb.SequenceStatus.OK] * 3 + [pb.SequenceStatus.RESOURCE_EXHAUSTED] * 3
    short = [(200 + i, [5]) for i in range(6)]
    codes = [o.status.code for o in prefill(target, *short).outputs]
    assert codes == [pb.SequenceStatus.OK] * 4 + [pb.SequenceStatus.RESOURCE_EXHAUSTED] * 2
    target.Release(pb.ReleaseRequest(seq_ids=[*range(100, 106), *range(200, 206)]), timeout=10)
    info = target.Describe(pb.DescribeRequest(), timeout=10)
    assert info.num_free_blocks == info.num_blocks


def test_a_batchs_distributions_are_checked_together_each_request_on_its_own() -> None:
    from target_worker.checks import draft_problems

    def request(ids: list[list[int]], probs: list[list[float]]) -> VerifyRequest:
        return VerifyRequest(
            SequenceTokens(1, 0, [3]), SamplingOptions(temperature=1.0), [5] * len(ids),
            torch.tensor(ids), torch.tensor(probs),
        )  # fmt: skip

    good = request([[5, 6], [7, 8]], [[0.5, 0.5], [0.9, 0.1]])
    wide = request([[5, 6, 7]], [[0.2, 0.2, 0.6]])  # another draft worker's top-N
    over = request([[5, 6, 7]], [[0.9, 0.9, 0.0]])
    outside = request([[5, 6], [VOCAB, 1]], [[0.5, 0.5], [0.5, 0.5]])
    greedy = VerifyRequest(SequenceTokens(2, 0, [3]), SamplingOptions(), [5])
    empty = request([[]], [[]])
    problems = draft_problems([good, wide, over, outside, greedy, empty], VOCAB)
    assert problems[0] is None and problems[1] is None and problems[4] is None
    assert "sum to more than 1" in str(problems[2])
    assert "token ids outside" in str(problems[3])
    assert "needs at least one token" in str(problems[5])


def test_distributions_drafted_in_this_process_are_not_read_back_to_be_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An in-process draft's tokens stay on the device (DeviceTokens); reading
    # its distributions back to check them would make a sampled round wait
    # before its verify. Only drafts that came over the wire are checked.
    from protos.messages import DeviceTokens, DraftedBatch
    from target_worker import checks

    read_back: list[int] = []
    row_flags = checks._row_flags
    monkeypatch.setattr(
        checks, "_row_flags", lambda ids, *a: read_back.append(len(ids)) or row_flags(ids, *a)
    )
    ids, probs = torch.tensor([[5, 6]]), torch.tensor([[0.5, 0.5]])
    sampled = SamplingOptions(temperature=1.0)
    local = DeviceTokens(DraftedBatch(torch.tensor([[5]])), 0, 1)
    in_process = VerifyRequest(SequenceTokens(1, 0, [3]), sampled, local, ids, probs)
    assert checks.draft_problems([in_process], VOCAB) == [None] and read_back == []
    wired = VerifyRequest(SequenceTokens(2, 0, [3]), sampled, [5], ids, probs)
    assert checks.draft_problems([in_process, wired], VOCAB) == [None, None]
    assert read_back == [1]  # the wired request's one row


def test_the_dense_q_of_a_batch_is_each_requests_own_q_in_order() -> None:
    from target_worker.drafts import dense_draft_probs
    from target_worker.rejection_sampler import densify

    sampled = SamplingOptions(temperature=1.0)
    narrow = VerifyRequest(
        SequenceTokens(1, 0, [3]), sampled, [5, 6],
        torch.tensor([[5, 9], [6, 2]]), torch.tensor([[0.7, 0.3], [0.6, 0.4]]),
    )  # fmt: skip
    wide = VerifyRequest(
        SequenceTokens(2, 0, [3]), sampled, [7],
        torch.tensor([[7, 1, 4]]), torch.tensor([[0.5, 0.25, 0.25]]),
    )  # fmt: skip
    no_drafts = VerifyRequest(SequenceTokens(3, 0, [3]), sampled)
    greedy = VerifyRequest(SequenceTokens(4, 0, [3]), SamplingOptions(), [8, 8])
    dense = dense_draft_probs([narrow, wide, no_drafts, greedy], 16, torch.device("cpu"))
    expected = torch.cat([
        densify(narrow.draft_ids, narrow.draft_probs, 16),  # type: ignore[arg-type]
        densify(wide.draft_ids, wide.draft_probs, 16),  # type: ignore[arg-type]
        densify(torch.tensor([[8], [8]]), torch.ones(2, 1), 16),
    ])  # fmt: skip
    assert torch.equal(dense, expected)
