"""Speculation counters, as vLLM reports them."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SpeculationMetrics:
    """Drafts (rounds that verified drafts), draft tokens, accepted tokens, and
    how often the draft at each position was accepted."""

    num_speculative_tokens: int
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_position: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.accepted_per_position = [0] * self.num_speculative_tokens

    def record(self, num_draft_tokens: int, num_accepted: int) -> None:
        self.num_drafts += 1
        self.num_draft_tokens += num_draft_tokens
        self.num_accepted_tokens += num_accepted
        for position in range(num_accepted):
            self.accepted_per_position[position] += 1

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
        }

    def summary(self) -> str:
        return (
            f"speculation: acceptance rate {self.acceptance_rate:.1%}, mean acceptance length "
            f"{self.mean_acceptance_length:.2f}, drafts {self.num_drafts}, draft tokens "
            f"{self.num_draft_tokens}, accepted {self.num_accepted_tokens}, per position "
            f"{self.accepted_per_position}"
        )
