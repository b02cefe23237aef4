"""Vocabulary-parallel embedding and LM head.

Rank r holds the rows of vocabulary ids [r*n, (r+1)*n), where n is the
vocabulary divided by the group size, rounded up; rows past the real vocabulary
are zero padding. The embedding sums the ranks' lookups (each rank contributes
only its own ids); the LM head gathers the ranks' logits.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from model_runtime.distributed import TensorParallelGroup
from model_runtime.layers.linear import copy_checked
from model_runtime.ops.protocol import Ops


class VocabParallelEmbedding(nn.Module):
    def __init__(self, vocab_size: int, hidden_size: int, tp: TensorParallelGroup):
        super().__init__()
        self.tp = tp
        self.vocab_size = vocab_size
        self.rows_per_rank = -(-vocab_size // tp.size)
        self.start = tp.rank * self.rows_per_rank
        self.weight = nn.Parameter(
            torch.empty(self.rows_per_rank, hidden_size), requires_grad=False
        )
        self.weight.weight_loader = self.weight_loader  # type: ignore[attr-defined]

    def weight_loader(
        self, param: nn.Parameter, loaded: torch.Tensor, shard_id: str | int | None = None
    ) -> None:
        if loaded.dim() != 2 or loaded.shape[0] != self.vocab_size:
            raise ValueError(
                f"expected shape ({self.vocab_size}, {param.shape[1]}), found {tuple(loaded.shape)}"
            )
        rows = loaded[self.start : self.start + self.rows_per_rank]
        param.data.zero_()
        copy_checked(param.data[: rows.shape[0]], rows)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """input_ids [T] -> embeddings [T, hidden]."""
        if self.tp.size == 1:
            return F.embedding(input_ids, self.weight)
        local = input_ids - self.start
        outside = (local < 0) | (local >= self.rows_per_rank)
        out = F.embedding(local.masked_fill(outside, 0), self.weight)
        out = out.masked_fill(outside.unsqueeze(-1), 0.0)
        return self.tp.all_reduce(out)


class ParallelLMHead(VocabParallelEmbedding):
    """Projects hidden states onto the vocabulary; shares its layout with the
    embedding, so tied checkpoints use one parameter for both."""

    def forward(self, hidden: torch.Tensor, ops: Ops) -> torch.Tensor:  # type: ignore[override]
        """hidden [N, hidden] -> logits [N, vocab_size]."""
        logits = ops.linear(hidden, self.weight)
        if self.tp.size > 1:
            logits = self.tp.all_gather(logits, dim=-1)
        return logits[:, : self.vocab_size]
