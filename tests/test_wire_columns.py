"""A batch crosses the wire as one message of columns: what goes in comes
out, the distributions of the whole batch travel packed together, and a
message whose columns do not fit together is refused."""

from __future__ import annotations

import pytest
import torch

from model_runtime.sampling import SamplingOptions
from model_runtime.status import SequenceStatus, StatusCode
from protos import common_pb2, convert, distributions
from protos import draft_worker_pb2 as dpb
from protos import target_worker_pb2 as tpb
from protos.fields import sampling_from_proto, sampling_to_proto
from protos.messages import (
    Proposal,
    ProposeRequest,
    SequenceTokens,
    TokenLogprob,
    VerifyOutput,
    VerifyRequest,
)
from router.params import SamplingParams
from router.wire import generate_request, params_from_request

GREEDY, SAMPLED = SamplingOptions(), SamplingOptions(temperature=0.75, top_p=0.5)


def crossed(message):  # type: ignore[no-untyped-def]
    """``message`` as the receiver parses it."""
    return type(message).FromString(message.SerializeToString())


def test_a_batchs_sequences_cross_in_one_message_with_each_sampling_sent_once() -> None:
    requests = [
        ProposeRequest(SequenceTokens(4, 2, [9, 10]), SAMPLED),
        ProposeRequest(SequenceTokens(5, 0, []), GREEDY),
        ProposeRequest(SequenceTokens(6, 7, [3]), SAMPLED),
    ]
    wire = crossed(convert.propose_batch_to_proto(1, requests, 4))
    assert len(wire.sequences.samplings) == 2
    assert convert.propose_batch_from_proto(wire) == requests


def test_a_batchs_draft_distributions_travel_packed_together_padded_to_the_widest() -> None:
    ids = torch.tensor([[7, 3, 1], [4, 8, 2]])
    probs = torch.tensor([[0.5, 0.5, 0.0], [0.25, 0.25, 0.5]])
    narrow_ids, narrow_probs = torch.tensor([[6, 5]]), torch.tensor([[0.75, 0.25]])
    requests = [
        VerifyRequest(SequenceTokens(4, 2, [9]), SAMPLED, [7, 8], ids, probs),
        VerifyRequest(SequenceTokens(5, 0, [1, 2]), SAMPLED),  # a prefill's share
        VerifyRequest(SequenceTokens(7, 1, [2]), GREEDY, [4, 4]),  # greedy: q is one-hot
        VerifyRequest(SequenceTokens(6, 3, [3]), SAMPLED, [6], narrow_ids, narrow_probs),
    ]
    wire = crossed(convert.verify_batch_to_proto(1, requests))
    assert (wire.drafts.probs.rows, wire.drafts.probs.width) == (3, 3)
    again = convert.verify_batch_from_proto(wire)
    assert [r.draft_token_ids for r in again] == [[7, 8], [], [4, 4], [6]]
    assert again[1].draft_ids is None and again[2].draft_ids is None
    assert torch.equal(again[0].draft_ids, ids)  # type: ignore[arg-type]
    assert torch.equal(again[3].draft_ids, torch.tensor([[6, 5, 0]]))  # type: ignore[arg-type]
    assert torch.equal(again[3].draft_probs, torch.tensor([[0.75, 0.25, 0.0]]))  # type: ignore[arg-type]


def test_a_request_cut_to_no_drafts_crosses_without_distributions() -> None:
    # The verifier cuts drafts at max_model_len: k = 0 leaves [0, N] tensors.
    none = torch.zeros(0, 4, dtype=torch.int64)
    request = VerifyRequest(SequenceTokens(4, 2, [9]), SAMPLED, [], none, torch.zeros(0, 4))
    wire = crossed(convert.verify_batch_to_proto(1, [request]))
    assert not wire.drafts.HasField("probs")
    (again,) = convert.verify_batch_from_proto(wire)
    assert again.draft_token_ids == [] and again.draft_ids is None


def test_drafts_with_distributions_of_another_count_are_not_sent() -> None:
    request = VerifyRequest(
        SequenceTokens(4, 2, [9]), SAMPLED, [7, 8], torch.tensor([[7]]), torch.ones(1, 1)
    )
    with pytest.raises(ValueError, match="2 drafts need"):
        convert.verify_batch_to_proto(1, [request])


def test_packed_rows_that_miss_drafts_are_refused() -> None:
    request = VerifyRequest(
        SequenceTokens(4, 2, [9]), SAMPLED, [7, 8], torch.tensor([[7], [8]]), torch.ones(2, 1)
    )
    wire = convert.verify_batch_to_proto(1, [request])
    wire.drafts.num_drafts[0] = 3
    wire.drafts.token_ids.append(5)  # three drafts, two rows
    with pytest.raises(ValueError, match="2 distributions for 3 sampled drafts"):
        convert.verify_batch_from_proto(wire)


def test_packed_distributions_of_the_wrong_size_are_refused() -> None:
    short = common_pb2.PackedDistributions(rows=2, width=3, token_ids=b"\0" * 24, probs=b"\0" * 20)
    with pytest.raises(ValueError, match="need 24 bytes of token ids and of probs, got 24 and 20"):
        distributions.unpack_distributions(short)


@pytest.mark.parametrize(
    ("column", "error"),
    [
        ("cached_lens", "cached_lens has 1 entries for 2 sequences"),
        ("num_tokens", "2 tokens for counts adding up to 3"),
        ("sampling_index", "sampling_index beyond the batch's 1 samplings"),
    ],
)
def test_a_batch_whose_columns_do_not_fit_together_is_refused(column: str, error: str) -> None:
    requests = [ProposeRequest(SequenceTokens(i, 0, [5]), GREEDY) for i in (1, 2)]
    wire = convert.propose_batch_to_proto(1, requests, 2)
    if column == "cached_lens":
        del wire.sequences.cached_lens[0]
    else:
        getattr(wire.sequences, column)[0] += 1
    with pytest.raises(ValueError, match=error):
        convert.propose_batch_from_proto(wire)


def test_only_the_sequences_that_failed_carry_a_status() -> None:
    lost = SequenceStatus(StatusCode.NOT_FOUND, "no KV for sequence 5")
    proposals = [Proposal(4, SequenceStatus(), [7, 8]), Proposal(5, lost)]
    wire = crossed(convert.propose_result_to_proto(1, proposals, 10))
    assert dict(wire.failed).keys() == {1}
    requests = [ProposeRequest(SequenceTokens(i, 0, [5]), GREEDY) for i in (4, 5)]
    assert convert.propose_result_from_proto(wire, requests) == proposals


def test_a_result_for_another_number_of_sequences_is_refused() -> None:
    proposals = [Proposal(4, SequenceStatus(), [7, 8])]
    wire = convert.propose_result_to_proto(1, proposals, 10)
    requests = [ProposeRequest(SequenceTokens(i, 0, [5]), GREEDY) for i in (4, 5)]
    with pytest.raises(ValueError, match="num_drafts has 1 entries for 2 sequences"):
        convert.propose_result_from_proto(wire, requests)


def test_logprobs_and_sampling_options_survive_the_wire() -> None:
    chosen = TokenLogprob(7, -0.25, 2, [3, 7], [-0.125, -0.25])
    prompt = [TokenLogprob(1, -1.5, 4), TokenLogprob(2, -0.5, 1, [2], [-0.5])]
    outputs = [
        VerifyOutput(11, SequenceStatus(), [7, 8], 1, [chosen, TokenLogprob(8, -2.0, 9)]),
        VerifyOutput(12, SequenceStatus(), [3], 0),  # asked for none
        VerifyOutput(13, SequenceStatus(StatusCode.INTERNAL, "broken")),
    ]
    requests = [VerifyRequest(SequenceTokens(i, 0, [5]), GREEDY) for i in (11, 12, 13)]
    wire = crossed(convert.verify_result_to_proto(1, outputs, 10))
    assert convert.verify_result_from_proto(wire, requests) == outputs
    prefill = VerifyOutput(11, SequenceStatus(), [7], 0, [chosen], prompt)
    result = crossed(convert.prefill_result_to_proto(1, [prefill], 10))
    assert [convert.prefill_output_from_proto(o) for o in result.outputs] == [prefill]
    options = SamplingOptions(
        temperature=0.5, top_k=4, seed=3, logprobs=0, prompt_logprobs=20,
        logit_bias=((5, -2.5), (9, 1.0)), min_tokens_left=3, suppressed_ids=(0, 7),
    )  # fmt: skip
    assert sampling_from_proto(sampling_to_proto(options)) == options
    assert sampling_from_proto(sampling_to_proto(GREEDY)) == GREEDY


def test_the_batch_messages_name_no_per_sequence_message() -> None:
    """One message per batch: nothing repeated per sequence but plain columns
    (the prefill's outputs aside: once per sequence, not per round)."""
    for message in (dpb.ProposeBatch, dpb.ProposeResult, tpb.VerifyBatch, tpb.VerifyResult):
        repeated = [
            f.name
            for f in message.DESCRIPTOR.fields
            if f.is_repeated and f.message_type is not None
        ]
        assert repeated in ([], ["failed"], ["failed", "logprobs"]), (message, repeated)


def test_a_generate_request_carries_logit_bias_and_min_tokens() -> None:
    params = SamplingParams(
        max_tokens=9, logit_bias={5: 2.0}, min_tokens=4, stop_token_ids=[7],
        include_stop_str_in_output=True,
    )  # fmt: skip
    back = params_from_request(crossed(generate_request("r", [1, 2], params)))
    assert (back.logit_bias, back.min_tokens, back.stop_token_ids) == ({5: 2.0}, 4, [7])
    assert back.include_stop_str_in_output
