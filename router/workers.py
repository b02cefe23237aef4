"""Building the draft and target workers of one machine, with KV caches sized
from the memory budget: ``gpu_memory_utilization`` of the GPU, or
``cpu_memory_bytes`` on CPUs, both models' weights counted."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from draft_worker.parallel import ParallelDraftWorker, draft_rank_worker
from draft_worker.worker import DraftWorker, DraftWorkerConfig
from model_runtime.config import ModelConfig
from model_runtime.executors import ParallelConfig, start_executor
from model_runtime.loader import load_model
from model_runtime.models.llama import LlamaForCausalLM
from model_runtime.rank import RankConfig, WorkerFactory
from model_runtime.resolve import resolve_model
from model_runtime.runner import ModelRunner
from model_runtime.sizing import num_kv_blocks, runner_for
from protos.messages import WorkerInfo
from router.clients import DraftClient, TargetClient
from router.config import EngineConfig
from target_worker.parallel import ParallelTargetWorker, target_rank_worker
from target_worker.worker import TargetWorker, TargetWorkerConfig


@dataclass
class Workers:
    """The workers an engine drives (in-process or gRPC clients) and what it needs to know."""

    tokenizer: PreTrainedTokenizerBase
    targets: list[TargetClient]
    drafts: list[DraftClient]
    max_model_len: int
    num_blocks: int
    block_size: int
    vocab_size: int

    @property
    def target(self) -> TargetClient:
        return self.targets[0]

    @property
    def draft(self) -> DraftClient | None:
        return self.drafts[0] if self.drafts else None


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


class SameTokenizer:
    """Checks that a worker's model shares ``tokenizer`` (loading each model's once)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, model: str):
        self.tokenizer = tokenizer
        self._checked = {model}

    def __call__(self, info: WorkerInfo) -> None:
        if info.model not in self._checked:
            other = AutoTokenizer.from_pretrained(resolve_model(info.model))
            check_same_tokenizer(self.tokenizer, other)
            self._checked.add(info.model)


def build_local_workers(config: EngineConfig) -> Workers:
    """The workers of one machine; a tensor-parallel target runs as ranks of an
    executor (``config.parallel``), everything else in this process."""
    spec = config.speculative
    if config.parallel.uses_executor or (spec and spec.draft_tensor_parallel_size > 1):
        return _build_parallel_workers(config)
    device = resolve_device(config.device)
    target_dir = resolve_model(config.model)
    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    spec = config.speculative
    target_model = load_model(target_dir, config.dtype, device)
    models = [target_model]
    draft_model = None
    k = spec.num_speculative_tokens if spec else 0
    # The longest context is the target's; sequences longer than the draft can
    # hold (with its k - 1 drafts past the last token) are decoded without drafts.
    limit = target_model.config.max_position_embeddings
    if spec is not None:
        draft_dir = resolve_model(spec.model, spec.revision)
        check_same_tokenizer(tokenizer, AutoTokenizer.from_pretrained(draft_dir))
        draft_model = load_model(draft_dir, config.dtype, device)
        models.append(draft_model)
    requested = [n for n in (config.max_model_len, spec and spec.max_model_len) if n]
    if any(n > limit for n in requested):
        raise ValueError(
            f"max_model_len {max(requested)} exceeds what the models allow ({limit} tokens)"
        )
    max_len = min([limit, *requested])
    num_blocks = config.num_kv_blocks_override or num_kv_blocks(
        models,
        device,
        config.block_size,
        max_len + k + 1,
        config.max_num_seqs,
        config.gpu_memory_utilization,
        config.cpu_memory_bytes,
    )

    def runner(model: LlamaForCausalLM) -> ModelRunner:
        return runner_for(model, num_blocks, config.block_size, device)

    target = TargetWorker(runner(target_model), TargetWorkerConfig(seed=config.seed), config.model)
    draft = None
    if draft_model is not None and spec is not None:
        draft = DraftWorker(
            runner(draft_model), DraftWorkerConfig(config.draft_top_n, config.seed), spec.model
        )
    return Workers(
        tokenizer,
        [target],
        [draft] if draft else [],
        max_len,
        num_blocks,
        config.block_size,
        target.vocab_size,
    )


def _build_parallel_workers(config: EngineConfig) -> Workers:
    """The target's ranks on an executor (processes or Ray actors, each sizing its
    KV cache from its own budget); the draft on one too when
    draft_tensor_parallel_size > 1, else here. The draft gets the target's blocks."""
    parallel, spec = config.parallel, config.speculative
    target_dir = resolve_model(config.model)
    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    k = spec.num_speculative_tokens if spec else 0
    requested = [n for n in (config.max_model_len, spec and spec.max_model_len) if n]
    max_len = min(requested) if requested else None

    def ranks(
        name: str, revision: str | None, size: int, build: WorkerFactory, blocks: int | None
    ) -> RankConfig:
        ModelConfig.from_pretrained(resolve_model(name, revision)).check_tensor_parallel(size)
        return RankConfig(
            model=name,
            revision=revision,
            tensor_parallel_size=size,
            build_worker=build,
            dtype=config.dtype,
            device=config.device,
            max_model_len=max_len,
            block_size=config.block_size,
            num_kv_blocks=blocks,
            gpu_memory_utilization=config.gpu_memory_utilization,
            cpu_memory_bytes=config.cpu_memory_bytes,
            max_num_seqs=config.max_num_seqs,
            max_tokens_per_sequence=None if max_len is None else max_len + k + 1,
        )

    build_target = partial(target_rank_worker, TargetWorkerConfig(seed=config.seed))
    target_ranks = ranks(
        config.model,
        None,
        parallel.tensor_parallel_size,
        build_target,
        config.num_kv_blocks_override,
    )
    target = ParallelTargetWorker(start_executor(target_ranks, parallel))
    info = target.info
    drafts: list[DraftClient] = []
    if spec is not None:
        draft_dir = resolve_model(spec.model, spec.revision)
        check_same_tokenizer(tokenizer, AutoTokenizer.from_pretrained(draft_dir))
        draft_config = DraftWorkerConfig(config.draft_top_n, config.seed)
        size = spec.draft_tensor_parallel_size
        if size > 1:
            build_draft = partial(draft_rank_worker, draft_config)
            draft_parallel = ParallelConfig(
                size, config.distributed_executor_backend, config.ray_address
            )
            draft_ranks = ranks(spec.model, spec.revision, size, build_draft, info.num_blocks)
            drafts.append(ParallelDraftWorker(start_executor(draft_ranks, draft_parallel)))
        else:
            device = resolve_device(config.device)
            draft_model = load_model(draft_dir, config.dtype, device)
            runner = runner_for(draft_model, info.num_blocks, config.block_size, device)
            drafts.append(DraftWorker(runner, draft_config, spec.model))
    return Workers(
        tokenizer,
        [target],
        drafts,
        info.max_model_len,
        info.num_blocks,
        config.block_size,
        info.vocab_size,
    )


def build_remote_workers(
    target_addresses: list[str], draft_addresses: list[str], num_speculative_tokens: int
) -> Workers:
    """Clients of worker pools running elsewhere; the tokenizer is the target model's.

    Every worker of a pool must serve the same model with the same tokenizer.
    """
    from router.clients import GrpcDraftClient, GrpcTargetClient

    if not target_addresses:
        raise ValueError("at least one target worker address is needed")
    targets = [GrpcTargetClient(a) for a in target_addresses]
    drafts = [GrpcDraftClient(a) for a in draft_addresses]
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(targets[0].info.model))
    infos = [t.info for t in targets] + [d.info for d in drafts]
    same_tokenizer = SameTokenizer(tokenizer, targets[0].info.model)
    for info in infos[1:]:
        same_tokenizer(info)
    max_len = min(t.info.max_model_len for t in targets)
    vocab = targets[0].info.vocab_size
    return Workers(
        tokenizer,
        list(targets),
        list(drafts),
        max_len,
        min(i.num_blocks for i in infos),
        min(i.block_size for i in infos),
        vocab,
    )
