"""The engine's state under vLLM's Prometheus names (``vllm:...``, labelled
by ``model_name``), beside specserve's own, so that a dashboard built for
vLLM reads a specserve server unchanged."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

if TYPE_CHECKING:  # router.metrics imports this module
    from router.metrics import EngineStats

LABEL = ["model_name"]


def vllm_families(e: EngineStats, model: str) -> Iterator[Metric]:
    """``e`` as vLLM's gauges and counters for the served ``model``."""
    for name, text, value in (
        ("num_requests_running", "requests being decoded", e.num_running),
        ("num_requests_waiting", "requests waiting for KV room", e.num_waiting),
        ("kv_cache_usage_perc", "share of the KV cache in use (1 is full)", e.kv_cache_usage),
    ):
        gauge = GaugeMetricFamily(f"vllm:{name}", text, labels=LABEL)
        gauge.add_metric([model], value)
        yield gauge
    r, s = e.requests, e.speculation
    for name, text, count in (
        ("prompt_tokens", "prompt tokens taken", r.prompt_tokens),
        ("generation_tokens", "tokens generated", r.generation_tokens),
        ("spec_decode_num_drafts", "rounds that verified drafts", s.num_drafts),
        ("spec_decode_num_draft_tokens", "draft tokens proposed", s.num_draft_tokens),
        ("spec_decode_num_accepted_tokens", "draft tokens accepted", s.num_accepted_tokens),
    ):
        counter = CounterMetricFamily(f"vllm:{name}", text, labels=LABEL)
        counter.add_metric([model], count)
        yield counter
    success = CounterMetricFamily(
        "vllm:request_success", "requests finished", labels=[*LABEL, "finished_reason"]
    )
    for reason, count in sorted(r.finished.items()):
        success.add_metric([model, reason], count)
    yield success
    per_position = CounterMetricFamily(
        "vllm:spec_decode_num_accepted_tokens_per_pos",
        "draft tokens accepted at each draft position",
        labels=[*LABEL, "position"],
    )
    for position, count in enumerate(s.accepted_per_position):
        per_position.add_metric([model, str(position)], count)
    yield per_position
