"""Workers trust no caller: a malformed batch is INVALID_ARGUMENT, a bad
sequence gets its own status, and one call cannot hold more than the worker's
batch limits (the rest answer RESOURCE_EXHAUSTED, to be sent again)."""

from __future__ import annotations

import math
from collections.abc import Iterator

import grpc
import pytest

from protos import common_pb2 as pb
from protos import draft_worker_pb2 as dpb
from protos import target_worker_pb2 as tpb
from protos.draft_worker_pb2_grpc import DraftWorkerStub
from protos.target_worker_pb2_grpc import TargetWorkerStub
from specserve.launch import service

VOCAB = 4096
LIMITS = ("--max-num-batched-tokens", "600", "--max-num-seqs", "4")
ARGS = ("--dtype", "float32", "--max-model-len", "512", "--num-kv-blocks", "256", *LIMITS)


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


def tokens(seq_id: int, ids: list[int], cached_len: int = 0) -> pb.SequenceTokens:
    return pb.SequenceTokens(seq_id=seq_id, cached_len=cached_len, token_ids=ids)


def prefill(stub: TargetWorkerStub, *sequences: tpb.PrefillRequest) -> tpb.PrefillResult:
    (result,) = stub.Prefill(iter([tpb.PrefillBatch(sequences=sequences)]), timeout=60)
    return result


def verify(stub: TargetWorkerStub, *sequences: tpb.VerifyRequest) -> tpb.VerifyResult:
    (result,) = stub.Verify(iter([tpb.VerifyBatch(sequences=sequences)]), timeout=60)
    return result


def greedy() -> pb.SamplingParams:
    return pb.SamplingParams(temperature=0)


def test_a_sequence_twice_in_one_batch_is_an_invalid_argument(
    target: TargetWorkerStub, draft: DraftWorkerStub
) -> None:
    twice = [
        tpb.PrefillRequest(tokens=tokens(1, [5, 6])),
        tpb.PrefillRequest(tokens=tokens(1, [7])),
    ]
    with pytest.raises(grpc.RpcError) as info:
        prefill(target, *twice)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "appears twice" in str(info.value.details())
    proposals = [
        dpb.ProposeRequest(tokens=tokens(2, [5])),
        dpb.ProposeRequest(tokens=tokens(2, [6])),
    ]
    batch = dpb.ProposeBatch(num_draft_tokens=2, sequences=proposals)
    with pytest.raises(grpc.RpcError) as info:
        list(draft.Propose(iter([batch]), timeout=30))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def distribution(ids: list[int], probs: list[float]) -> pb.SparseDistribution:
    return pb.SparseDistribution(token_ids=ids, probs=probs)


@pytest.mark.parametrize(
    ("drafts", "distributions", "problem"),
    [
        ([VOCAB + 5], [], "outside [0, 4096)"),
        ([5], [distribution([VOCAB + 5], [1.0])], "token ids outside"),
        ([5], [distribution([5, 6], [math.nan, 0.5])], "finite and >= 0"),
        ([5], [distribution([5, 6], [1.5, -0.5])], "finite and >= 0"),
        ([5], [distribution([5, 6], [0.9, 0.9])], "sum to more than 1"),
        ([5] * 500, [], "500 drafts"),
    ],
    ids=["draft token", "support", "nan", "negative", "over one", "too many"],
)
def test_bad_drafts_get_their_sequences_own_invalid_argument(
    target: TargetWorkerStub, drafts: list[int], distributions: list, problem: str
) -> None:
    assert (
        prefill(target, tpb.PrefillRequest(tokens=tokens(10, [5, 6, 7]))).outputs[0].status.code
        == 0
    )
    good = tpb.VerifyRequest(tokens=tokens(11, [8, 9]), sampling=greedy())
    bad = tpb.VerifyRequest(
        tokens=tokens(10, [9], cached_len=3),
        draft_token_ids=drafts,
        draft_probs=distributions,
        sampling=greedy(),
    )
    statuses = [o.status for o in verify(target, bad, good).outputs]
    assert statuses[0].code == pb.SequenceStatus.INVALID_ARGUMENT
    assert problem in statuses[0].message
    assert statuses[1].code == pb.SequenceStatus.OK  # the batch went on without it
    target.Release(pb.ReleaseRequest(seq_ids=[10, 11]), timeout=10)


def test_one_call_holds_no_more_than_the_batch_limits(target: TargetWorkerStub) -> None:
    info = target.Describe(pb.DescribeRequest(), timeout=10)
    assert (info.max_num_batched_tokens, info.max_num_seqs) == (600, 4)
    # 200-token prompts: three fit the 600-token call, the rest must come again.
    many = [tpb.PrefillRequest(tokens=tokens(100 + i, [5] * 200)) for i in range(6)]
    codes = [o.status.code for o in prefill(target, *many).outputs]
    assert codes == [pb.SequenceStatus.OK] * 3 + [pb.SequenceStatus.RESOURCE_EXHAUSTED] * 3
    short = [tpb.PrefillRequest(tokens=tokens(200 + i, [5])) for i in range(6)]
    codes = [o.status.code for o in prefill(target, *short).outputs]
    assert codes == [pb.SequenceStatus.OK] * 4 + [pb.SequenceStatus.RESOURCE_EXHAUSTED] * 2
    target.Release(pb.ReleaseRequest(seq_ids=[*range(100, 106), *range(200, 206)]), timeout=10)
    info = target.Describe(pb.DescribeRequest(), timeout=10)
    assert info.num_free_blocks == info.num_blocks


def test_a_batchs_distributions_are_checked_together_each_request_on_its_own() -> None:
    import torch

    from model_runtime.sampling import SamplingOptions
    from protos.messages import SequenceTokens, VerifyRequest
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


def test_the_dense_q_of_a_batch_is_each_requests_own_q_in_order() -> None:
    import torch

    from model_runtime.sampling import SamplingOptions
    from protos.messages import SequenceTokens, VerifyRequest
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


def test_a_batchs_proposals_keep_their_own_distributions_on_the_wire() -> None:
    import torch

    from model_runtime.status import OK, SequenceStatus, StatusCode
    from protos import draft_worker_pb2 as dpb
    from protos.convert import proposals_from_proto, proposals_to_proto
    from protos.messages import Proposal

    ids = torch.tensor([[[5, 6], [7, 8]], [[1, 2], [3, 4]]])
    probs = torch.tensor([[[1.0, 0.0], [0.5, 0.5]], [[0.9, 0.1], [0.2, 0.8]]])
    proposals = [
        Proposal(1, OK, [5, 7], ids[0], probs[0]),
        Proposal(2, SequenceStatus(StatusCode.NOT_FOUND, "gone")),
        Proposal(3, OK, [1, 4], ids[1], probs[1]),
    ]
    wire, packed = proposals_to_proto(proposals)
    assert packed is not None and packed.rows == 4  # one message for the batch
    assert not any(m.HasField("packed_probs") for m in wire)
    result = dpb.ProposeResult(proposals=wire, packed_probs=packed)
    back = proposals_from_proto(dpb.ProposeResult.FromString(result.SerializeToString()))
    assert [p.seq_id for p in back] == [1, 2, 3] and back[1].draft_ids is None
    for p, b in ((back[0], 0), (back[2], 1)):
        assert torch.equal(p.draft_ids, ids[b]) and torch.equal(p.draft_probs, probs[b])  # type: ignore[arg-type]
