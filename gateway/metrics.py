"""The gateway's own Prometheus metrics, beside the engine's state."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from router.metrics import EngineCollector, EngineStats

# The gateway's histograms by their vLLM names.
VLLM_NAMES = {
    "ttft": "time_to_first_token_seconds",
    "latency": "e2e_request_latency_seconds",
    "itl": "inter_token_latency_seconds",
}
ITL_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


class GatewayMetrics:
    """Request counts and latencies of the HTTP gateway, in its own registry."""

    def __init__(self, stats: Callable[[], EngineStats], model: Callable[[], str | None]):
        """``model``: the served model's name (None while the backend cannot say)."""
        self.registry = CollectorRegistry()
        self.registry.register(EngineCollector(stats, model))
        self.model = model
        self.requests = Counter(
            "specserve_request",
            "finished HTTP requests",
            ["endpoint", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "specserve_e2e_request_latency_seconds", "request latency", registry=self.registry
        )
        self.ttft = Histogram(
            "specserve_time_to_first_token_seconds", "time to first token", registry=self.registry
        )
        self.itl = Histogram(
            "specserve_inter_token_latency_seconds",
            "time between tokens after the first",
            registry=self.registry,
            buckets=ITL_BUCKETS,
        )
        # The same three under vLLM's names, labelled by the served model.
        self.vllm = {
            name: Histogram(
                f"vllm:{name}", text, ["model_name"], registry=self.registry, buckets=buckets
            )
            for name, text, buckets in (
                ("time_to_first_token_seconds", "time to first token", Histogram.DEFAULT_BUCKETS),
                ("e2e_request_latency_seconds", "request latency", Histogram.DEFAULT_BUCKETS),
                ("inter_token_latency_seconds", "time between tokens", ITL_BUCKETS),
            )
        }

    def observe(self, name: str, seconds: float) -> None:
        """One observation of the histogram ``name`` (``ttft``, ``latency``,
        ``itl``), under both names."""
        getattr(self, name).observe(seconds)
        model = self.model()
        if model is not None:
            self.vllm[VLLM_NAMES[name]].labels(model).observe(seconds)

    def text(self) -> bytes:
        return generate_latest(self.registry)
