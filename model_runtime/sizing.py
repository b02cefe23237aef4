"""A model's KV cache: how many blocks fit (``gpu_memory_utilization`` of a
GPU, or a byte budget on CPUs, after the weights of every model that shares
the device), and the cache itself, shaped for the model's shard."""

from __future__ import annotations

import torch

from model_runtime.kv_cache import PagedKVCache, blocks_for
from model_runtime.models.llama import LlamaForCausalLM

# Kept free on a GPU for activations and the sampler's [rows, vocab] tensors.
GPU_ACTIVATION_RESERVE = 2 << 30


def weight_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def _geometry(model: LlamaForCausalLM) -> tuple[int, int, int]:
    """(layers, kv heads of this rank, head dim) of the model's cache."""
    return model.config.num_hidden_layers, model.num_kv_heads_per_rank, model.config.head_dim


def kv_bytes_per_block(model: LlamaForCausalLM, block_size: int) -> int:
    return PagedKVCache.bytes_per_block(*_geometry(model), block_size, model.lm_head.weight.dtype)


def cache_for(
    model: LlamaForCausalLM, num_blocks: int, block_size: int, device: torch.device
) -> PagedKVCache:
    """A cache of ``num_blocks`` blocks for the model, in its dtype."""
    dtype = model.lm_head.weight.dtype
    return PagedKVCache(*_geometry(model), num_blocks, block_size, dtype, device)


def num_kv_blocks(
    models: list[LlamaForCausalLM],
    device: torch.device,
    block_size: int,
    max_len: int,
    max_num_seqs: int,
    gpu_memory_utilization: float,
    cpu_memory_bytes: int,
) -> int:
    """Blocks that each model's cache gets (the same number for all of them).

    Never more than ``max_num_seqs`` sequences of ``max_len`` tokens need;
    ValueError when not even one such sequence fits.
    """
    per_block = sum(kv_bytes_per_block(m, block_size) for m in models)
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        budget = int(total * gpu_memory_utilization) - (total - free) - GPU_ACTIVATION_RESERVE
        where = f"{gpu_memory_utilization} of the GPU's {total >> 20} MiB"
    else:
        budget = cpu_memory_bytes - sum(weight_bytes(m) for m in models)
        where = f"cpu_memory_bytes ({cpu_memory_bytes >> 20} MiB)"
    one_sequence = blocks_for(max_len, block_size)
    blocks = min(budget // per_block, max_num_seqs * one_sequence)
    if blocks < one_sequence:
        raise ValueError(
            f"{where} leaves room for {max(blocks, 0)} KV blocks after the weights; one sequence "
            f"of {max_len} tokens needs {one_sequence}: raise the memory budget or lower "
            "max_model_len"
        )
    return int(blocks)
