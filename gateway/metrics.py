"""The gateway's own Prometheus metrics, beside the engine's state."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from router.metrics import EngineCollector, EngineStats


class GatewayMetrics:
    """Request counts and latencies of the HTTP gateway, in its own registry."""

    def __init__(self, stats: Callable[[], EngineStats]):
        self.registry = CollectorRegistry()
        self.registry.register(EngineCollector(stats))
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
            buckets=(0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0),
        )

    def text(self) -> bytes:
        return generate_latest(self.registry)
