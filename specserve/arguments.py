"""Command-line flags built from config dataclasses, so help is written once,
and the flags whose values need parsing.

Each field becomes ``--field-name`` and, for names with underscores, also
``--field_name`` (vLLM accepts both spellings). Field metadata may carry
``help``, ``aliases`` (extra flags such as ``-tp``), ``choices`` and
``positional`` (a positional argument, optional when the field has a default).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from router.config import SpeculativeConfig

T = TypeVar("T")


def _scalar_type(hint: Any) -> Any:
    """int for ``int | None``; the hint itself for plain types."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        assert len(args) == 1, f"unsupported flag type {hint}"
        return args[0]
    return hint


def add_config_arguments(
    parser: argparse.ArgumentParser,
    config_cls: type,
    skip: set[str] = frozenset(),  # type: ignore[assignment]
) -> None:
    """Add one flag (or positional) per field of the dataclass ``config_cls``
    (except ``skip``, fields another config on the same parser already has)."""
    hints = typing.get_type_hints(config_cls)
    for f in dataclasses.fields(config_cls):
        if f.name in skip:
            continue
        kind = _scalar_type(hints[f.name])
        has_default = f.default is not dataclasses.MISSING
        options: dict[str, Any] = {"help": f.metadata.get("help", "")}
        if has_default:
            options["default"] = f.default
            if options["help"] and f.default is not None:
                options["help"] += f" (default: {f.default})"
        if "choices" in f.metadata:
            options["choices"] = f.metadata["choices"]
        if f.metadata.get("positional"):
            if has_default:
                options["nargs"] = "?"
            parser.add_argument(f.name, type=kind, **options)
            continue
        names = [*f.metadata.get("aliases", ()), "--" + f.name.replace("_", "-")]
        if "_" in f.name:
            names.append("--" + f.name)
        if kind is bool:
            options["action"] = argparse.BooleanOptionalAction
        else:
            options["type"] = kind
            options["metavar"] = f.name.upper()
        parser.add_argument(*names, dest=f.name, required=not has_default, **options)


def flag_of(config_cls: type, name: str, default: Any = dataclasses.MISSING) -> Any:
    """A field with the flag of ``config_cls``'s field ``name``: its help,
    choices and default, written once there (``default`` overrides the last)."""
    (source,) = [f for f in dataclasses.fields(config_cls) if f.name == name]
    if default is dataclasses.MISSING:
        default = source.default
    return dataclasses.field(default=default, metadata=source.metadata)


def config_from_args(config_cls: type[T], args: argparse.Namespace) -> T:
    """Build ``config_cls`` from parsed arguments; its own validation runs."""
    names = [f.name for f in dataclasses.fields(config_cls)]  # type: ignore[arg-type]
    return config_cls(**{name: getattr(args, name) for name in names if hasattr(args, name)})


def speculative_config_from_flag(value: str | None) -> SpeculativeConfig | None:
    """``--speculative_config``: JSON text or the path of a JSON file (None: off)."""
    if not value:
        return None
    text = Path(value).read_text() if Path(value).is_file() else value
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"--speculative_config is not valid JSON: {e}") from e
    if not isinstance(parsed, dict):
        raise ValueError("--speculative_config must be a JSON object")
    return SpeculativeConfig.from_dict(parsed)
