"""Building the draft and target workers of one machine, with KV caches sized
from the memory budget: ``gpu_memory_utilization`` of the GPU, or
``cpu_memory_bytes`` on CPUs, both models' weights counted."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from draft_worker.worker import DraftWorker, DraftWorkerConfig
from model_runtime.kv_cache import PagedKVCache, blocks_for
from model_runtime.loader import load_model
from model_runtime.models.llama import LlamaForCausalLM
from model_runtime.resolve import resolve_model
from model_runtime.runner import ModelRunner
from router.config import EngineConfig
from target_worker.worker import TargetWorker, TargetWorkerConfig

# Kept free on a GPU for activations and the sampler's [rows, vocab] tensors.
GPU_ACTIVATION_RESERVE = 2 << 30


@dataclass
class LocalWorkers:
    tokenizer: PreTrainedTokenizerBase
    target: TargetWorker
    draft: DraftWorker | None
    max_model_len: int
    num_blocks: int


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def check_same_tokenizer(target: PreTrainedTokenizerBase, draft: PreTrainedTokenizerBase) -> None:
    if target.get_vocab() != draft.get_vocab():
        raise ValueError(
            "the draft model's tokenizer differs from the target's; speculative decoding needs "
            "both to share one tokenizer: choose a draft from the target's model family"
        )


def _weight_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def _kv_bytes_per_block(model: LlamaForCausalLM, block_size: int) -> int:
    c = model.config
    dtype = model.lm_head.weight.dtype
    return PagedKVCache.bytes_per_block(
        c.num_hidden_layers, c.num_key_value_heads, c.head_dim, block_size, dtype
    )


def _num_blocks(
    config: EngineConfig, device: torch.device, models: list[LlamaForCausalLM], max_len: int
) -> int:
    per_block = sum(_kv_bytes_per_block(m, config.block_size) for m in models)
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        used = total - free
        budget = int(total * config.gpu_memory_utilization) - used - GPU_ACTIVATION_RESERVE
        where = f"{config.gpu_memory_utilization} of the GPU's {total >> 20} MiB"
    else:
        budget = config.cpu_memory_bytes - sum(_weight_bytes(m) for m in models)
        where = f"cpu_memory_bytes ({config.cpu_memory_bytes >> 20} MiB)"
    # Never more than every sequence at full length needs.
    useful = config.max_num_seqs * blocks_for(max_len, config.block_size)
    blocks = min(budget // per_block, useful)
    if blocks < blocks_for(max_len, config.block_size):
        raise ValueError(
            f"{where} leaves room for {max(blocks, 0)} KV blocks after the weights; one sequence "
            f"of max_model_len {max_len} needs {blocks_for(max_len, config.block_size)}: "
            "raise the memory budget or lower max_model_len"
        )
    return blocks


def build_local_workers(config: EngineConfig) -> LocalWorkers:
    device = resolve_device(config.device)
    target_dir = resolve_model(config.model)
    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    spec = config.speculative
    target_model = load_model(target_dir, config.dtype, device)
    models = [target_model]
    draft_model = None
    k = spec.num_speculative_tokens if spec else 0
    # The longest context the models allow: the target's own, and the draft's
    # less the k - 1 drafts it appends past the last token.
    limit = target_model.config.max_position_embeddings
    if spec is not None:
        draft_dir = resolve_model(spec.model, spec.revision)
        check_same_tokenizer(tokenizer, AutoTokenizer.from_pretrained(draft_dir))
        draft_model = load_model(draft_dir, config.dtype, device)
        limit = min(limit, draft_model.config.max_position_embeddings - k)
        models.append(draft_model)
    requested = [n for n in (config.max_model_len, spec and spec.max_model_len) if n]
    if any(n > limit for n in requested):
        raise ValueError(
            f"max_model_len {max(requested)} exceeds what the models allow ({limit} tokens)"
        )
    max_len = min([limit, *requested])
    num_blocks = config.num_kv_blocks_override or _num_blocks(
        config, device, models, max_len + k + 1
    )

    def runner(model: LlamaForCausalLM) -> ModelRunner:
        c = model.config
        cache = PagedKVCache(
            c.num_hidden_layers,
            c.num_key_value_heads,
            c.head_dim,
            num_blocks,
            config.block_size,
            model.lm_head.weight.dtype,
            device,
        )
        return ModelRunner(model, cache, c.max_position_embeddings)

    target = TargetWorker(runner(target_model), TargetWorkerConfig(seed=config.seed))
    draft = None
    if draft_model is not None:
        draft = DraftWorker(runner(draft_model), DraftWorkerConfig(config.draft_top_n, config.seed))
    return LocalWorkers(tokenizer, target, draft, max_len, num_blocks)
