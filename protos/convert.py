"""Conversions between the workers' batch messages (``*_pb2``) and the
in-process ones (``protos.messages``). Servicers and gRPC clients call these
and nothing else touches the workers' protobuf.

Every batch travels column by column (``protos.columns``); a result's entries
are in its batch's order, so the sequence ids of a result come from the
requests it answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

from protos import common_pb2 as pb
from protos import draft_worker_pb2 as dpb
from protos import target_worker_pb2 as tpb
from protos.batch_columns import ProposalColumns, ProposeColumns, VerifyColumns, seq_ids_of
from protos.columns import (
    Drafted,
    check_drafts,
    columns_to_proto,
    drafts_from_proto,
    drafts_to_proto,
    failed_to_proto,
    sequences_from_proto,
    sequences_to_proto,
    split,
    statuses_from_proto,
)
from protos.fields import logprob_from_proto, logprob_to_proto, status_from_proto, status_to_proto
from protos.messages import Proposal, ProposeRequest, VerifyOutput, VerifyRequest


def sequences_of(requests: Sequence[ProposeRequest] | Sequence[VerifyRequest]) -> pb.SequenceBatch:
    """The column of a batch's sequences (their tokens and samplings)."""
    return sequences_to_proto([r.tokens for r in requests], [r.sampling for r in requests])


# ----------------------------------------------------------------- draft worker


def propose_batch_to_proto(
    batch_id: int, requests: Sequence[ProposeRequest], k: int
) -> dpb.ProposeBatch:
    """A batch of requests, or of columns (taken as they are)."""
    if isinstance(requests, ProposeColumns):
        sequences = columns_to_proto(requests)
    else:
        sequences = sequences_of(requests)
    return dpb.ProposeBatch(batch_id=batch_id, num_draft_tokens=k, sequences=sequences)


def propose_batch_from_proto(m: dpb.ProposeBatch) -> list[ProposeRequest]:
    tokens, options = sequences_from_proto(m.sequences)
    return [ProposeRequest(t, o) for t, o in zip(tokens, options, strict=True)]


def propose_result_to_proto(
    batch_id: int, proposals: Sequence[Proposal], num_free_blocks: int
) -> dpb.ProposeResult:
    """A batch's proposals (their distributions, on the draft's device, packed
    together: one copy off the device)."""
    drafts: list[Drafted] = [
        (p.token_ids, p.draft_ids, p.draft_probs) if p.status.ok else ([], None, None)
        for p in proposals
    ]
    return dpb.ProposeResult(
        batch_id=batch_id,
        num_free_blocks=num_free_blocks,
        drafts=drafts_to_proto(drafts),
        failed=failed_to_proto(p.status for p in proposals),
    )


def propose_result_from_proto(
    m: dpb.ProposeResult, requests: Sequence[ProposeRequest]
) -> ProposalColumns:
    """The proposals answering ``requests`` (ValueError if they cannot): their
    shape is checked at once, the proposals are built when first read."""
    n = len(requests)
    check_drafts(m.drafts, n)
    seq_ids = seq_ids_of(requests)
    statuses = statuses_from_proto(m.failed, n)

    def parse() -> list[Proposal]:
        return [
            Proposal(seq_id, status, tokens, ids, probs)
            for seq_id, status, (tokens, ids, probs) in zip(
                seq_ids, statuses, drafts_from_proto(m.drafts, n), strict=True
            )
        ]

    failed = set(m.failed.keys())
    return ProposalColumns(seq_ids, list(m.drafts.num_drafts), failed, m.drafts, parse)


# ---------------------------------------------------------------- target worker


def verify_batch_to_proto(
    batch_id: int,
    requests: Sequence[VerifyRequest],
    sequences: pb.SequenceBatch | None = None,
    drafts: pb.Drafts | None = None,
) -> tpb.VerifyBatch:
    """``sequences``: ``sequences_of(requests)`` if encoded already (before the
    drafts came); ``drafts``: the batch's drafts as a draft worker sent them
    (else those in the requests)."""
    if drafts is None:
        drafts = drafts_to_proto(
            [(r.draft_token_ids, r.draft_ids, r.draft_probs) for r in requests]
        )
    return tpb.VerifyBatch(
        batch_id=batch_id,
        sequences=sequences_of(requests) if sequences is None else sequences,
        drafts=drafts,
    )


def verify_batch_from_proto(m: tpb.VerifyBatch) -> list[VerifyRequest]:
    tokens, options = sequences_from_proto(m.sequences)
    drafts = drafts_from_proto(m.drafts, len(tokens))
    return [
        VerifyRequest(t, o, list(ids), draft_ids, draft_probs)
        for t, o, (ids, draft_ids, draft_probs) in zip(tokens, options, drafts, strict=True)
    ]


def verify_result_to_proto(
    batch_id: int, outputs: Sequence[VerifyOutput], num_free_blocks: int
) -> tpb.VerifyResult:
    flat: list[int] = []
    for o in outputs:
        flat += o.token_ids
    asked = any(o.logprobs for o in outputs)
    return tpb.VerifyResult(
        batch_id=batch_id,
        num_free_blocks=num_free_blocks,
        num_tokens=[len(o.token_ids) for o in outputs],
        token_ids=flat,
        num_accepted_drafts=[o.num_accepted_drafts for o in outputs],
        failed=failed_to_proto(o.status for o in outputs),
        logprobs=[logprob_to_proto(t) for o in outputs for t in o.logprobs],
        num_logprobs=[len(o.logprobs) for o in outputs] if asked else [],
    )


def verify_result_from_proto(
    m: tpb.VerifyResult, requests: Sequence[VerifyRequest]
) -> VerifyColumns:
    """The outputs answering ``requests`` (ValueError if they cannot): their
    columns at once, every output's message when first read."""
    n = len(requests)
    if len(m.num_accepted_drafts) != n:
        raise ValueError(f"{len(m.num_accepted_drafts)} outputs for a batch of {n}")
    if len(m.num_tokens) != n:
        raise ValueError(f"token counts for {len(m.num_tokens)} sequences in a batch of {n}")
    num_tokens, flat = list(m.num_tokens), list(m.token_ids)
    if sum(num_tokens) != len(flat):
        raise ValueError(f"{len(flat)} tokens for counts adding up to {sum(num_tokens)}")
    statuses = statuses_from_proto(m.failed, n)
    accepted = list(m.num_accepted_drafts)
    counts = list(m.num_logprobs) or [0] * n
    if len(counts) != n or sum(counts) != len(m.logprobs):
        raise ValueError(f"{len(m.logprobs)} logprobs for counts {counts}")

    def parse() -> list[VerifyOutput]:
        tokens = split(flat, num_tokens)
        logprobs = [logprob_from_proto(t) for t in m.logprobs]
        return [
            VerifyOutput(r.tokens.seq_id, s, t, a, logprobs[end - c : end])
            for r, s, t, a, c, end in zip(
                requests, statuses, tokens, accepted, counts, accumulate(counts), strict=True
            )
        ]

    return VerifyColumns(num_tokens, flat, accepted, set(m.failed.keys()), parse)


def prefill_batch_to_proto(batch_id: int, requests: Sequence[VerifyRequest]) -> tpb.PrefillBatch:
    return tpb.PrefillBatch(
        batch_id=batch_id,
        sequences=sequences_of(requests),
    )


def prefill_batch_from_proto(m: tpb.PrefillBatch) -> list[VerifyRequest]:
    tokens, options = sequences_from_proto(m.sequences)
    return [VerifyRequest(t, o) for t, o in zip(tokens, options, strict=True)]


def prefill_result_to_proto(
    batch_id: int, outputs: Sequence[VerifyOutput], num_free_blocks: int
) -> tpb.PrefillResult:
    return tpb.PrefillResult(
        batch_id=batch_id,
        num_free_blocks=num_free_blocks,
        outputs=[_prefill_output_to_proto(o) for o in outputs],
    )


def _prefill_output_to_proto(o: VerifyOutput) -> tpb.PrefillOutput:
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
