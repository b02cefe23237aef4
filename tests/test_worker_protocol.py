"""The workers' gRPC protocol as a raw client meets it: health, descriptions,
a batch refused as a whole, and sequences failed one by one."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from model_runtime.sampling import SamplingOptions
from protos import common_pb2 as pb
from protos import draft_worker_pb2 as dpb
from protos import draft_worker_pb2_grpc, target_worker_pb2_grpc
from protos.messages import ProposeRequest, SequenceTokens
from router.grpc_clients import GrpcDraftClient


def test_workers_serve_health_and_refuse_a_bad_k(grpc_workers: tuple[str, str]) -> None:
    _, draft = grpc_workers
    for address in grpc_workers:
        with grpc.insecure_channel(address) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=10
            )
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
    with grpc.insecure_channel(draft) as channel:
        stub = draft_worker_pb2_grpc.DraftWorkerStub(channel)
        batch = dpb.ProposeBatch(
            num_draft_tokens=0,
            sequences=pb.SequenceBatch(
                seq_ids=[1],
                cached_lens=[0],
                num_tokens=[2],
                token_ids=[1, 2],
                samplings=[pb.SamplingParams()],
                sampling_index=[0],
            ),
        )
        with pytest.raises(grpc.RpcError) as info:
            list(stub.Propose(iter([batch]), timeout=10))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        # and it keeps serving
        assert stub.Describe(pb.DescribeRequest(), timeout=10).vocab_size == 4096


def test_each_worker_holds_the_max_model_len_it_was_started_with(
    grpc_workers: tuple[str, str],
) -> None:
    # Both bundled models allow 2048 tokens; the workers were started with 512.
    stubs = (target_worker_pb2_grpc.TargetWorkerStub, draft_worker_pb2_grpc.DraftWorkerStub)
    for address, stub in zip(grpc_workers, stubs, strict=True):
        with grpc.insecure_channel(address) as channel:
            assert stub(channel).Describe(pb.DescribeRequest(), timeout=10).max_model_len == 512


def test_a_worker_describes_how_its_forwards_ran(grpc_workers: tuple[str, str]) -> None:
    client = GrpcDraftClient(grpc_workers[1])
    before = client.describe().forwards
    greedy = SamplingOptions(temperature=0)
    client.propose([ProposeRequest(SequenceTokens(950, 0, [5, 6, 7]), greedy)], k=2)
    after = client.describe().forwards
    client.release([950])
    client.close()
    # On the CPU every forward is eager (no CUDA graphs to capture or replay).
    assert after.eager >= before.eager + 2  # the prompt and the second draft
    assert after.eager_s > before.eager_s
    assert (after.replayed, after.captured) == (0, 0)


def test_an_unknown_sequence_and_bad_tokens_get_their_own_status(
    grpc_workers: tuple[str, str],
) -> None:
    _, draft = grpc_workers
    with grpc.insecure_channel(draft) as channel:
        stub = draft_worker_pb2_grpc.DraftWorkerStub(channel)
        # 900 was never prefilled; 901 holds a token past the vocabulary; 902
        # appends nothing; 903 is well formed.
        batch = dpb.ProposeBatch(
            num_draft_tokens=2,
            sequences=pb.SequenceBatch(
                seq_ids=[900, 901, 902, 903],
                cached_lens=[5, 0, 0, 0],
                num_tokens=[1, 2, 0, 2],
                token_ids=[1, 1, 99999, 5, 6],
                samplings=[pb.SamplingParams(temperature=0)],
                sampling_index=[0, 0, 0, 0],
            ),
        )
        (result,) = list(stub.Propose(iter([batch]), timeout=30))
        assert {i: s.code for i, s in result.failed.items()} == {
            0: pb.SequenceStatus.NOT_FOUND,
            1: pb.SequenceStatus.INVALID_ARGUMENT,
            2: pb.SequenceStatus.INVALID_ARGUMENT,
        }
        assert list(result.drafts.num_drafts)[3] == 2
        stub.Release(pb.ReleaseRequest(seq_ids=[900, 901, 902, 903]), timeout=10)
