"""The workers an engine drives, and the engine's view of them.

The router sees workers only through the client interface (``router.clients``):
in-process workers are assembled by whoever builds the engine (``specserve``);
here are the gRPC clients of worker pools running elsewhere, and the check
that every worker shares the target's tokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from model_runtime.resolve import resolve_model
from protos.messages import WorkerInfo
from protos.tls import PLAIN, TlsConfig
from router.clients import DraftClient, TargetClient
from router.grpc_clients import GrpcDraftClient, GrpcTargetClient


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


def build_remote_workers(
    target_addresses: list[str],
    draft_addresses: list[str],
    session: str | None = None,
    tls: TlsConfig = PLAIN,
) -> Workers:
    """Clients of worker pools running elsewhere; the tokenizer is the target model's.

    Every worker of a pool must serve the same model with the same tokenizer.
    With ``session`` (``protos.sessions``) the workers free what this router
    held once it is gone.
    """
    if not target_addresses:
        raise ValueError("at least one target worker address is needed")
    targets = [GrpcTargetClient(a, session=session, tls=tls) for a in target_addresses]
    drafts = [GrpcDraftClient(a, session=session, tls=tls) for a in draft_addresses]
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(targets[0].info.model))
    infos = [t.info for t in targets] + [d.info for d in drafts]
    same_tokenizer = SameTokenizer(tokenizer, targets[0].info.model)
    for info in infos[1:]:
        same_tokenizer(info)
    return Workers(
        tokenizer,
        list(targets),
        list(drafts),
        min(t.info.max_model_len for t in targets),
        min(i.num_blocks for i in infos),
        min(i.block_size for i in infos),
        targets[0].info.vocab_size,
    )
