"""Log-probabilities of chosen tokens and of the most likely alternatives.

They are the model's raw log-softmax (vLLM's default ``raw_logprobs``): before
temperature, top-k, top-p or min-p, so they describe the model, not the
sampler.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class TokenLogprob:
    token_id: int
    logprob: float
    rank: int  # 1 + the number of tokens more likely than this one
    top_token_ids: list[int] = field(default_factory=list)  # most likely first
    top_logprobs: list[float] = field(default_factory=list)


def token_logprobs(
    logits: torch.Tensor, token_ids: Sequence[int], num_top: Sequence[int]
) -> list[TokenLogprob]:
    """Row i's log-probability of ``token_ids[i]``, its rank and its ``num_top[i]``
    most likely tokens. logits: [R, V]. One host synchronisation for all rows."""
    if not token_ids:
        return []
    logprobs = torch.log_softmax(logits.float(), dim=-1)  # [R, V]
    chosen_ids = torch.tensor(token_ids, dtype=torch.int64, device=logits.device)
    chosen = logprobs.gather(1, chosen_ids[:, None])  # [R, 1]
    ranks = (logprobs > chosen).sum(-1, keepdim=True) + 1  # [R, 1]
    width = max(num_top)
    top_values, top_ids = logprobs.topk(width, dim=-1)  # [R, width] each
    # float64 holds token ids and ranks exactly: ship everything in one copy.
    packed = torch.cat([chosen.double(), ranks.double(), top_values.double(), top_ids.double()], 1)
    out = []
    for token, n, row in zip(token_ids, num_top, packed.tolist(), strict=True):
        out.append(
            TokenLogprob(
                token_id=token,
                logprob=row[0],
                rank=int(row[1]),
                top_token_ids=[int(t) for t in row[2 + width : 2 + width + n]],
                top_logprobs=row[2 : 2 + n],
            )
        )
    return out
