"""The Router service's messages and the router's own types: a gateway (or any
gRPC client written in Python) and the Router servicer convert with these and
nothing else touches router_pb2."""

from __future__ import annotations

from collections.abc import Sequence

from protos import router_pb2 as rpb
from protos.fields import logprob_from_proto, logprob_to_proto, sampling_from_proto
from protos.fields import sampling_to_proto as options_to_proto
from router.deltas import Delta
from router.metrics import EngineStats, RequestCounts, SpeculationMetrics
from router.params import SamplingParams
from router.structured import StructuredOutputsParams

FINISH_REASONS = {
    None: rpb.FINISH_REASON_UNSPECIFIED,
    "stop": rpb.FINISH_REASON_STOP,
    "length": rpb.FINISH_REASON_LENGTH,
    "abort": rpb.FINISH_REASON_ABORT,
}
FINISH_REASON_NAMES = {code: name for name, code in FINISH_REASONS.items()}


def generate_request(
    request_id: str, prompt_ids: Sequence[int], params: SamplingParams
) -> rpb.GenerateRequest:
    """One completion (params.n must be 1: the Router streams one sequence per call)."""
    if params.n != 1:
        raise ValueError(f"a Router Generate call makes one completion; got n={params.n}")
    return rpb.GenerateRequest(
        request_id=request_id,
        token_ids=rpb.TokenIds(ids=list(prompt_ids)),
        sampling=options_to_proto(params.options(0)),
        max_tokens=params.max_tokens,
        stop=params.stop_strings,
        stop_token_ids=params.stop_token_ids or [],
        ignore_eos=params.ignore_eos,
        min_tokens=params.min_tokens,
        include_stop_str_in_output=params.include_stop_str_in_output,
        bad_words=params.bad_words or [],
    )


def params_from_request(m: rpb.GenerateRequest) -> SamplingParams:
    """Raises ValueError for values out of range (the servicer's INVALID_ARGUMENT)."""
    options = sampling_from_proto(m.sampling)
    return SamplingParams(
        temperature=options.temperature,
        top_p=options.top_p,
        top_k=options.top_k,
        min_p=options.min_p,
        seed=options.seed,
        max_tokens=m.max_tokens if m.HasField("max_tokens") else None,
        stop=list(m.stop),
        stop_token_ids=list(m.stop_token_ids),
        ignore_eos=m.ignore_eos,
        logprobs=options.logprobs,
        prompt_logprobs=options.prompt_logprobs,
        logit_bias=dict(options.logit_bias) or None,
        presence_penalty=options.presence_penalty,
        frequency_penalty=options.frequency_penalty,
        repetition_penalty=options.repetition_penalty,
        min_tokens=m.min_tokens,
        include_stop_str_in_output=m.include_stop_str_in_output,
        bad_words=list(m.bad_words) or None,
        structured_outputs=(
            StructuredOutputsParams(llguidance=options.grammar) if options.grammar else None
        ),
    )


def delta_to_response(
    request_id: str, delta: Delta, prompt_ids: Sequence[int], first: bool
) -> rpb.GenerateResponse:
    m = rpb.GenerateResponse(
        request_id=request_id,
        token_ids=delta.token_ids,
        text=delta.text,
        finish_reason=FINISH_REASONS[delta.finish_reason],
        prompt_token_ids=prompt_ids if first else [],
        num_prompt_tokens=len(prompt_ids),
        speculation=rpb.SpeculationStats(
            num_drafts=delta.num_drafts,
            num_draft_tokens=delta.num_draft_tokens,
            num_accepted_tokens=delta.num_accepted_tokens,
        ),
        logprobs=[logprob_to_proto(t) for t in delta.logprobs],
        prompt_logprobs=[logprob_to_proto(t) for t in delta.prompt_logprobs or []],
    )
    if isinstance(delta.stop_reason, str):
        m.stop_string = delta.stop_reason
    elif delta.stop_reason is not None:
        m.stop_token_id = delta.stop_reason
    return m


def delta_from_response(m: rpb.GenerateResponse, wants_prompt_logprobs: bool) -> Delta:
    return Delta(
        token_ids=list(m.token_ids),
        text=m.text,
        finish_reason=FINISH_REASON_NAMES[m.finish_reason],
        num_drafts=m.speculation.num_drafts,
        num_draft_tokens=m.speculation.num_draft_tokens,
        num_accepted_tokens=m.speculation.num_accepted_tokens,
        logprobs=[logprob_from_proto(t) for t in m.logprobs],
        prompt_logprobs=(
            [logprob_from_proto(t) for t in m.prompt_logprobs]
            if wants_prompt_logprobs and m.prompt_token_ids
            else None
        ),
        stop_reason=_stop_reason_from(m),
    )


def _stop_reason_from(m: rpb.GenerateResponse) -> int | str | None:
    field = m.WhichOneof("stop_reason")
    return None if field is None else getattr(m, field)


def router_info(
    model: str, vocab_size: int, max_model_len: int, draft_model: str, k: int, stats: EngineStats
) -> rpb.RouterInfo:
    m = stats.speculation
    return rpb.RouterInfo(
        model=model,
        vocab_size=vocab_size,
        max_model_len=max_model_len,
        draft_model=draft_model,
        num_speculative_tokens=k,
        speculating=stats.speculating,
        num_running=stats.num_running,
        num_waiting=stats.num_waiting,
        kv_cache_usage=stats.kv_cache_usage,
        num_drafts=m.num_drafts,
        num_draft_tokens=m.num_draft_tokens,
        num_accepted_tokens=m.num_accepted_tokens,
        accepted_per_position=m.accepted_per_position,
        rounds_per_k=m.rounds_per_k,
        chosen_k=m.chosen_k,
        prompt_tokens=stats.requests.prompt_tokens,
        generation_tokens=stats.requests.generation_tokens,
        finished=stats.requests.finished,
    )


def stats_from_info(m: rpb.RouterInfo) -> EngineStats:
    return EngineStats(
        speculating=m.speculating,
        num_running=m.num_running,
        num_waiting=m.num_waiting,
        kv_cache_usage=m.kv_cache_usage,
        speculation=SpeculationMetrics(
            num_speculative_tokens=m.num_speculative_tokens,
            num_drafts=m.num_drafts,
            num_draft_tokens=m.num_draft_tokens,
            num_accepted_tokens=m.num_accepted_tokens,
            accepted_per_position=list(m.accepted_per_position),
            rounds_per_k=list(m.rounds_per_k),
            chosen_k=m.chosen_k,
        ),
        requests=RequestCounts(m.prompt_tokens, m.generation_tokens, dict(m.finished)),
    )
