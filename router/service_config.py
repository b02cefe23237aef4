"""The Router service's configuration: its workers, where it listens, how it
secures and drains, and the name workers know it by."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

from protos.server import DEFAULT_GRACE_S
from router.discovery import split_addresses


@dataclass(frozen=True)
class RouterConfig:
    target_workers: str = field(
        metadata={"help": "target worker addresses, host:port[,host:port...]"}
    )
    draft_workers: str | None = field(
        default=None,
        metadata={
            "help": "draft worker addresses, host:port[,host:port...]; none: no speculation. "
            "An entry dns:///NAME:PORT (a Kubernetes headless Service) is resolved again "
            "every --discovery-interval-s and the pool follows its addresses"
        },
    )
    discovery_interval_s: float = field(
        default=10.0, metadata={"help": "seconds between lookups of dns:/// draft workers"}
    )
    num_speculative_tokens: int = field(default=5, metadata={"help": "drafts per round"})
    host: str = field(default="127.0.0.1", metadata={"help": "address to listen on"})
    port: int = field(default=0, metadata={"help": "port to listen on; 0 picks a free one"})
    grace_s: float = field(
        default=DEFAULT_GRACE_S,
        metadata={"help": "on SIGTERM, how long streams in flight may finish"},
    )
    overlap: bool = field(
        default=True,
        metadata={"help": "keep two micro-batches in flight: draft one while verifying the other"},
    )
    adaptive_k: bool = field(
        default=True,
        metadata={
            "help": "without overlap, choose each round's drafts (0 to "
            "--num-speculative-tokens) from the measured acceptance and step costs; "
            "--no-adaptive-k drafts --num-speculative-tokens every round"
        },
    )
    metrics_port: int | None = field(
        default=None, metadata={"help": "serve Prometheus metrics over HTTP on this port"}
    )
    max_pending_requests: int = field(
        default=1024, metadata={"help": "requests in flight before RESOURCE_EXHAUSTED"}
    )
    disable_log_stats: bool = field(
        default=False, metadata={"help": "do not log throughput and speculation statistics"}
    )
    log_stats_interval_s: float = field(
        default=10.0, metadata={"help": "seconds between statistics log lines"}
    )
    router_token: str | None = field(
        default=None,
        metadata={
            "help": "require `authorization: Bearer TOKEN` metadata on every Router call "
            "(or set SPECSERVE_ROUTER_TOKEN); health and reflection stay open"
        },
    )

    @staticmethod
    def addresses(value: str | None) -> list[str]:
        return [a.strip() for a in (value or "").split(",") if a.strip()]

    def __post_init__(self) -> None:
        targets, target_names = split_addresses(self.addresses(self.target_workers))
        if target_names:
            raise ValueError(
                "--target-workers takes host:port addresses, not dns:/// names: a target "
                "worker holds its requests' KV, so list each one"
            )
        if not targets:
            raise ValueError("--target-workers needs at least one host:port")
        split_addresses(self.addresses(self.draft_workers))  # raises for a malformed name
        if self.discovery_interval_s <= 0:
            raise ValueError(f"discovery_interval_s must be > 0, got {self.discovery_interval_s}")
        if self.max_pending_requests < 1:
            raise ValueError(f"max_pending_requests must be >= 1, got {self.max_pending_requests}")
        if self.num_speculative_tokens < 1:
            raise ValueError(
                f"num_speculative_tokens must be >= 1, got {self.num_speculative_tokens}"
            )


def router_name(port: int) -> str:
    """How workers know this router across its restarts: host and port (with
    a port picked at run time, the process: it cannot come back as itself)."""
    return f"{socket.gethostname()}:{port}" if port else f"{socket.gethostname()}:pid{os.getpid()}"
