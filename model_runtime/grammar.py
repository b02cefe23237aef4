"""Grammar-constrained sampling (structured outputs) through llguidance.

llguidance is the grammar engine: it takes JSON schemas, regular
expressions, choices and Lark or GBNF grammars, computes the set of tokens a
grammar allows next in tens of microseconds (lazily, in Rust), rolls its
state back by any number of tokens (what a rejected draft needs), and has no
dependencies of its own, with one wheel for every Python (vLLM offers it as
its "guidance" backend). The router turns a request's constraint into
llguidance's grammar text (``router.structured``), which travels in the
sampling options; each worker keeps one matcher per constrained sequence, in
step with its KV cache, and masks its logits with it:

- the target masks verify row j with the state reached through the
  sequence's output and its first j drafts, so rejection sampling samples
  the masked target distribution exactly;
- the draft masks each step with the state reached through the tokens it
  drafted before (reading each step's token back: a constrained draft waits
  on the device once a step).

A mask is a bitmask [R, ceil(V / 32)] int32 on the host, bit t of a row
allowing token t; ``apply_bitmask`` expands it on the device.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import llguidance
import llguidance.hf
import torch
from transformers import PreTrainedTokenizerBase


def grammar_tokenizer(tokenizer: Any, vocab_size: int) -> llguidance.LLTokenizer:
    """llguidance's view of a fast ``tokenizer`` over a model's
    ``vocab_size`` ids (about a second)."""
    return llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab_size)


@dataclass
class _Matched:
    grammar: str
    matcher: llguidance.LLMatcher
    consumed: list[int]  # the output tokens the matcher has taken


class GrammarMatchers:
    """The grammar states of the constrained sequences a worker holds."""

    def __init__(self, tokenizer: Callable[[], PreTrainedTokenizerBase], vocab_size: int):
        """``tokenizer`` loads the model's tokenizer, the first time a
        constrained sequence comes."""
        self._load = tokenizer
        self._tokenizer: llguidance.LLTokenizer | None = None
        self.vocab_size = vocab_size
        self._executor = llguidance.LLExecutor()
        self._matched: dict[int, _Matched] = {}

    def sync(self, seq_id: int, grammar: str, output: Sequence[int]) -> None:
        """Bring ``seq_id``'s matcher to the state after ``output``: back to
        what it shares with the tokens it took, then forward."""
        m = self._matched.get(seq_id)
        if m is None or m.grammar != grammar:
            m = self._matched[seq_id] = _Matched(grammar, self._new_matcher(grammar), [])
        shared = 0
        for a, b in zip(m.consumed, output, strict=False):
            if a != b:
                break
            shared += 1
        if shared < len(m.consumed) and not m.matcher.rollback(len(m.consumed) - shared):
            # Further back than llguidance keeps: start over from the grammar.
            m = self._matched[seq_id] = _Matched(grammar, self._new_matcher(grammar), [])
            shared = 0
        new = list(output[shared:])
        taken = m.matcher.try_consume_tokens(new) if new else 0
        if taken < len(new) and not m.matcher.is_stopped():  # past its end: EOS only
            raise ValueError(f"sequence {seq_id}: tokens its grammar does not allow")
        m.consumed = list(output[: shared + taken])

    def take(self, seq_id: int, token: int) -> None:
        """One more token for ``seq_id`` (a draft step's)."""
        m = self._matched[seq_id]
        if not m.matcher.is_stopped() and m.matcher.consume_token(token):
            m.consumed.append(token)

    def masks(self, drafted: Sequence[tuple[int, Sequence[int]]]) -> torch.Tensor:
        """For each (sequence, its drafts d), the masks of the rows after its
        output and after each of its first j drafts, j = 0..len(d):
        [sum(len(d) + 1), W] int32 on the host, in order. The matchers' states
        do not change."""
        rows, words = sum(len(d) + 1 for _, d in drafted), (self.vocab_size + 31) // 32
        pinned = torch.cuda.is_available()  # copied to the device without a wait
        bitmask = torch.full((rows, words), -1, dtype=torch.int32, pin_memory=pinned)
        plain, ahead, spans, row = [], [], [], 0  # llguidance takes those without drafts apart
        for seq_id, drafts in drafted:
            matcher = self._matched[seq_id].matcher
            if drafts and not matcher.is_stopped():
                ahead.append((matcher, row, list(drafts)))
            else:
                plain.append((matcher, row))
            spans.append((row, len(drafts) + 1))
            row += len(drafts) + 1
        # The executor writes the rows in place (llguidance.torch does the same,
        # but compiles a kernel with torch.compile when imported: 1.6 s of
        # torch._dynamo in every process, grammar or not).
        if plain:
            self._executor.unsafe_compute_mask_ptr(plain, bitmask.data_ptr(), words * 4, rows)
        if ahead:
            self._executor.unsafe_compute_mask_ptr_with_draft_token(
                ahead, bitmask.data_ptr(), words * 4, rows
            )
        eos_only = self._eos_only(bitmask.shape[1])
        for row, n in spans:
            _ended_stays_ended(bitmask[row : row + n], eos_only)
        return bitmask

    def forget(self, seq_ids: Sequence[int]) -> None:
        for seq_id in seq_ids:
            self._matched.pop(seq_id, None)

    def _eos_only(self, words: int) -> torch.Tensor:
        """The mask [W] of an ended grammar: EOS alone."""
        assert self._tokenizer is not None
        mask = torch.zeros(words, dtype=torch.int64)
        eos = self._tokenizer.eos_token
        mask[eos // 32] = 1 << (eos % 32)
        return mask.to(torch.int32)  # bit 31 wraps to the int32 sign bit, as in the mask

    def _new_matcher(self, grammar: str) -> llguidance.LLMatcher:
        if self._tokenizer is None:
            self._tokenizer = grammar_tokenizer(self._load(), self.vocab_size)
        matcher = llguidance.LLMatcher(self._tokenizer, grammar)
        if matcher.is_error():
            raise ValueError(f"grammar refused: {matcher.get_error()}")
        return matcher


def _ended_stays_ended(rows: torch.Tensor, eos_only: torch.Tensor) -> None:
    """One sequence's masks [k + 1, W]: from the first that allows EOS alone
    (its grammar has ended), every later row allows EOS alone too.
    llguidance cannot step past EOS, so it leaves the rows after an EOS draft
    open; but once only EOS may come, nothing else ever may."""
    ended = (rows == eos_only).all(-1)  # [k + 1]
    if ended.any():
        first = int(ended.int().argmax())
        rows[first + 1 :] = rows[first]


def apply_bitmask(logits: torch.Tensor, bitmask: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """logits [N, V] (float32) with the tokens each mask row forbids at -inf
    at its row of ``rows`` [R] (a copy); ``bitmask`` [R, W] int32 on the host."""
    vocab = logits.shape[1]
    words = bitmask.to(logits.device, non_blocking=True)  # [R, W]
    bits = torch.arange(32, device=logits.device, dtype=torch.int32)
    allowed = ((words.unsqueeze(-1) >> bits) & 1).bool().flatten(1)[:, :vocab]  # [R, V]
    out = logits.clone()
    out[rows] = out[rows].masked_fill(~allowed, -torch.inf)
    return out


def load_tokenizer(model: str) -> Callable[[], PreTrainedTokenizerBase]:
    """A loader of ``model``'s tokenizer (a worker's, for its grammars)."""

    def load() -> PreTrainedTokenizerBase:
        from transformers import AutoTokenizer

        from model_runtime.resolve import resolve_model

        return AutoTokenizer.from_pretrained(resolve_model(model))

    return load
