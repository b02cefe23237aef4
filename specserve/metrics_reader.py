"""``LLM.get_metrics()``'s values, shaped as vLLM's metrics reader gives them:
a list of named Counter, Gauge and Vector objects (vLLM's metric names), read
from the engine's state at the moment of the call."""

from __future__ import annotations

from dataclasses import dataclass, field

from router.metrics import EngineStats


@dataclass
class Metric:
    name: str
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class Counter(Metric):
    value: int = 0


@dataclass
class Gauge(Metric):
    value: float = 0.0


@dataclass
class Vector(Metric):
    values: list[int] = field(default_factory=list)


def metrics_of(stats: EngineStats, model_name: str) -> list[Metric]:
    """The engine's counters and state under vLLM's names, labelled by model."""
    label = {"model_name": model_name}
    s, r = stats.speculation, stats.requests
    out: list[Metric] = [
        Gauge("vllm:num_requests_running", label, stats.num_running),
        Gauge("vllm:num_requests_waiting", label, stats.num_waiting),
        Gauge("vllm:kv_cache_usage_perc", label, stats.kv_cache_usage),
        Counter("vllm:prompt_tokens", label, r.prompt_tokens),
        Counter("vllm:generation_tokens", label, r.generation_tokens),
    ]
    out += [
        Counter("vllm:request_success", label | {"finished_reason": reason}, count)
        for reason, count in sorted(r.finished.items())
    ]
    if s.num_speculative_tokens:
        out += [
            Counter("vllm:spec_decode_num_drafts", label, s.num_drafts),
            Counter("vllm:spec_decode_num_draft_tokens", label, s.num_draft_tokens),
            Counter("vllm:spec_decode_num_accepted_tokens", label, s.num_accepted_tokens),
            Vector(
                "vllm:spec_decode_num_accepted_tokens_per_pos",
                label,
                list(s.accepted_per_position),
            ),
        ]
    return out
