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
import os
import socket
from contextlib import ExitStack
from dataclasses import dataclass, field

from model_runtime.executors import ParallelConfig
from model_runtime.resolve import DEFAULT_DRAFT, DEFAULT_TARGET
from router.backends import Backend, LocalBackend, RouterBackend
from router.config import EngineConfig, SpeculativeConfig
from router.engine import LLMEngine
from router.generate import parse_speculative_config
from router.launch import ServiceProcess
from router.loop import EngineLoop

DEPRECATED = ("speculative_model", "num_speculative_tokens")
# With --disaggregated on one GPU the draft worker starts first and may use this
# share of the GPU's memory; the target takes the rest of gpu_memory_utilization.
DRAFT_GPU_SHARE = 0.1
GRACE_S = 5


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

    def __post_init__(self) -> None:
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
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(
                f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}"
            )

    def engine_config(self, parallel: ParallelConfig) -> EngineConfig:
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
            tensor_parallel_size=parallel.tensor_parallel_size,
            distributed_executor_backend=parallel.distributed_executor_backend,
            ray_address=parallel.ray_address,
            log_stats_interval_s=None if self.disable_log_stats else self.log_stats_interval_s,
        )


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


def start_processes(engine: EngineConfig, stack: ExitStack) -> str:
    """Start the worker and router processes of ``engine`` on loopback (stopped when
    ``stack`` closes, router first); return the router's address."""

    def start(*args: str, memory: float) -> str:
        shared = ["--dtype", engine.dtype, "--device", engine.device, "--seed", str(engine.seed)]
        shared += ["--gpu-memory-utilization", str(memory)]
        if engine.max_model_len is not None:
            shared += ["--max-model-len", str(engine.max_model_len)]
        process = ServiceProcess(*args, *shared, echo_prefix=args[0])
        stack.callback(process.stop)
        return process.wait_ready()

    spec = engine.speculative
    placement = []  # where tensor-parallel ranks run
    if engine.distributed_executor_backend is not None:
        placement += ["--distributed-executor-backend", engine.distributed_executor_backend]
    if engine.ray_address is not None:
        placement += ["--ray-address", engine.ray_address]
    router_args = ["router", "--host", "127.0.0.1"]
    if engine.log_stats_interval_s is None:
        router_args += ["--disable-log-stats"]
    else:
        router_args += ["--log-stats-interval-s", str(engine.log_stats_interval_s)]
    target_memory = engine.gpu_memory_utilization
    if spec is not None:
        draft = start(
            "draft-worker",
            *("--model", spec.model, "--host", "127.0.0.1"),
            *("-tp", str(spec.draft_tensor_parallel_size), *placement),
            memory=DRAFT_GPU_SHARE,
        )
        router_args += ["--draft-workers", draft]
        router_args += ["--num-speculative-tokens", str(spec.num_speculative_tokens)]
    target = start(
        "target-worker",
        "--model",
        engine.model,
        "--host",
        "127.0.0.1",
        *("-tp", str(engine.tensor_parallel_size), *placement),
        memory=target_memory,
    )
    router = ServiceProcess(*router_args, "--target-workers", target, echo_prefix="router")
    stack.callback(router.stop)
    address = router.wait_ready()
    print(
        f"router on {address}, target worker on {target}"
        + (f", draft worker on {draft}" if spec is not None else ""),
        flush=True,
    )
    return address


def serve(config: ServeConfig, parallel: ParallelConfig) -> None:
    # The HTTP stack is imported here, not above: the worker and router
    # commands share this CLI (and its parser imports this module) without it.
    import uvicorn

    from router.gateway import build_app

    with ExitStack() as stack:
        backend: Backend
        if config.router is not None:
            backend = RouterBackend(config.router, config.tokenizer)
            default_name = config.model or backend.model
        else:
            engine_config = config.engine_config(parallel)  # validates before models load
            default_name = engine_config.model
            if config.disaggregated:
                backend = RouterBackend(start_processes(engine_config, stack))
            else:
                backend = LocalBackend(EngineLoop(LLMEngine(engine_config)))
        stack.callback(backend.close)
        api_key = config.api_key or os.environ.get("SPECSERVE_API_KEY")
        app = build_app(backend, config.served_model_name or default_name, api_key)
        sock = socket.socket(socket.AF_INET6 if ":" in config.host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((config.host, config.port))
        sock.listen(128)
        print(f"gateway ready on {config.host}:{sock.getsockname()[1]}", flush=True)
        # Open keep-alive connections get GRACE_S to finish on SIGTERM, not forever.
        server = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=GRACE_S)
        uvicorn.Server(server).run(sockets=[sock])
