"""``specserve serve --disaggregated``: the engine's target worker, draft worker
and router as separate processes on loopback, talking gRPC, exactly as a
cluster deploys them. Each gets the flags its command takes from the one
EngineConfig, so the shapes serve the same thing."""

from __future__ import annotations

from contextlib import ExitStack

from router.config import EngineConfig
from specserve.launch import ServiceProcess

# With --disaggregated on one GPU the draft worker starts first and may use this
# share of the GPU's memory; the target takes the rest of gpu_memory_utilization.
DRAFT_GPU_SHARE = 0.1


def worker_flags(engine: EngineConfig, memory: float) -> list[str]:
    """The runner flags both workers share (the engine's length, not the model's)."""
    runner = engine.runner
    flags = ["--dtype", runner.dtype, "--device", runner.device, "--seed", str(engine.seed)]
    flags += ["--gpu-memory-utilization", str(memory)]
    if engine.max_model_len is not None:
        flags += ["--max-model-len", str(engine.max_model_len)]
    return flags


def placement_flags(engine: EngineConfig) -> list[str]:
    """Where tensor-parallel ranks run."""
    parallel, flags = engine.parallel, []
    if parallel.distributed_executor_backend is not None:
        flags += ["--distributed-executor-backend", parallel.distributed_executor_backend]
    if parallel.ray_address is not None:
        flags += ["--ray-address", parallel.ray_address]
    flags += ["--placement-timeout-s", str(parallel.placement_timeout_s)]
    return flags


def router_flags(engine: EngineConfig) -> list[str]:
    flags = ["router", "--host", "127.0.0.1"]
    if engine.log_stats_interval_s is None:
        return [*flags, "--disable-log-stats"]
    return [*flags, "--log-stats-interval-s", str(engine.log_stats_interval_s)]


def start_processes(engine: EngineConfig, stack: ExitStack) -> str:
    """Start the worker and router processes of ``engine`` on loopback (stopped when
    ``stack`` closes, router first); return the router's address."""

    def start(command: str, model: str, tp: int, memory: float) -> str:
        process = ServiceProcess(
            command,
            *("--model", model, "--host", "127.0.0.1", "-tp", str(tp)),
            *placement_flags(engine),
            *worker_flags(engine, memory),
            echo_prefix=command,
        )
        stack.callback(process.stop)
        return process.wait_ready()

    spec, router_args, workers = engine.speculative, router_flags(engine), []
    if spec is not None:
        draft = start("draft-worker", spec.model, spec.draft_tensor_parallel_size, DRAFT_GPU_SHARE)
        router_args += ["--draft-workers", draft]
        router_args += ["--num-speculative-tokens", str(spec.num_speculative_tokens)]
        workers.append(f"draft worker on {draft}")
    tp = engine.parallel.tensor_parallel_size
    target = start("target-worker", engine.model, tp, engine.runner.gpu_memory_utilization)
    router = ServiceProcess(*router_args, "--target-workers", target, echo_prefix="router")
    stack.callback(router.stop)
    address = router.wait_ready()
    print(", ".join([f"router on {address}, target worker on {target}", *workers]), flush=True)
    return address
