"""``specserve serve``: everything one machine needs behind an OpenAI-compatible
HTTP server (the seed's online mode), in one of three shapes:

- by default the target worker, the draft worker and the engine run in this
  process, the gateway in front;
- ``--disaggregated`` starts the target worker, the draft worker and the
  router as separate processes on loopback, talking gRPC, exactly as a
  cluster deploys them, and runs the gateway in front of the router;
- ``--router host:port`` runs only the gateway, in front of a Router service
  that is already running.
"""

from __future__ import annotations

import json
import logging
import os
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from typing import Any

from gateway.backends import Backend, LocalBackend
from gateway.router_backend import RouterBackend
from model_runtime.heap import freeze_startup_heap
from model_runtime.resolve import DEFAULT_DRAFT, DEFAULT_TARGET
from model_runtime.specs import ParallelConfig, RunnerSpec
from protos.server import DEFAULT_GRACE_S
from protos.tls import PLAIN, TlsConfig
from router.config import EngineConfig, SpeculativeConfig
from router.engine import LLMEngine
from router.loop import EngineLoop
from specserve.arguments import flag_of, speculative_config_from_flag
from specserve.commands.disaggregated import start_processes
from specserve.commands.http_server import HttpConfig, run_http
from specserve.local_workers import build_local_workers

logger = logging.getLogger(__name__)

# How long serve waits for its router to answer before it serves (503s until then).
ROUTER_WAIT_S = 5.0
# Request bodies larger than this are refused unread (the gateway's default).
MAX_REQUEST_BODY_BYTES = 16 << 20


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
    max_model_len: int | None = flag_of(RunnerSpec, "max_model_len")
    gpu_memory_utilization: float = flag_of(RunnerSpec, "gpu_memory_utilization")
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
    protect_metrics: bool = field(
        default=False, metadata={"help": "with an API key, /metrics requires it too"}
    )
    router_token: str | None = field(
        default=None,
        metadata={
            "help": "the bearer token the Router API requires (or set SPECSERVE_ROUTER_TOKEN); "
            "with --disaggregated, the router is started requiring it"
        },
    )
    block_size: int = flag_of(RunnerSpec, "block_size")
    max_num_seqs: int = flag_of(RunnerSpec, "max_num_seqs")
    max_num_batched_tokens: int | None = flag_of(RunnerSpec, "max_num_batched_tokens")
    enable_prefix_caching: bool = field(
        default=False,
        metadata={"help": "not supported yet: every prompt is prefilled in full"},
    )
    trust_remote_code: bool = field(
        default=False,
        metadata={"help": "accepted; no model code is run: specserve implements the architecture"},
    )
    generation_config: str = field(
        default="vllm",
        metadata={
            "help": "vllm: sampling defaults are the API's own; the model's "
            "generation_config.json is not read (auto is not supported yet)"
        },
    )
    dtype: str = flag_of(RunnerSpec, "dtype")
    device: str = flag_of(RunnerSpec, "device")
    enforce_eager: bool = flag_of(RunnerSpec, "enforce_eager")
    router: str | None = field(
        default=None,
        metadata={"help": "run only the gateway, in front of the Router service at host:port"},
    )
    tokenizer: str | None = field(
        default=None,
        metadata={"help": "with --router: tokenizer folder or hub id; default: the router's model"},
    )
    disable_log_stats: bool = field(
        default=False, metadata={"help": "do not log throughput and speculation statistics"}
    )
    log_stats_interval_s: float = field(
        default=10.0, metadata={"help": "seconds between statistics log lines"}
    )
    disaggregated: bool = field(
        default=False,
        metadata={
            "help": "run the target worker, draft worker and router as separate processes "
            "on loopback (as a cluster deploys them), the gateway in front"
        },
    )
    max_request_body_bytes: int = field(
        default=MAX_REQUEST_BODY_BYTES,
        metadata={"help": "larger request bodies are refused (413) before they are read"},
    )
    grace_s: float = field(
        default=DEFAULT_GRACE_S,
        metadata={
            "help": "on SIGTERM, how long streams may finish; one still open is cut "
            "with an error event just before"
        },
    )
    max_pending_requests: int = field(
        default=1024,
        metadata={"help": "requests in flight in this process before 429 (a router has its own)"},
    )

    def __post_init__(self) -> None:
        for name in ("max_request_body_bytes", "max_pending_requests"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.grace_s < 0:
            raise ValueError(f"grace_s must be >= 0, got {self.grace_s}")
        if self.router is not None:
            if self.disaggregated:
                raise ValueError("--router and --disaggregated exclude each other")
            if self.speculative_config is not None:
                raise ValueError(
                    "--speculative_config configures workers; with --router the router's "
                    "workers are already running: pass it to them"
                )
        elif self.tokenizer is not None:
            raise ValueError("--tokenizer is only for --router (the workers load their own)")
        if self.protect_metrics and self.resolved_api_key() is None:
            raise ValueError(
                "--protect-metrics needs an API key: pass --api-key or set SPECSERVE_API_KEY"
            )
        if self.enable_prefix_caching:
            raise ValueError(
                "--enable-prefix-caching is not supported yet: every prompt is prefilled "
                "in full; leave the flag out (or pass --no-enable-prefix-caching)"
            )
        if self.generation_config != "vllm":
            raise ValueError(
                f"--generation-config {self.generation_config!r} is not supported yet: only "
                "'vllm' (the API's own sampling defaults, as if the model had none)"
            )
        self.engine_config(ParallelConfig())  # checks the engine's fields before any loads

    def resolved_api_key(self) -> str | None:
        return self.api_key or os.environ.get("SPECSERVE_API_KEY") or None

    def engine_config(self, parallel: ParallelConfig) -> EngineConfig:
        spec = speculative_config_from_flag(self.speculative_config)
        if spec is None and self.model is None:  # the bundled pair speculates
            spec = SpeculativeConfig(DEFAULT_DRAFT, 5)
        config = EngineConfig.of(
            self.model or DEFAULT_TARGET,
            spec,
            max_model_len=self.max_model_len,
            dtype=self.dtype,
            device=self.device,
            enforce_eager=self.enforce_eager,
            seed=self.seed,
            gpu_memory_utilization=self.gpu_memory_utilization,
            block_size=self.block_size,
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            log_stats_interval_s=None if self.disable_log_stats else self.log_stats_interval_s,
        )
        return replace(config, parallel=parallel)


def deprecated_flags_message(speculative_model: str | None, num_tokens: int | None) -> str:
    """The error for vLLM's old flags, with the --speculative_config that replaces them."""
    equivalent = {
        "model": speculative_model or "DRAFT_MODEL",
        "num_speculative_tokens": num_tokens or 5,
        "method": "draft_model",
    }
    return (
        "--speculative_model and --num_speculative_tokens are no longer supported; pass "
        f"--speculative_config '{json.dumps(equivalent)}'"
    )


def serve(
    config: ServeConfig,
    parallel: ParallelConfig,
    tls: TlsConfig = PLAIN,
    http: HttpConfig | None = None,
) -> None:
    """Serve the gateway until SIGTERM, over the backend ``config`` asks for
    (``tls`` secures the gRPC between its processes, ``http`` the HTTP side)."""
    http = http or HttpConfig()
    http.apply_log_level()
    if config.trust_remote_code:
        logger.info("--trust-remote-code: no model code runs; specserve implements the model")
    with ExitStack() as stack:
        backend, default_name = _backend(config, parallel, tls, stack)
        stack.callback(backend.close)
        app = _app(config, backend, config.served_model_name or default_name, http)
        banner = _banner(config, parallel, backend)
        freeze_startup_heap("server")  # it serves until it exits (model_runtime/heap.py)
        run_http(app, http, config.host, config.port, config.grace_s, banner)


def _backend(
    config: ServeConfig, parallel: ParallelConfig, tls: TlsConfig, stack: ExitStack
) -> tuple[Backend, str | None]:
    """The backend of ``config``'s shape, and the model name it serves by default
    (None: the one the router reports)."""
    token = config.router_token or os.environ.get("SPECSERVE_ROUTER_TOKEN")
    if config.router is not None:
        remote = RouterBackend(config.router, config.tokenizer, tls, token)
        if not remote.wait_for_router(ROUTER_WAIT_S):
            logger.warning("%s; serving 503s until it does", remote.unready())
        return remote, config.model
    engine_config = config.engine_config(parallel)
    if config.disaggregated:
        address = start_processes(engine_config, stack, tls, token)
        remote = RouterBackend(address, tls=tls, token=token)
        remote.wait_for_router(ROUTER_WAIT_S)
        return remote, engine_config.model
    engine = LLMEngine(engine_config, build_local_workers(engine_config))
    return LocalBackend(EngineLoop(engine), config.max_pending_requests), engine_config.model


def _banner(config: ServeConfig, parallel: ParallelConfig, backend: Backend) -> str:
    """What the server serves, as its first log line says it."""
    if config.router is not None:
        return f"serving the Router at {config.router}"
    engine = config.engine_config(parallel)
    spec = engine.speculative
    drafting = (
        f"draft {spec.model}, up to {spec.num_speculative_tokens} drafts a round "
        f"({'adaptive' if spec.adaptive_k else 'fixed'} k)"
        if spec is not None
        else "no speculation"
    )
    where = "three processes over gRPC" if config.disaggregated else "in this process"
    text = f"serving {engine.model} ({drafting}), {where}"
    if isinstance(backend, LocalBackend):
        info = backend.loop.engine.workers.target.describe()
        text += f"; target KV cache: {info.num_blocks} blocks of {info.block_size} tokens"
    return text


def _app(
    config: ServeConfig, backend: Backend, served_model_name: str | None, http: HttpConfig
) -> Any:
    # The HTTP stack is imported here, not above: the worker and router
    # commands share this CLI (and its parser imports this module) without it.
    from gateway.app import build_app

    return build_app(
        backend,
        served_model_name,
        config.resolved_api_key(),
        config.max_request_body_bytes,
        protect_metrics=config.protect_metrics,
        cors=http.cors(),
        chat_template=http.template(),
        log_requests=not http.disable_log_requests,
        tool_call_parser=http.auto_tool_parser,
    )
