"""Assembling the workers of an in-process engine from its EngineConfig.

The target and the draft run in this process on one device, built together by
``model_runtime.build`` so that their KV caches share one memory budget and
get the same number of blocks (a sequence fits in both or neither). A
tensor-parallel target runs as ranks of an executor, each sizing its own
cache; the draft then gets the target's number of blocks, on ranks of its own
when ``draft_tensor_parallel_size`` > 1, else in this process.

Lengths: the engine serves ``max_model_len`` (the smaller of the engine's and
the speculative config's, else the target's own), and both caches are sized
for it. A draft whose model is shorter keeps its own length; sequences past
it are decoded without drafts.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from draft_worker.tensor_parallel import ParallelDraftWorker, draft_rank_worker
from draft_worker.worker import DraftWorker, DraftWorkerConfig
from model_runtime.build import allowed_length, build_runner, build_runners
from model_runtime.executors import start_executor
from model_runtime.resolve import resolve_model
from model_runtime.specs import MAX_QUERY_LEN, RunnerSpec
from router.clients import DraftClient
from router.config import EngineConfig
from router.workers import Workers, check_same_tokenizer
from target_worker.tensor_parallel import ParallelTargetWorker, target_rank_worker
from target_worker.worker import TargetWorker, TargetWorkerConfig

# A draft's first step catches up on the one or two tokens the last round left.
DRAFT_CAPTURE_LEN = 2


def build_local_workers(config: EngineConfig) -> Workers:
    """The workers of one machine, as ``config`` describes them."""
    target_spec = _target_spec(config)
    tokenizer = AutoTokenizer.from_pretrained(
        resolve_model(target_spec.model, target_spec.revision)
    )
    draft_spec = _draft_spec(config, target_spec, tokenizer)
    spec = config.speculative
    if config.parallel.uses_executor or (spec and spec.draft_tensor_parallel_size > 1):
        return _on_executors(config, tokenizer, target_spec, draft_spec)
    specs = [target_spec] if draft_spec is None else [target_spec, draft_spec]
    runners = build_runners(specs)
    target = TargetWorker(runners[0], TargetWorkerConfig(seed=config.seed), target_spec.model)
    drafts: list[DraftClient] = []
    if draft_spec is not None:
        draft_config = DraftWorkerConfig(config.draft_top_n, config.seed)
        drafts.append(DraftWorker(runners[1], draft_config, draft_spec.model))
    return _workers(tokenizer, target, drafts, target_spec)


def _target_spec(config: EngineConfig) -> RunnerSpec:
    """The target's runner, with the engine's length, capturing its verify steps."""
    # The build refuses a length the model does not allow.
    length = config.requested_max_model_len or allowed_length(
        config.runner.model, config.runner.revision
    )
    capture = verify_capture_len(config)
    return replace(config.runner, max_model_len=length, capture_query_len=capture)


def verify_capture_len(config: EngineConfig) -> int:
    """New tokens per sequence of the target's verify steps captured at startup:
    the last token and up to k drafts (every k, as adaptive k may choose any)."""
    if config.speculative is None:
        return config.runner.capture_query_len
    return min(config.num_speculative_tokens + 1, MAX_QUERY_LEN)


def _draft_spec(
    config: EngineConfig, target: RunnerSpec, tokenizer: PreTrainedTokenizerBase
) -> RunnerSpec | None:
    """The draft's runner (None without speculation): the target's, but for the
    model and a length the draft model allows; its tokenizer must be the target's."""
    spec = config.speculative
    if spec is None:
        return None
    check_same_tokenizer(
        tokenizer, AutoTokenizer.from_pretrained(resolve_model(spec.model, spec.revision))
    )
    length = draft_length(target.max_model_len, spec.model, spec.revision)
    return replace(
        target,
        model=spec.model,
        revision=spec.revision,
        max_model_len=length,
        capture_query_len=DRAFT_CAPTURE_LEN,
    )


def draft_length(engine_length: int | None, model: str, revision: str | None) -> int | None:
    """The draft's length: the engine's, or less where the draft model allows
    less (sequences past it are decoded without drafts); None: its own."""
    if engine_length is None:
        return None
    return min(engine_length, allowed_length(model, revision))


def _on_executors(
    config: EngineConfig,
    tokenizer: PreTrainedTokenizerBase,
    target_spec: RunnerSpec,
    draft_spec: RunnerSpec | None,
) -> Workers:
    """The target's ranks on an executor; the draft with the target's block count,
    on ranks of its own when draft_tensor_parallel_size > 1, else here."""
    target_factory = partial(target_rank_worker, TargetWorkerConfig(seed=config.seed))
    executor = start_executor(target_spec, config.parallel, target_factory, "target")
    target = ParallelTargetWorker(executor)
    drafts: list[DraftClient] = []
    if draft_spec is not None:
        draft_spec = replace(draft_spec, num_kv_blocks=target.info.num_blocks)
        draft_config = DraftWorkerConfig(config.draft_top_n, config.seed)
        size = config.speculative.draft_tensor_parallel_size if config.speculative else 1
        if size > 1:
            parallel = replace(config.parallel, tensor_parallel_size=size)
            factory = partial(draft_rank_worker, draft_config)
            drafts.append(
                ParallelDraftWorker(start_executor(draft_spec, parallel, factory, "draft"))
            )
        else:
            drafts.append(DraftWorker(build_runner(draft_spec), draft_config, draft_spec.model))
    return _workers(tokenizer, target, drafts, target_spec)


def _workers(
    tokenizer: PreTrainedTokenizerBase,
    target: TargetWorker | ParallelTargetWorker,
    drafts: list[DraftClient],
    spec: RunnerSpec,
) -> Workers:
    info = target.describe()
    return Workers(
        tokenizer,
        [target],
        drafts,
        info.max_model_len,
        info.num_blocks,
        spec.block_size,
        info.vocab_size,
    )
