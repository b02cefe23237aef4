"""The ``specserve`` command."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from functools import partial

from draft_worker import service as draft_service
from draft_worker.worker import DraftWorkerConfig
from model_runtime.errors import CheckpointError, UnsupportedModelError
from model_runtime.executors import PlacementError
from model_runtime.specs import ParallelConfig, RunnerSpec
from protos.tls import TlsConfig
from router.service_config import RouterConfig
from specserve.arguments import add_config_arguments, config_from_args
from specserve.commands.generate import GenerateConfig, generate
from specserve.commands.http_server import HttpConfig
from specserve.commands.serve import ServeConfig
from specserve.launch import ServiceStartError, die_with_parent
from target_worker import service as target_service
from target_worker.worker import TargetWorkerConfig
from worker_base.serve import ServerConfig


def _run_generate(args: argparse.Namespace) -> int:
    text, summary = generate(config_from_args(GenerateConfig, args))
    print(text)
    if summary:
        print(summary, file=sys.stderr)
    return 0


def _run_worker(serve: Callable[..., None], worker_config: type, args: argparse.Namespace) -> int:
    """A draft or target worker service: where it listens, its runner, the
    worker's own config and its ranks, all from the flags."""
    configs = (ServerConfig, RunnerSpec, worker_config, ParallelConfig, TlsConfig)
    serve(*(config_from_args(c, args) for c in configs))
    return 0


def _run_serve(args: argparse.Namespace) -> int:
    from specserve.commands.serve import deprecated_flags_message, serve

    if args.model_flag is not None:  # --model, as vLLM's launch scripts pass it
        if args.model is not None and args.model != args.model_flag:
            print(
                f"specserve serve: error: the model is given twice: {args.model!r} and "
                f"--model {args.model_flag!r}",
                file=sys.stderr,
            )
            return 2
        args.model = args.model_flag
    if args.speculative_model is not None or args.num_speculative_tokens is not None:
        print(
            f"specserve serve: error: "
            f"{deprecated_flags_message(args.speculative_model, args.num_speculative_tokens)}",
            file=sys.stderr,
        )
        return 2
    serve(
        config_from_args(ServeConfig, args),
        config_from_args(ParallelConfig, args),
        config_from_args(TlsConfig, args),
        config_from_args(HttpConfig, args),
    )
    return 0


def _run_router(args: argparse.Namespace) -> int:
    from router.service import serve

    serve(config_from_args(RouterConfig, args), config_from_args(TlsConfig, args))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specserve", description="Speculative decoding with a separate draft model."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    gen = commands.add_parser(
        "generate", help="complete a prompt (greedy by default), with speculation if configured"
    )
    add_config_arguments(gen, GenerateConfig)
    gen.set_defaults(run=_run_generate)
    for name, what, serve, worker_config in (
        ("draft-worker", "a draft", draft_service.serve, DraftWorkerConfig),
        ("target-worker", "a target", target_service.serve, TargetWorkerConfig),
    ):
        worker = commands.add_parser(name, help=f"serve {what} model over gRPC")
        for worker_part in (RunnerSpec, ServerConfig, worker_config, ParallelConfig, TlsConfig):
            add_config_arguments(worker, worker_part, skip={"use_triton"})
        worker.set_defaults(run=partial(_run_worker, serve, worker_config))
    serve_parser = commands.add_parser(
        "serve", help="serve a model (and its draft) behind an OpenAI-compatible HTTP API"
    )
    for serve_part in (ServeConfig, ParallelConfig, TlsConfig, HttpConfig):
        add_config_arguments(serve_parser, serve_part)
    serve_parser.add_argument("--model", dest="model_flag", help="the model, as a flag")
    for old in ("speculative_model", "num_speculative_tokens"):
        serve_parser.add_argument(
            f"--{old}",
            f"--{old.replace('_', '-')}",
            dest=old,
            help=argparse.SUPPRESS,
            type=int if old == "num_speculative_tokens" else str,
            default=None,
        )
    serve_parser.set_defaults(run=_run_serve)

    router = commands.add_parser("router", help="serve the gRPC Router in front of workers")
    for router_part in (RouterConfig, TlsConfig):
        add_config_arguments(router, router_part)
    router.set_defaults(run=_run_router)
    return parser


# Long-running services log what they do (statistics, lost workers) to stderr.
SERVICES = ("serve", "router", "draft-worker", "target-worker")


def run_command(argv: list[str] | None = None) -> None:
    """The console script: run ``main``; a service then exits at once once it has
    drained, without waiting on threads still parked in cancelled streams."""
    code = main(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in SERVICES:
        logging.shutdown()
        os._exit(code)
    sys.exit(code)


def main(argv: list[str] | None = None) -> int:
    die_with_parent()
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command in SERVICES:
        logging.basicConfig(
            level=logging.INFO, format="%(levelname)s %(asctime)s %(name)s: %(message)s"
        )
    try:
        return int(args.run(args))
    except (
        ValueError,
        CheckpointError,
        UnsupportedModelError,
        OSError,
        ServiceStartError,
        PlacementError,
    ) as e:
        print(f"specserve {args.command}: error: {e}", file=sys.stderr)
        return 2
