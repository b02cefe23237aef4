"""Reading the tensors of a Hugging Face checkpoint folder.

A folder holds either one ``model.safetensors`` or several shards listed by
``model.safetensors.index.json``. Every problem is reported as a
CheckpointError that names the file or tensor at fault.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from model_runtime.errors import CheckpointError

INDEX_FILE = "model.safetensors.index.json"
LOADABLE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def safetensors_files(folder: Path) -> list[Path]:
    """The weight files of a checkpoint, checked to exist."""
    index = folder / INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise CheckpointError(f"{index} is not a valid safetensors index: {e}") from e
        files = [folder / name for name in sorted(set(weight_map.values()))]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise CheckpointError(
                f"{index} lists weight files that are not in {folder}: {', '.join(missing)}"
            )
        return files
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        hint = (
            " (only PyTorch .bin weights were found; save them as safetensors)"
            if any(folder.glob("*.bin"))
            else ""
        )
        raise CheckpointError(f"{folder} holds no *.safetensors weight files{hint}")
    return files


def iterate_tensors(folder: Path) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) for every tensor of the checkpoint, one file at a time."""
    for path in safetensors_files(folder):
        try:
            with safe_open(str(path), framework="pt") as f:
                for name in f.keys():
                    tensor = f.get_tensor(name)
                    if tensor.dtype not in LOADABLE_DTYPES:
                        raise CheckpointError(
                            f"tensor {name} in {path.name} has dtype {tensor.dtype}; only float32, "
                            f"float16 and bfloat16 checkpoints are supported (no quantized weights)"
                        )
                    yield name, tensor
        except SafetensorError as e:
            raise CheckpointError(f"cannot read {path}: {e}") from e
