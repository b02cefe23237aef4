"""The ``specserve`` command."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from draft_worker.worker import DraftWorkerConfig
from model_runtime.errors import CheckpointError, UnsupportedModelError
from model_runtime.executors import PlacementError
from model_runtime.specs import ParallelConfig, RunnerSpec
from router.service import RouterConfig
from specserve.arguments import add_config_arguments, config_from_args
from specserve.commands.generate import GenerateConfig, generate
from specserve.commands.serve import ServeConfig
from specserve.launch import ServiceStartError
from target_worker.worker import TargetWorkerConfig
from worker_base.serve import ServerConfig

# Fields of a worker's RunnerSpec that are not flags: the engine sets them.
RUNNER_INTERNAL = {"revision", "lookahead_tokens"}


def _run_generate(args: argparse.Namespace) -> int:
    text, summary = generate(config_from_args(GenerateConfig, args))
    print(text)
    if summary:
        print(summary, file=sys.stderr)
    return 0


def _run_draft_worker(args: argparse.Namespace) -> int:
    from draft_worker.service import serve

    serve(
        config_from_args(ServerConfig, args),
        config_from_args(RunnerSpec, args),
        config_from_args(DraftWorkerConfig, args),
        config_from_args(ParallelConfig, args),
    )
    return 0


def _run_target_worker(args: argparse.Namespace) -> int:
    from target_worker.service import serve

    serve(
        config_from_args(ServerConfig, args),
        config_from_args(RunnerSpec, args),
        config_from_args(TargetWorkerConfig, args),
        config_from_args(ParallelConfig, args),
    )
    return 0


def _run_serve(args: argparse.Namespace) -> int:
    from specserve.commands.serve import deprecated_flags_message, serve

    if args.speculative_model is not None or args.num_speculative_tokens is not None:
        print(
            f"specserve serve: error: "
            f"{deprecated_flags_message(args.speculative_model, args.num_speculative_tokens)}",
            file=sys.stderr,
        )
        return 2
    serve(config_from_args(ServeConfig, args), config_from_args(ParallelConfig, args))
    return 0


def _run_router(args: argparse.Namespace) -> int:
    from router.service import serve

    serve(config_from_args(RouterConfig, args))
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
    draft = commands.add_parser("draft-worker", help="serve a draft model over gRPC")
    for draft_config in (RunnerSpec, ServerConfig, DraftWorkerConfig, ParallelConfig):
        add_config_arguments(draft, draft_config, skip=RUNNER_INTERNAL)
    draft.set_defaults(run=_run_draft_worker)
    target = commands.add_parser("target-worker", help="serve a target model over gRPC")
    for target_config in (RunnerSpec, ServerConfig, TargetWorkerConfig, ParallelConfig):
        add_config_arguments(target, target_config, skip=RUNNER_INTERNAL | {"use_triton"})
    target.set_defaults(run=_run_target_worker)
    serve_parser = commands.add_parser(
        "serve", help="serve a model (and its draft) behind an OpenAI-compatible HTTP API"
    )
    add_config_arguments(serve_parser, ServeConfig)
    add_config_arguments(serve_parser, ParallelConfig)
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
    add_config_arguments(router, RouterConfig)
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
