"""The typed messages the router and the workers exchange in-process, one
place for all of them. They mirror the .proto messages; the gRPC servicers and
clients convert between the two, so everything behind them is plain Python.

Sparse draft distributions stay tensors in-process ([k, N] token ids and
probabilities, N = the draft's top-N); only the wire turns them into lists.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from model_runtime.logprobs import TokenLogprob
from model_runtime.sampling import SamplingOptions
from model_runtime.status import SequenceStatus

# Most drafts one sequence may carry in a round (the wire's limit).
MAX_DRAFT_TOKENS = 32


@dataclass(frozen=True)
class SequenceTokens:
    """Truncate ``seq_id`` to ``cached_len`` tokens, then append ``token_ids``."""

    seq_id: int
    cached_len: int
    token_ids: list[int]


@dataclass(frozen=True)
class ProposeRequest:
    tokens: SequenceTokens
    sampling: SamplingOptions


@dataclass
class Proposal:
    seq_id: int
    status: SequenceStatus
    token_ids: list[int] = field(default_factory=list)  # k drafts
    draft_ids: torch.Tensor | None = None  # [k, N] int64: support of each q
    draft_probs: torch.Tensor | None = None  # [k, N] float32: q on that support


@dataclass(frozen=True)
class VerifyRequest:
    """Append ``tokens`` and the drafts, and sample 1..k+1 tokens (k = 0: just one)."""

    tokens: SequenceTokens
    sampling: SamplingOptions
    draft_token_ids: list[int] = field(default_factory=list)
    draft_ids: torch.Tensor | None = None  # [k, N]
    draft_probs: torch.Tensor | None = None  # [k, N]


@dataclass
class VerifyOutput:
    seq_id: int
    status: SequenceStatus
    token_ids: list[int] = field(default_factory=list)  # accepted drafts + recovered/bonus
    num_accepted_drafts: int = 0
    logprobs: list[TokenLogprob] = field(default_factory=list)  # one per token_ids, if asked
    # A prefill's, if asked: one per appended token after the first.
    prompt_logprobs: list[TokenLogprob] = field(default_factory=list)


@dataclass(frozen=True)
class WorkerInfo:
    """What a worker serves and how much room its KV cache has."""

    model: str
    vocab_size: int
    max_model_len: int
    block_size: int
    num_blocks: int
    num_free_blocks: int
    max_num_batched_tokens: int = 0  # 0: not said (a worker of an older version)
    max_num_seqs: int = 0
