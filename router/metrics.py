"""Speculation counters as vLLM reports them, the engine's state for
Prometheus, and the periodic statistics log line."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from router.vllm_metrics import vllm_families


@dataclass
class SpeculationMetrics:
    """Drafts (rounds that verified drafts), draft tokens, accepted tokens, and
    how often the draft at each position was accepted; and how many rounds ran
    with each k (chosen per round when adaptive), and the latest k."""

    num_speculative_tokens: int
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_position: list[int] = field(default_factory=list)
    rounds_per_k: list[int] = field(default_factory=list)
    chosen_k: int = 0

    def __post_init__(self) -> None:
        if not self.accepted_per_position:
            self.accepted_per_position = [0] * self.num_speculative_tokens
        if not self.rounds_per_k:
            self.rounds_per_k = [0] * (self.num_speculative_tokens + 1)

    def record_round(self, k: int) -> None:
        """A round ran with ``k`` drafts per sequence."""
        self.rounds_per_k[k] += 1
        self.chosen_k = k

    def record(self, num_draft_tokens: int, num_accepted: int) -> None:
        self.num_drafts += 1
        self.num_draft_tokens += num_draft_tokens
        self.num_accepted_tokens += num_accepted
        for position in range(num_accepted):
            self.accepted_per_position[position] += 1

    def copy(self) -> SpeculationMetrics:
        return replace(
            self,
            accepted_per_position=list(self.accepted_per_position),
            rounds_per_k=list(self.rounds_per_k),
        )

    @property
    def acceptance_rate(self) -> float:
        """Accepted draft tokens over proposed draft tokens."""
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0

    @property
    def mean_acceptance_length(self) -> float:
        """Tokens gained per round: 1 + accepted / drafts."""
        return 1 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "num_drafts": self.num_drafts,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "accepted_per_position": list(self.accepted_per_position),
            "acceptance_rate": self.acceptance_rate,
            "mean_acceptance_length": self.mean_acceptance_length,
            "rounds_per_k": list(self.rounds_per_k),
            "chosen_k": self.chosen_k,
        }

    def summary(self) -> str:
        return (
            f"speculation: acceptance rate {self.acceptance_rate:.1%}, mean acceptance length "
            f"{self.mean_acceptance_length:.2f}, drafts {self.num_drafts}, draft tokens "
            f"{self.num_draft_tokens}, accepted {self.num_accepted_tokens}, per position "
            f"{self.accepted_per_position}, rounds per k {self.rounds_per_k}"
        )


@dataclass
class RequestCounts:
    """Prompt tokens taken, tokens generated, and requests finished by why."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    finished: dict[str, int] = field(default_factory=dict)  # finish reason -> sequences

    def finish(self, reason: str | None) -> None:
        key = reason or "abort"
        self.finished[key] = self.finished.get(key, 0) + 1

    def copy(self) -> RequestCounts:
        return replace(self, finished=dict(self.finished))


@dataclass(frozen=True)
class EngineStats:
    """The engine's state at one moment, wherever the engine runs."""

    speculating: bool  # a draft worker is reachable
    num_running: int
    num_waiting: int
    kv_cache_usage: float  # share of the target workers' KV blocks in use
    speculation: SpeculationMetrics
    requests: RequestCounts = field(default_factory=RequestCounts)


class EngineCollector(Collector):
    """The engine's state, read when Prometheus scrapes: whether it speculates,
    running and waiting sequences, KV cache usage, and the speculation counters
    (vLLM's names where vLLM has one)."""

    def __init__(
        self, stats: Callable[[], EngineStats], model_name: Callable[[], str | None] | None = None
    ):
        """``model_name`` (None while unknown) labels the same state under
        vLLM's names (``router.vllm_metrics``)."""
        self.stats = stats
        self.model_name = model_name

    def collect(self) -> Iterator[Metric]:
        e = self.stats()
        model = self.model_name() if self.model_name is not None else None
        if model is not None:
            yield from vllm_families(e, model)
        m = e.speculation
        yield GaugeMetricFamily(
            "specserve_speculation_active",
            "1 while a draft worker is reachable, 0 while decoding without speculation",
            value=float(e.speculating),
        )
        yield GaugeMetricFamily(
            "specserve_num_requests_running", "sequences being decoded", value=e.num_running
        )
        yield GaugeMetricFamily(
            "specserve_num_requests_waiting", "sequences waiting for KV room", value=e.num_waiting
        )
        yield GaugeMetricFamily(
            "specserve_kv_cache_usage_perc",
            "share of the target workers' KV blocks in use",
            value=e.kv_cache_usage,
        )
        for name, value, text in (
            ("drafts", m.num_drafts, "rounds that verified drafts"),
            ("draft_tokens", m.num_draft_tokens, "draft tokens proposed"),
            ("accepted_tokens", m.num_accepted_tokens, "draft tokens accepted"),
        ):
            yield CounterMetricFamily(f"specserve_spec_decode_num_{name}", text, value=value)
        yield _per_index(
            "specserve_spec_decode_num_accepted_tokens_per_pos",
            "draft tokens accepted at each draft position",
            "position",
            m.accepted_per_position,
        )
        yield _per_index(
            "specserve_spec_decode_num_rounds_per_k",
            "rounds run with k drafts per sequence (k chosen per round when adaptive)",
            "k",
            m.rounds_per_k,
        )
        yield GaugeMetricFamily(
            "specserve_spec_decode_chosen_k", "drafts per sequence in the latest round", m.chosen_k
        )


def _per_index(name: str, text: str, label: str, counts: list[int]) -> CounterMetricFamily:
    """A counter with one sample per index of ``counts``, labelled by the index."""
    family = CounterMetricFamily(name, text, labels=[label])
    for index, count in enumerate(counts):
        family.add_metric([str(index)], count)
    return family


class StatsLog:
    """Logs every ``interval_s`` seconds (never when it is None), as vLLM's
    periodic lines do, what happened over the interval: prompt and generation
    throughput, running and waiting requests, KV cache usage; with
    speculation, the acceptance rate, mean acceptance length and each draft
    position's acceptance rate over the interval (not since the start)."""

    def __init__(self, interval_s: float | None, log: logging.Logger):
        self.interval_s = interval_s
        self.log = log
        self._last_time = time.monotonic()
        self._last: EngineStats | None = None

    def maybe_log(self, stats: Callable[[], EngineStats]) -> None:
        now = time.monotonic()
        if self.interval_s is None or now - self._last_time < self.interval_s:
            return
        e, seconds = stats(), max(now - self._last_time, 1e-9)
        last = self._last or EngineStats(False, 0, 0, 0.0, SpeculationMetrics(0))
        r, before = e.requests, last.requests
        self.log.info(
            "Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, "
            "Running: %d reqs, Waiting: %d reqs, KV cache usage: %.1f%%",
            (r.prompt_tokens - before.prompt_tokens) / seconds,
            (r.generation_tokens - before.generation_tokens) / seconds,
            e.num_running,
            e.num_waiting,
            100 * e.kv_cache_usage,
        )
        if e.speculation.num_speculative_tokens:
            self.log.info("%s", _interval_speculation(e.speculation, last.speculation))
        self._last_time, self._last = now, e


def _interval_speculation(now: SpeculationMetrics, before: SpeculationMetrics) -> str:
    """The speculation line of one interval: what ``now`` adds to ``before``."""
    drafts = now.num_drafts - before.num_drafts
    drafted = now.num_draft_tokens - before.num_draft_tokens
    accepted = now.num_accepted_tokens - before.num_accepted_tokens
    old = before.accepted_per_position or [0] * len(now.accepted_per_position)
    per_position = [
        f"{(a - b) / drafts:.3f}" if drafts else "-"
        for a, b in zip(now.accepted_per_position, old, strict=True)
    ]
    rate = f"{accepted / drafted:.1%}" if drafted else "-"
    length = f"{1 + accepted / drafts:.2f}" if drafts else "-"
    return (
        f"Speculation: acceptance rate {rate}, mean acceptance length {length}, "
        f"accepted {accepted} of {drafted} draft tokens, per-position acceptance rate "
        f"{', '.join(per_position)}, chosen k {now.chosen_k}"
    )
