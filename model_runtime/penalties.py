"""The presence, frequency and repetition penalties, as vLLM and OpenAI
define them, on rows of logits whose token counts are known: presence
subtracts ``presence`` from the logit of every token the output holds,
frequency subtracts ``frequency`` times its count; repetition divides a
positive logit (multiplies a negative one) by ``repetition`` for every token
of the prompt or the output.

The target applies them at each verify row (``target_worker.penalties``), the
draft at each of its steps (``draft_worker.penalties``), each with the counts
of that position's own prefix; both call this, so the draft proposes from the
distribution the target verifies against.
"""

from __future__ import annotations

import torch

# One value for every row, or one per row: [R, 1].
PerRow = float | torch.Tensor


def penalized_logits(
    logits: torch.Tensor,
    counts: torch.Tensor,
    prompt_seen: torch.Tensor | None,
    presence: PerRow,
    frequency: PerRow,
    repetition: PerRow,
) -> torch.Tensor:
    """logits [R, V] (float32) penalised by the output's token ``counts``
    [R, V] (float32); ``prompt_seen`` [R, V] (bool) marks the prompt's
    tokens, for the repetition penalty (None: no row has one)."""
    if prompt_seen is not None:
        seen = prompt_seen | (counts > 0)
        scaled = torch.where(logits > 0, logits / repetition, logits * repetition)
        logits = torch.where(seen, scaled, logits)
    return logits - frequency * counts - presence * (counts > 0).float()
