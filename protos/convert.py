"""Conversions between the wire messages (``*_pb2``) and the in-process ones
(``protos.messages``). Servicers and gRPC clients call these and nothing else
touches protobuf."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from model_runtime.logprobs import TokenLogprob
from model_runtime.sampling import SamplingOptions
from model_runtime.status import SequenceStatus, StatusCode
from protos import common_pb2 as pb
from protos import draft_worker_pb2 as dpb
from protos import target_worker_pb2 as tpb
from protos.distributions import (
    pack_distributions,
    pack_rows,
    received_distributions,
    refuse_both_forms,
    sent_rows,
    unpack_rows,
)
from protos.messages import (
    Proposal,
    ProposeRequest,
    SequenceTokens,
    VerifyOutput,
    VerifyRequest,
    WorkerInfo,
)


def sampling_to_proto(o: SamplingOptions) -> pb.SamplingParams:
    return pb.SamplingParams(
        temperature=o.temperature,
        top_p=o.top_p,
        top_k=o.top_k,
        min_p=o.min_p,
        seed=o.seed,
        logprobs=o.logprobs,
        prompt_logprobs=o.prompt_logprobs,
    )


def sampling_from_proto(m: pb.SamplingParams) -> SamplingOptions:
    """Raises ValueError for values out of range (the servicer's INVALID_ARGUMENT)."""
    return SamplingOptions(
        temperature=m.temperature,
        top_p=m.top_p if m.top_p > 0 else 1.0,  # unset: keep everything
        top_k=m.top_k,
        min_p=m.min_p,
        seed=m.seed if m.HasField("seed") else None,
        logprobs=m.logprobs if m.HasField("logprobs") else None,
        prompt_logprobs=m.prompt_logprobs if m.HasField("prompt_logprobs") else None,
    )


def logprob_to_proto(t: TokenLogprob) -> pb.TokenLogprob:
    return pb.TokenLogprob(
        token_id=t.token_id,
        logprob=t.logprob,
        rank=t.rank,
        top_token_ids=t.top_token_ids,
        top_logprobs=t.top_logprobs,
    )


def logprob_from_proto(m: pb.TokenLogprob) -> TokenLogprob:
    return TokenLogprob(m.token_id, m.logprob, m.rank, list(m.top_token_ids), list(m.top_logprobs))


def tokens_to_proto(t: SequenceTokens) -> pb.SequenceTokens:
    return pb.SequenceTokens(seq_id=t.seq_id, cached_len=t.cached_len, token_ids=t.token_ids)


def tokens_from_proto(m: pb.SequenceTokens) -> SequenceTokens:
    return SequenceTokens(m.seq_id, m.cached_len, list(m.token_ids))


def status_to_proto(s: SequenceStatus) -> pb.SequenceStatus:
    return pb.SequenceStatus(code=s.code.name, message=s.message)


def status_from_proto(m: pb.SequenceStatus) -> SequenceStatus:
    return SequenceStatus(StatusCode(m.code), m.message)


def worker_info_to_proto(info: WorkerInfo) -> pb.WorkerInfo:
    return pb.WorkerInfo(
        model=info.model,
        vocab_size=info.vocab_size,
        max_model_len=info.max_model_len,
        block_size=info.block_size,
        num_blocks=info.num_blocks,
        num_free_blocks=info.num_free_blocks,
        max_num_batched_tokens=info.max_num_batched_tokens,
        max_num_seqs=info.max_num_seqs,
    )


def worker_info_from_proto(m: pb.WorkerInfo) -> WorkerInfo:
    return WorkerInfo(
        m.model,
        m.vocab_size,
        m.max_model_len,
        m.block_size,
        m.num_blocks,
        m.num_free_blocks,
        m.max_num_batched_tokens,
        m.max_num_seqs,
    )


# ----------------------------------------------------------------- draft worker


def propose_batch_to_proto(
    batch_id: int, requests: Sequence[ProposeRequest], k: int
) -> dpb.ProposeBatch:
    return dpb.ProposeBatch(
        batch_id=batch_id,
        num_draft_tokens=k,
        sequences=[
            dpb.ProposeRequest(
                tokens=tokens_to_proto(r.tokens), sampling=sampling_to_proto(r.sampling)
            )
            for r in requests
        ],
    )


def propose_batch_from_proto(m: dpb.ProposeBatch) -> list[ProposeRequest]:
    return [
        ProposeRequest(tokens_from_proto(r.tokens), sampling_from_proto(r.sampling))
        for r in m.sequences
    ]


def proposals_to_proto(
    proposals: Sequence[Proposal],
) -> tuple[list[dpb.Proposal], pb.PackedDistributions | None]:
    """A batch's proposals, and their distributions (on the draft's device)
    packed together for the ProposeResult when they share a width: one copy
    off the device and one conversion for the batch. Otherwise each proposal
    carries its own."""
    drafted = [p for p in proposals if p.status.ok and p.token_ids]
    parts = sent_rows(drafted, [len(p.token_ids) for p in drafted])
    packed = None if parts is None else pack_rows(parts)
    return [
        dpb.Proposal(
            seq_id=p.seq_id,
            status=status_to_proto(p.status),
            token_ids=p.token_ids,
            packed_probs=None if packed else pack_distributions(p.draft_ids, p.draft_probs),
        )
        for p in proposals
    ], packed


def proposals_from_proto(m: dpb.ProposeResult) -> list[Proposal]:
    if not m.HasField("packed_probs"):
        return [_proposal_from_proto(p) for p in m.proposals]
    refuse_both_forms(m.proposals)
    drafted = [p.status.code == pb.SequenceStatus.OK and bool(p.token_ids) for p in m.proposals]
    counts = [len(p.token_ids) for p, d in zip(m.proposals, drafted, strict=True) if d]
    parts = iter(unpack_rows(m.packed_probs, counts))
    return [
        Proposal(
            p.seq_id,
            status_from_proto(p.status),
            list(p.token_ids),
            *(next(parts) if d else (None, None)),
        )
        for p, d in zip(m.proposals, drafted, strict=True)
    ]


def _proposal_from_proto(m: dpb.Proposal) -> Proposal:
    ids, probs = received_distributions(m)
    return Proposal(m.seq_id, status_from_proto(m.status), list(m.token_ids), ids, probs)


# ---------------------------------------------------------------- target worker


def verify_batch_to_proto(batch_id: int, requests: Sequence[VerifyRequest]) -> tpb.VerifyBatch:
    """A verify batch; the distributions of its requests with drafts travel
    packed together when every one has them, of one width."""
    drafted = [r for r in requests if r.draft_token_ids]
    parts = sent_rows(drafted, [len(r.draft_token_ids) for r in drafted])
    packed = None if parts is None else pack_rows(parts)
    return tpb.VerifyBatch(
        batch_id=batch_id,
        sequences=[_verify_request_to_proto(r, with_probs=packed is None) for r in requests],
        packed_probs=packed,
    )


def verify_batch_from_proto(m: tpb.VerifyBatch) -> list[VerifyRequest]:
    if not m.HasField("packed_probs"):
        return [_verify_request_from_proto(r, received_distributions(r)) for r in m.sequences]
    refuse_both_forms(m.sequences)
    drafted = [r for r in m.sequences if r.draft_token_ids]
    parts = iter(unpack_rows(m.packed_probs, [len(r.draft_token_ids) for r in drafted]))
    return [
        _verify_request_from_proto(r, next(parts) if r.draft_token_ids else (None, None))
        for r in m.sequences
    ]


def _verify_request_to_proto(r: VerifyRequest, with_probs: bool) -> tpb.VerifyRequest:
    return tpb.VerifyRequest(
        tokens=tokens_to_proto(r.tokens),
        sampling=sampling_to_proto(r.sampling),
        draft_token_ids=r.draft_token_ids,
        packed_probs=pack_distributions(r.draft_ids, r.draft_probs) if with_probs else None,
    )


def _verify_request_from_proto(
    m: tpb.VerifyRequest, distributions: tuple[torch.Tensor | None, torch.Tensor | None]
) -> VerifyRequest:
    ids, probs = distributions
    if ids is not None and ids.shape[0] != len(m.draft_token_ids):
        raise ValueError(
            f"sequence {m.tokens.seq_id}: {len(m.draft_token_ids)} drafts but "
            f"{ids.shape[0]} draft distributions"
        )
    return VerifyRequest(
        tokens_from_proto(m.tokens),
        sampling_from_proto(m.sampling),
        list(m.draft_token_ids),
        ids,
        probs,
    )


def verify_output_to_proto(o: VerifyOutput) -> tpb.VerifyOutput:
    return tpb.VerifyOutput(
        seq_id=o.seq_id,
        status=status_to_proto(o.status),
        token_ids=o.token_ids,
        num_accepted_drafts=o.num_accepted_drafts,
        logprobs=[logprob_to_proto(t) for t in o.logprobs],
    )


def verify_output_from_proto(m: tpb.VerifyOutput) -> VerifyOutput:
    return VerifyOutput(
        m.seq_id,
        status_from_proto(m.status),
        list(m.token_ids),
        m.num_accepted_drafts,
        [logprob_from_proto(t) for t in m.logprobs],
    )


def prefill_request_to_proto(r: VerifyRequest) -> tpb.PrefillRequest:
    return tpb.PrefillRequest(
        tokens=tokens_to_proto(r.tokens), sampling=sampling_to_proto(r.sampling)
    )


def prefill_request_from_proto(m: tpb.PrefillRequest) -> VerifyRequest:
    return VerifyRequest(tokens_from_proto(m.tokens), sampling_from_proto(m.sampling))


def prefill_output_to_proto(o: VerifyOutput) -> tpb.PrefillOutput:
    return tpb.PrefillOutput(
        seq_id=o.seq_id,
        status=status_to_proto(o.status),
        token_id=o.token_ids[0] if o.token_ids else 0,
        logprob=logprob_to_proto(o.logprobs[0]) if o.logprobs else None,
        prompt_logprobs=[logprob_to_proto(t) for t in o.prompt_logprobs],
    )


def prefill_output_from_proto(m: tpb.PrefillOutput) -> VerifyOutput:
    status = status_from_proto(m.status)
    return VerifyOutput(
        m.seq_id,
        status,
        [m.token_id] if status.ok else [],
        0,
        [logprob_from_proto(m.logprob)] if m.HasField("logprob") else [],
        [logprob_from_proto(t) for t in m.prompt_logprobs],
    )
