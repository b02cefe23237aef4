"""The gateway's request metrics as a dashboard reads them: a streamed
request timed to its last event, and series labelled by route, not by URL."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

from openai import OpenAI
from prometheus_client.parser import text_string_to_metric_families


def samples(server: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"{server}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def latency_sum(server: str) -> float:
    return samples(server)[("specserve_e2e_request_latency_seconds_sum", ())]


def test_a_streamed_request_is_timed_to_its_last_event(server: str) -> None:
    before = latency_sum(server)
    stream = OpenAI(api_key="EMPTY", base_url=f"{server}/v1").completions.create(
        model="specserve/demo-target", prompt="def f(x):", max_tokens=48, stream=True
    )
    arrivals = [time.monotonic() for _ in stream]
    recorded = latency_sum(server) - before
    # The headers go out before the first event; the request ends after the last.
    assert recorded >= 0.5 * (arrivals[-1] - arrivals[0]) > 0


def test_unknown_paths_share_one_series(server: str) -> None:
    OpenAI(api_key="EMPTY", base_url=f"{server}/v1").completions.create(
        model="specserve/demo-target", prompt="x", max_tokens=1
    )
    for path in ("/v1/no-such-route-1", "/v1/no-such-route-2"):
        try:
            urllib.request.urlopen(f"{server}{path}", timeout=10)
        except urllib.error.HTTPError as e:
            assert e.code == 404
    labels = [dict(k[1]) for k in samples(server) if k[0] == "specserve_request_total"]
    endpoints = {label["endpoint"] for label in labels}
    assert "unmatched" in endpoints
    assert not any("no-such-route" in e for e in endpoints)
    assert "/v1/completions" in endpoints  # routes keep their own series


def test_a_vllm_dashboards_series_are_there_labelled_by_model(server: str) -> None:
    OpenAI(api_key="EMPTY", base_url=f"{server}/v1").completions.create(
        model="specserve/demo-target", prompt="def f(x):", max_tokens=4, stream=True
    )
    found = samples(server)
    model = ("model_name", "specserve/demo-target")

    def value(name: str, *labels: tuple[str, str]) -> float:
        return found[(name, tuple(sorted((model, *labels))))]

    assert value("vllm:generation_tokens_total") >= 4
    assert value("vllm:prompt_tokens_total") > 0
    assert value("vllm:request_success_total", ("finished_reason", "length")) >= 1
    assert value("vllm:spec_decode_num_draft_tokens_total") > 0
    assert value("vllm:spec_decode_num_accepted_tokens_per_pos_total", ("position", "0")) >= 0
    assert 0 <= value("vllm:kv_cache_usage_perc") <= 1
    assert value("vllm:num_requests_running") >= 0
    for histogram in ("time_to_first_token", "e2e_request_latency", "inter_token_latency"):
        assert value(f"vllm:{histogram}_seconds_count") >= 1
