"""The ``specserve`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from model_runtime.errors import CheckpointError, UnsupportedModelError
from router.arguments import add_config_arguments, config_from_args
from router.generate import GenerateConfig, generate

# Subcommands whose features are not built yet, and what they will do.
NOT_YET_AVAILABLE = {
    "serve": "the OpenAI-compatible server with speculative decoding",
    "router": "the gRPC router in front of draft and target worker pools",
    "draft-worker": "a gRPC draft worker",
    "target-worker": "a gRPC target worker",
}


def _run_generate(args: argparse.Namespace) -> int:
    text, summary = generate(config_from_args(GenerateConfig, args))
    print(text)
    if summary:
        print(summary, file=sys.stderr)
    return 0


def _not_yet(name: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        print(f"specserve {name} ({NOT_YET_AVAILABLE[name]}) is not yet available", file=sys.stderr)
        return 2

    return run


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
    for name, what in NOT_YET_AVAILABLE.items():
        stub = commands.add_parser(name, help=f"{what} (not yet available)")
        stub.set_defaults(run=_not_yet(name))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and args.command not in NOT_YET_AVAILABLE:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        return int(args.run(args))
    except (ValueError, CheckpointError, UnsupportedModelError, OSError) as e:
        print(f"specserve {args.command}: error: {e}", file=sys.stderr)
        return 2
