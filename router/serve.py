"""``specserve serve``: everything one machine needs behind an OpenAI-compatible
HTTP server — target worker, draft worker and the engine in this process, the
gateway in front (the seed's online mode)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

import uvicorn

from model_runtime.resolve import DEFAULT_DRAFT, DEFAULT_TARGET
from router.config import EngineConfig, SpeculativeConfig
from router.engine import LLMEngine
from router.gateway import build_app
from router.generate import parse_speculative_config
from router.loop import EngineLoop

DEPRECATED = ("speculative_model", "num_speculative_tokens")


@dataclass(frozen=True)
class ServeConfig:
    model: str | None = field(
        default=None,
        metadata={
            "help": "target model; default: the bundled pair, with speculation",
            "positional": True,
        },
    )
    host: str = field(default="0.0.0.0", metadata={"help": "address to listen on"})
    port: int = field(default=8000, metadata={"help": "port to listen on; 0 picks a free one"})
    seed: int = field(default=0, metadata={"help": "seed for requests without one"})
    tensor_parallel_size: int = field(
        default=1, metadata={"help": "GPUs for the target", "aliases": ["-tp"]}
    )
    max_model_len: int | None = field(default=None, metadata={"help": "context length"})
    gpu_memory_utilization: float = field(default=0.9, metadata={"help": "share of the GPU"})
    speculative_config: str | None = field(
        default=None,
        metadata={"help": 'JSON (or a JSON file): {"model": ..., "num_speculative_tokens": k}'},
    )
    served_model_name: str | None = field(
        default=None, metadata={"help": "model id the API reports; default: the model argument"}
    )
    api_key: str | None = field(
        default=None, metadata={"help": "require this bearer key (or set SPECSERVE_API_KEY)"}
    )
    dtype: str = field(default="auto", metadata={"help": "weight dtype"})
    device: str = field(default="auto", metadata={"help": "torch device; auto picks cuda"})

    def engine_config(self) -> EngineConfig:
        if self.speculative_config:
            spec = SpeculativeConfig.from_dict(parse_speculative_config(self.speculative_config))
        elif self.model is None:
            spec = SpeculativeConfig(DEFAULT_DRAFT, 5)
        else:
            spec = None
        return EngineConfig(
            model=self.model or DEFAULT_TARGET,
            speculative=spec,
            max_model_len=self.max_model_len,
            dtype=self.dtype,
            device=self.device,
            seed=self.seed,
            gpu_memory_utilization=self.gpu_memory_utilization,
            tensor_parallel_size=self.tensor_parallel_size,
        )


def deprecated_flags_message(speculative_model: str | None, num_tokens: int | None) -> str:
    """The error for vLLM's old flags, with the --speculative_config that replaces them."""
    equivalent = {
        "model": speculative_model or "DRAFT_MODEL",
        "num_speculative_tokens": num_tokens or 5,
        "method": "draft_model",
    }
    import json

    return (
        "--speculative_model and --num_speculative_tokens are no longer supported; pass "
        f"--speculative_config '{json.dumps(equivalent)}'"
    )


def serve(config: ServeConfig) -> None:
    engine_config = config.engine_config()  # validates before any model loads
    engine = LLMEngine(engine_config)
    loop = EngineLoop(engine)
    api_key = config.api_key or os.environ.get("SPECSERVE_API_KEY")
    app = build_app(loop, config.served_model_name or engine_config.model, api_key)
    sock = socket.socket(socket.AF_INET6 if ":" in config.host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((config.host, config.port))
    sock.listen(128)
    print(f"gateway ready on {config.host}:{sock.getsockname()[1]}", flush=True)
    try:
        uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
    finally:
        loop.stop()
