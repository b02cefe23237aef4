"""The offline API: ``LLM(model, speculative_config=...).generate(prompts, params)``."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, cast

from tqdm.auto import tqdm

from model_runtime.heap import frozen_heap
from router.config import EngineConfig, SpeculativeConfig
from router.engine import LLMEngine
from router.params import SamplingParams
from router.sequence import SequenceState
from specserve.inputs import PromptType, TokensPrompt
from specserve.local_workers import build_local_workers
from specserve.logs import configure_logging
from specserve.metrics_reader import Metric, metrics_of
from specserve.outputs import RequestOutput

logger = logging.getLogger(__name__)

# A conversation: messages of "role" and "content", as the chat API takes them.
Conversation = list[dict[str, Any]]


class LLM:
    """A target model, optionally sped up by a draft model, in this process.

    Arguments follow vLLM's ``LLM``: ``model`` (a folder, a hub id or a bundled
    name), ``tensor_parallel_size``, ``speculative_config`` (``{"model": ...,
    "num_speculative_tokens": k, "method": "draft_model"}``), ``max_model_len``,
    ``gpu_memory_utilization``, ``seed``, ``dtype``, ``revision``,
    ``block_size``, ``max_num_seqs``, ``distributed_executor_backend``; plus
    ``device``, ``cpu_memory_bytes`` (the byte budget for weights and KV caches
    on CPUs), ``num_kv_blocks`` (a fixed KV cache size), ``ray_address``,
    ``draft_top_n``, ``overlap`` and ``log_stats_interval_s``.
    """

    def __init__(
        self,
        model: str,
        tensor_parallel_size: int = 1,
        speculative_config: dict[str, Any] | None = None,
        **kwargs: Any,
    ):
        configure_logging()
        unknown = sorted(set(kwargs) - EngineConfig.argument_names())
        if unknown:
            raise TypeError(f"LLM() got unknown arguments: {', '.join(unknown)}")
        speculative = (
            SpeculativeConfig.from_dict(speculative_config) if speculative_config else None
        )
        self.config = EngineConfig.of(
            model, speculative, tensor_parallel_size=tensor_parallel_size, **kwargs
        )
        self.engine = LLMEngine(self.config, build_local_workers(self.config))
        self._next_request = 0

    def get_tokenizer(self) -> Any:
        return self.engine.tokenizer

    def generate(
        self,
        prompts: PromptType | Sequence[PromptType],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        use_tqdm: bool = True,
    ) -> list[RequestOutput]:
        """Complete every prompt; outputs come back in the order of the prompts."""
        if isinstance(prompts, str | dict):
            prompts = [prompts]
        if sampling_params is None:
            sampling_params = SamplingParams()
        if isinstance(sampling_params, SamplingParams):
            sampling_params = [sampling_params] * len(prompts)
        if len(sampling_params) != len(prompts):
            raise ValueError(
                f"got {len(prompts)} prompts but {len(sampling_params)} sampling_params"
            )
        # Every prompt is checked before any is queued: a bad one queues nothing.
        tokenized = [
            (text, params.prompt_kept(ids))
            for (text, ids), params in zip(
                map(self._tokenize, prompts), sampling_params, strict=True
            )
        ]
        ids = [str(self._next_request + i) for i in range(len(tokenized))]
        for request_id, (_, prompt_ids) in zip(ids, tokenized, strict=True):
            self.engine.check_prompt(request_id, prompt_ids)
        self._next_request += len(tokenized)
        # A full collection in the middle of a round would stall it (model_runtime/heap.py).
        with frozen_heap():
            requests: list[tuple[str | None, list[SequenceState]]] = [
                (text, self.engine.add_request(request_id, prompt_ids, params))
                for request_id, (text, prompt_ids), params in zip(
                    ids, tokenized, sampling_params, strict=True
                )
            ]
            self._run(requests, use_tqdm)
        if self.engine.k:
            logger.info(self.engine.metrics.summary())
        tokenizer = self.engine.tokenizer
        return [
            RequestOutput.from_sequences(text, seqs, lambda t: str(tokenizer.decode([t])))
            for text, seqs in requests
        ]

    def _run(self, requests: list[tuple[str | None, list[SequenceState]]], use_tqdm: bool) -> None:
        """Step the engine until every request's sequences are finished."""
        pending = {r: len(seqs) for r, (_, seqs) in enumerate(requests)}
        owner = {s.seq_id: r for r, (_, seqs) in enumerate(requests) for s in seqs}
        with tqdm(total=len(requests), desc="Processed prompts", disable=not use_tqdm) as bar:
            while self.engine.has_unfinished():
                for seq in self.engine.step():
                    pending[owner[seq.seq_id]] -= 1
                    if not pending[owner[seq.seq_id]]:
                        bar.update(1)

    def chat(
        self,
        messages: Conversation | Sequence[Conversation],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        use_tqdm: bool = True,
        chat_template: str | None = None,
        add_generation_prompt: bool = True,
    ) -> list[RequestOutput]:
        """Answer one conversation, or each of several: each is rendered by the
        model's chat template (or ``chat_template``), its assistant turn
        opened, and completed as ``generate`` completes a prompt."""
        one = bool(messages) and isinstance(messages[0], dict)
        conversations = cast(list[Conversation], [messages] if one else list(messages))
        tokenizer = self.engine.tokenizer
        prompts: list[PromptType] = []
        for conversation in conversations:
            text = tokenizer.apply_chat_template(
                conversation,
                chat_template=chat_template,
                add_generation_prompt=add_generation_prompt,
                tokenize=False,
            )
            ids = list(tokenizer.encode(str(text), add_special_tokens=False))
            prompts.append({"prompt_token_ids": ids, "prompt": str(text)})
        return self.generate(prompts, sampling_params, use_tqdm)

    def get_metrics(self) -> list[Metric]:
        """The engine's counters and state now, as vLLM's ``get_metrics``
        gives them (``vllm:spec_decode_*`` among them)."""
        return metrics_of(self.engine.stats(), self.config.model)

    def speculation_stats(self) -> dict[str, object]:
        """Speculation counters since this LLM was built, with the acceptance
        rate and length and the rounds run at each k."""
        return self.engine.metrics.as_dict()

    def _tokenize(self, prompt: PromptType) -> tuple[str | None, list[int]]:
        if isinstance(prompt, str):
            return prompt, list(self.engine.tokenizer.encode(prompt))
        if isinstance(prompt, dict) and "prompt_token_ids" in prompt:
            tokens = cast(TokensPrompt, prompt)
            return tokens.get("prompt"), list(tokens["prompt_token_ids"])
        if isinstance(prompt, dict) and isinstance(prompt.get("prompt"), str):
            text = prompt["prompt"]
            return text, list(self.engine.tokenizer.encode(text))
        raise ValueError(
            'a prompt must be a string, {"prompt": text} or {"prompt_token_ids": ids}, '
            f"got {prompt!r:.80}"
        )
