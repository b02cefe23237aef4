"""The wire contract: committed stubs match the .proto files, the services and
messages later issues build on exist, and every server answers the standard
health and reflection services."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from model_runtime.sampling import SamplingOptions
from protos import (
    common_pb2,
    convert,
    distributions,
    draft_worker_pb2_grpc,
    router_pb2,
    target_worker_pb2,
)
from protos.generate import PROTO_DIR, generate
from protos.messages import (
    SequenceStatus,
    SequenceTokens,
    TokenLogprob,
    VerifyOutput,
    VerifyRequest,
)
from protos.server import start_server


def test_committed_stubs_match_the_proto_files(tmp_path: Path) -> None:
    fresh = generate(tmp_path)
    assert fresh, "grpcio-tools produced no stubs"
    for path in fresh:
        committed = PROTO_DIR / path.name
        assert committed.is_file(), f"{path.name} is not committed; run python -m protos.generate"
        assert committed.read_text() == path.read_text(), (
            f"{path.name} is stale; run python -m protos.generate and commit the result"
        )


def test_services_have_the_streaming_shapes_of_the_design() -> None:
    def methods(module: object, service: str) -> dict[str, tuple[bool, bool]]:
        desc = module.DESCRIPTOR.services_by_name[service]  # type: ignore[attr-defined]
        return {m.name: (m.client_streaming, m.server_streaming) for m in desc.methods}

    assert methods(router_pb2, "Router") == {
        "Generate": (False, True),
        "Abort": (False, False),
        "Describe": (False, False),
    }
    assert methods(target_worker_pb2, "TargetWorker") == {
        "Prefill": (True, True),
        "Verify": (True, True),
        "Release": (False, False),
        "Describe": (False, False),
    }
    from protos import draft_worker_pb2

    assert methods(draft_worker_pb2, "DraftWorker") == {
        "Propose": (True, True),
        "Release": (False, False),
        "Describe": (False, False),
    }


def test_sparse_distributions_round_trip() -> None:
    q = common_pb2.SparseDistribution(token_ids=[5, 9, 2], probs=[0.5, 0.25, 0.25])
    again = common_pb2.SparseDistribution.FromString(q.SerializeToString())
    assert list(again.token_ids) == [5, 9, 2] and list(again.probs) == [0.5, 0.25, 0.25]


def test_a_batchs_draft_distributions_cross_the_wire_in_one_packed_message() -> None:
    import torch

    ids = torch.tensor([[7, 3, 1], [4, 8, 2], [6, 5, 0]])
    probs = torch.tensor([[0.5, 0.5, 0.0], [0.25, 0.25, 0.5], [1.0, 0.0, 0.0]])
    requests = [
        VerifyRequest(SequenceTokens(4, 2, [9]), SamplingOptions(), [7, 8], ids[:2], probs[:2]),
        VerifyRequest(SequenceTokens(5, 0, [1, 2]), SamplingOptions()),  # a prefill's share
        VerifyRequest(SequenceTokens(6, 3, [3]), SamplingOptions(), [6], ids[2:], probs[2:]),
    ]
    wire = convert.verify_batch_to_proto(1, requests)
    assert wire.packed_probs.rows == 3
    assert not any(r.HasField("packed_probs") or r.draft_probs for r in wire.sequences)
    again = convert.verify_batch_from_proto(
        target_worker_pb2.VerifyBatch.FromString(wire.SerializeToString())
    )
    assert again[1].draft_ids is None
    for back, sent in ((again[0], requests[0]), (again[2], requests[2])):
        assert torch.equal(back.draft_ids, sent.draft_ids)  # type: ignore[arg-type]
        assert torch.equal(back.draft_probs, sent.draft_probs)  # type: ignore[arg-type]


def test_a_batch_whose_packed_rows_miss_drafts_is_refused() -> None:
    import torch

    request = VerifyRequest(
        SequenceTokens(4, 2, [9]), SamplingOptions(), [7, 8], torch.tensor([[7], [8]]),
        torch.ones(2, 1),
    )  # fmt: skip
    wire = convert.verify_batch_to_proto(1, [request])
    wire.sequences[0].draft_token_ids.append(5)  # three drafts, two rows
    with pytest.raises(ValueError, match="2 rows for 3 drafts"):
        convert.verify_batch_from_proto(wire)


def test_sparse_rows_are_still_read_and_padded_with_zeros() -> None:
    import torch

    rows = [
        common_pb2.SparseDistribution(token_ids=[7, 3], probs=[0.5, 0.5]),
        common_pb2.SparseDistribution(token_ids=[4, 8, 2], probs=[0.25, 0.25, 0.5]),
    ]
    wire = target_worker_pb2.VerifyRequest(draft_token_ids=[7, 8], draft_probs=rows)
    (again,) = convert.verify_batch_from_proto(target_worker_pb2.VerifyBatch(sequences=[wire]))
    assert again.draft_probs is not None and again.draft_ids is not None
    assert torch.equal(again.draft_probs, torch.tensor([[0.5, 0.5, 0.0], [0.25, 0.25, 0.5]]))
    assert torch.equal(again.draft_ids[1], torch.tensor([4, 8, 2]))
    assert distributions.distributions_from_proto([]) == (None, None)


def test_a_request_cut_to_no_drafts_crosses_the_wire_without_distributions() -> None:
    import torch

    # The verifier cuts drafts at max_model_len: k = 0 leaves [0, N] tensors.
    request = VerifyRequest(
        SequenceTokens(4, 2, [9]), SamplingOptions(), [], torch.zeros(0, 4, dtype=torch.int64),
        torch.zeros(0, 4),
    )  # fmt: skip
    wire = convert.verify_batch_to_proto(1, [request])
    assert not wire.HasField("packed_probs") and not wire.sequences[0].HasField("packed_probs")
    (again,) = convert.verify_batch_from_proto(wire)
    assert again.draft_token_ids == [] and again.draft_ids is None


def test_packed_distributions_of_the_wrong_size_are_refused() -> None:
    short = common_pb2.PackedDistributions(rows=2, width=3, token_ids=b"\0" * 24, probs=b"\0" * 20)
    with pytest.raises(ValueError, match="need 24 bytes of token ids and of probs, got 24 and 20"):
        distributions.unpack_distributions(short)


def test_a_distribution_with_unequal_ids_and_probs_is_refused() -> None:
    bad = common_pb2.SparseDistribution(token_ids=[1, 2], probs=[1.0])
    with pytest.raises(ValueError, match="2 token ids but 1 probs"):
        distributions.distributions_from_proto([bad])


def test_logprobs_and_sampling_options_survive_the_wire() -> None:
    chosen = TokenLogprob(7, -0.25, 2, [3, 7], [-0.125, -0.25])
    prompt = [TokenLogprob(1, -1.5, 4), TokenLogprob(2, -0.5, 1, [2], [-0.5])]
    output = VerifyOutput(11, SequenceStatus(), [7, 8], 1, [chosen, TokenLogprob(8, -2.0, 9)])
    again = convert.verify_output_from_proto(
        target_worker_pb2.VerifyOutput.FromString(
            convert.verify_output_to_proto(output).SerializeToString()
        )
    )
    assert again == output
    prefill = VerifyOutput(11, SequenceStatus(), [7], 0, [chosen], prompt)
    assert convert.prefill_output_from_proto(convert.prefill_output_to_proto(prefill)) == prefill
    options = SamplingOptions(temperature=0.5, top_k=4, seed=3, logprobs=0, prompt_logprobs=20)
    assert convert.sampling_from_proto(convert.sampling_to_proto(options)) == options
    plain = SamplingOptions()
    assert convert.sampling_from_proto(convert.sampling_to_proto(plain)) == plain


@pytest.fixture
def server():  # type: ignore[no-untyped-def]
    running = start_server(
        [
            (
                draft_worker_pb2_grpc.add_DraftWorkerServicer_to_server,
                draft_worker_pb2_grpc.DraftWorkerServicer(),
                "specserve.v1.DraftWorker",
            )
        ]
    )
    yield running
    running.stop(grace_s=0)


def test_every_server_answers_health_checks(server) -> None:  # type: ignore[no-untyped-def]
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for name in ("", "specserve.v1.DraftWorker"):
            reply = health.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        server.set_serving(False)
        reply = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING


def test_every_server_lists_its_services_by_reflection(server) -> None:  # type: ignore[no-untyped-def]
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        reply = next(stub.ServerReflectionInfo(iter([request]), timeout=5))
        names = {s.name for s in reply.list_services_response.service}
    assert {"specserve.v1.DraftWorker", "grpc.health.v1.Health"} <= names


def test_a_batch_with_distributions_both_packed_and_per_sequence_is_refused() -> None:
    import torch

    request = VerifyRequest(
        SequenceTokens(4, 2, [9]), SamplingOptions(), [7], torch.tensor([[7]]), torch.ones(1, 1)
    )
    wire = convert.verify_batch_to_proto(1, [request])
    wire.sequences[0].draft_probs.append(common_pb2.SparseDistribution(token_ids=[7], probs=[1]))
    with pytest.raises(ValueError, match="both packed for the batch and with a sequence"):
        convert.verify_batch_from_proto(wire)
