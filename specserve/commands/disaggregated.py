"""``specserve serve --disaggregated``: the engine's target worker, draft worker
and router as separate processes on loopback, talking gRPC, exactly as a
cluster deploys them. Each gets the flags its command takes from the one
EngineConfig, and lengths as in one process: the target holds the engine's
max_model_len, the draft as much of it as its model allows."""

from __future__ import annotations

from contextlib import ExitStack

from protos.tls import PLAIN, TlsConfig
from router.config import EngineConfig
from specserve.launch import ServiceProcess
from specserve.local_workers import DRAFT_CAPTURE_LEN, draft_length, verify_capture_len

# With --disaggregated on one GPU the draft worker starts first and may use this
# share of the GPU's memory; the target takes the rest of gpu_memory_utilization.
DRAFT_GPU_SHARE = 0.1


def worker_flags(
    engine: EngineConfig,
    model: str,
    revision: str | None,
    max_model_len: int | None,
    tensor_parallel_size: int,
    memory: float,
    capture_query_len: int = 1,
) -> list[str]:
    """The flags of one worker command: its model and length, the runner flags
    both workers share, the steps it captures, and where its ranks run."""
    runner, parallel = engine.runner, engine.parallel
    flags = ["--model", model, "--host", "127.0.0.1", "-tp", str(tensor_parallel_size)]
    flags += ["--capture-query-len", str(capture_query_len)]
    flags += ["--dtype", runner.dtype, "--device", runner.device, "--seed", str(engine.seed)]
    flags += ["--gpu-memory-utilization", str(memory)]
    flags += ["--placement-timeout-s", str(parallel.placement_timeout_s)]
    flags += ["--enforce-eager"] if runner.enforce_eager else []
    for flag, value in (
        ("--revision", revision),
        ("--max-model-len", max_model_len),
        ("--distributed-executor-backend", parallel.distributed_executor_backend),
        ("--ray-address", parallel.ray_address),
    ):
        flags += [] if value is None else [flag, str(value)]
    return flags


def router_flags(engine: EngineConfig) -> list[str]:
    flags = ["router", "--host", "127.0.0.1"]
    if engine.log_stats_interval_s is None:
        return [*flags, "--disable-log-stats"]
    return [*flags, "--log-stats-interval-s", str(engine.log_stats_interval_s)]


def start_processes(
    engine: EngineConfig, stack: ExitStack, tls: TlsConfig = PLAIN, token: str | None = None
) -> str:
    """Start the worker and router processes of ``engine`` on loopback (stopped when
    ``stack`` closes, router first), secured by ``tls`` (and the router's API by
    ``token``); return the router's address."""

    def start(command: str, flags: list[str]) -> str:
        process = ServiceProcess(command, *flags, *tls.flags(), echo_prefix=command)
        stack.callback(process.stop)
        return process.wait_ready()

    spec, length = engine.speculative, engine.requested_max_model_len
    router_args, workers = [*router_flags(engine), *tls.flags()], []
    if spec is not None:
        draft_len = draft_length(length, spec.model, spec.revision)
        draft = start(
            "draft-worker",
            worker_flags(
                engine,
                spec.model,
                spec.revision,
                draft_len,
                spec.draft_tensor_parallel_size,
                DRAFT_GPU_SHARE,
                DRAFT_CAPTURE_LEN,
            ),
        )
        router_args += ["--draft-workers", draft]
        router_args += ["--num-speculative-tokens", str(spec.num_speculative_tokens)]
        workers.append(f"draft worker on {draft}")
    runner = engine.runner
    target = start(
        "target-worker",
        worker_flags(
            engine,
            runner.model,
            runner.revision,
            length,
            engine.parallel.tensor_parallel_size,
            runner.gpu_memory_utilization,
            verify_capture_len(engine),
        ),
    )
    # The token travels in the environment: a command line is visible to every user.
    env = None if token is None else {"SPECSERVE_ROUTER_TOKEN": token}
    router = ServiceProcess(*router_args, "--target-workers", target, echo_prefix="router", env=env)
    stack.callback(router.stop)
    address = router.wait_ready()
    print(", ".join([f"router on {address}, target worker on {target}", *workers]), flush=True)
    return address
