"""The one way a runner is built: checkpoint, then KV budget, then runner.

Every path goes through ``build_runners``: the in-process engine (target and
draft on one device), both worker services, and every tensor-parallel rank
(which passes its group). The device rule, the length checks and the memory
budget live here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from model_runtime.batch import BatchLimits
from model_runtime.config import ModelConfig
from model_runtime.distributed import SINGLE_DEVICE, TensorParallelGroup
from model_runtime.kv_cache import blocks_for
from model_runtime.loader import load_model
from model_runtime.resolve import resolve_model
from model_runtime.runner import ModelRunner
from model_runtime.sizing import cache_for, num_kv_blocks
from model_runtime.specs import RunnerSpec


def resolve_device(name: str, gpu_index: int = 0) -> torch.device:
    """The device ``name`` means: ``auto`` is GPU ``gpu_index`` when CUDA is
    available, else the CPU; anything else is a torch device string."""
    if name == "auto":
        return torch.device(f"cuda:{gpu_index}" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(name)
    except RuntimeError as e:
        raise ValueError(f"device {name!r} is not a torch device (cpu, cuda, cuda:1, ...)") from e


def allowed_length(model: str, revision: str | None = None) -> int:
    """The longest sequence a checkpoint allows (its max_position_embeddings)."""
    folder = resolve_model(model, revision)
    return ModelConfig.from_pretrained(folder).max_position_embeddings


def model_length(spec: RunnerSpec, config: ModelConfig) -> int:
    """The longest sequence the runner holds: ``spec.max_model_len``, which the
    model must allow, or the model's own length."""
    limit = config.max_position_embeddings
    if spec.max_model_len is not None and spec.max_model_len > limit:
        raise ValueError(
            f"max_model_len {spec.max_model_len} exceeds what {spec.model} allows "
            f"({limit} tokens): lower max_model_len"
        )
    return spec.max_model_len or limit


@dataclass(frozen=True)
class _Checked:
    spec: RunnerSpec
    folder: str
    max_len: int


def build_runners(
    specs: Sequence[RunnerSpec],
    tp: TensorParallelGroup = SINGLE_DEVICE,
    gpu_index: int = 0,
) -> list[ModelRunner]:
    """A runner for each spec; the models share one device and one budget.

    Every spec is checked before any weights load. All caches get the same
    number of blocks (so a sequence fits in all or none), sized from the first
    spec's budget after the weights of every model; with a tensor-parallel
    group, each rank loads its shard and the ranks agree on the smallest count.
    """
    if not specs:
        raise ValueError("build_runners needs at least one RunnerSpec")
    first = specs[0]
    for spec in specs[1:]:
        if _budget(spec) != _budget(first):
            raise ValueError(
                f"{spec.model} and {first.model} share a device, so they need the same "
                "device, block size and memory budget"
            )
    checked = []
    for spec in specs:
        folder = resolve_model(spec.model, spec.revision)
        checked.append(
            _Checked(spec, str(folder), model_length(spec, ModelConfig.from_pretrained(folder)))
        )
    longest = max(c.max_len for c in checked)
    _check_fixed_cache(first, longest)
    limits = [BatchLimits(c.spec.batched_tokens(c.max_len), c.spec.max_num_seqs) for c in checked]
    device = resolve_device(first.device, gpu_index)
    models = [load_model(c.folder, c.spec.dtype, device, tp, c.max_len) for c in checked]
    blocks = first.num_kv_blocks or num_kv_blocks(
        models,
        device,
        first.block_size,
        longest,
        first.max_num_seqs,
        first.gpu_memory_utilization,
        first.cpu_memory_bytes // tp.size,  # the ranks of one CPU share its memory
    )
    blocks = tp.min(blocks, device)  # every rank holds the same sequences
    runners = [
        ModelRunner(model, cache_for(model, blocks, first.block_size, device), c.max_len, limit)
        for model, c, limit in zip(models, checked, limits, strict=True)
    ]
    if device.type == "cuda":
        max_batch = min(first.max_num_seqs, MAX_GRAPH_BATCH)
        for runner, c in zip(runners, checked, strict=True):
            runner.ready_steps(max_batch, c.spec.capture_query_len, first.enforce_eager)
    return runners


# The largest batch a CUDA graph is captured for; larger ones run eagerly.
MAX_GRAPH_BATCH = 256


def build_runner(
    spec: RunnerSpec, tp: TensorParallelGroup = SINGLE_DEVICE, gpu_index: int = 0
) -> ModelRunner:
    """The runner of one model (see ``build_runners``)."""
    (runner,) = build_runners([spec], tp, gpu_index)
    return runner


def _check_fixed_cache(spec: RunnerSpec, max_len: int) -> None:
    """ValueError for a ``num_kv_blocks`` too small for one sequence of
    ``max_len`` tokens (the budget's own sizing checks the same)."""
    if spec.num_kv_blocks is None:
        return
    needed = blocks_for(max_len, spec.block_size)
    if spec.num_kv_blocks < needed:
        raise ValueError(
            f"num_kv_blocks {spec.num_kv_blocks} cannot hold one sequence of max_model_len "
            f"{max_len} ({needed} blocks of {spec.block_size} tokens): raise num_kv_blocks "
            "or lower max_model_len"
        )


def _budget(spec: RunnerSpec) -> tuple[object, ...]:
    return (
        spec.device,
        spec.block_size,
        spec.num_kv_blocks,
        spec.gpu_memory_utilization,
        spec.cpu_memory_bytes,
        spec.max_num_seqs,
        spec.max_num_batched_tokens,
        spec.enforce_eager,
    )
