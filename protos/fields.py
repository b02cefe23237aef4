"""Conversions of the wire's small messages, one message to one in-process
value: sampling parameters, a token's logprobs, a sequence's status, a
worker's description. The batch messages (``protos.convert``) and the
Router's (``router.wire``) are built from these."""

from __future__ import annotations

from dataclasses import asdict

from model_runtime.logprobs import TokenLogprob
from model_runtime.sampling import SamplingOptions
from model_runtime.status import SequenceStatus, StatusCode
from model_runtime.step_counts import StepCounts
from protos import common_pb2 as pb
from protos.messages import WorkerInfo


def sampling_to_proto(o: SamplingOptions) -> pb.SamplingParams:
    return pb.SamplingParams(
        temperature=o.temperature,
        top_p=o.top_p,
        top_k=o.top_k,
        min_p=o.min_p,
        seed=o.seed,
        logprobs=o.logprobs,
        prompt_logprobs=o.prompt_logprobs,
        logit_bias=dict(o.logit_bias),
        min_tokens_left=o.min_tokens_left,
        suppressed_ids=o.suppressed_ids,
        presence_penalty=o.presence_penalty,
        frequency_penalty=o.frequency_penalty,
        repetition_penalty=o.repetition_penalty,
        output_start=o.output_start,
        bad_words=[pb.TokenSequence(ids=w) for w in o.bad_words],
        grammar=o.grammar,
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
        logit_bias=tuple(sorted(m.logit_bias.items())),
        min_tokens_left=m.min_tokens_left,
        suppressed_ids=tuple(m.suppressed_ids),
        presence_penalty=m.presence_penalty,
        frequency_penalty=m.frequency_penalty,
        repetition_penalty=m.repetition_penalty or 1.0,  # unset: none
        output_start=m.output_start,
        bad_words=tuple(tuple(w.ids) for w in m.bad_words),
        grammar=m.grammar,
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
        forwards=pb.ForwardCounts(**asdict(info.forwards)),
        wire_version=info.wire_version,
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
        StepCounts(
            m.forwards.replayed,
            m.forwards.captured,
            m.forwards.capture_s,
            m.forwards.eager,
            m.forwards.eager_s,
        ),
        m.wire_version,
    )
