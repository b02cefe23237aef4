"""The typed messages the router and the workers exchange in-process, one
place for all of them. They mirror the .proto messages; the gRPC servicers and
clients convert between the two, so everything behind them is plain Python.

Sparse draft distributions stay tensors in-process ([k, N] token ids and
probabilities, N = the draft's top-N); only the wire turns them into lists.
So do the draft tokens of an in-process draft worker (``DeviceTokens``): the
target feeds them into its verify on the device, and the host reads them with
the verify's results, not between drafting and verifying.

The per-sequence messages are built for every sequence of every round, on
both ends of the wire: they are plain slotted dataclasses, not frozen ones,
which take four times as long to build (each field set through
``object.__setattr__``). Nothing changes a message once it is sent.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import overload

import torch

from model_runtime.logprobs import TokenLogprob
from model_runtime.sampling import SamplingOptions
from model_runtime.status import SequenceStatus
from model_runtime.step_counts import StepCounts

# Most drafts one sequence may carry in a round (the wire's limit).
MAX_DRAFT_TOKENS = 32
# The batch wire's version, raised whenever a field changes meaning or a
# field a peer must read is added (1: columnar batches, batch-packed
# distributions, grammars in the sampling options). Routers and workers of
# different versions do not talk: each would drop what the other added.
WIRE_VERSION = 1


class DraftedBatch:
    """A batch's draft tokens [B, k] where they were drafted, read on the host
    at most once, all together."""

    def __init__(self, tokens: torch.Tensor):
        self.tokens = tokens  # [B, k] int64
        self._host: list[list[int]] | None = None

    def host(self) -> list[list[int]]:
        if self._host is None:
            self._host = self.tokens.tolist()  # one read back for the batch
        return self._host

    def set_host(self, rows: list[list[int]]) -> None:
        """The tokens, read back by someone else along with other results."""
        self._host = rows

    @property
    def on_host(self) -> bool:
        return self._host is not None


class DeviceTokens(Sequence[int]):
    """One sequence's drafts: the first ``length`` tokens of row ``row`` of a
    DraftedBatch. Their count and the tensor need no read back; their values
    read the whole batch back once."""

    def __init__(self, batch: DraftedBatch, row: int, length: int):
        self.batch, self.row, self.length = batch, row, length

    @property
    def tensor(self) -> torch.Tensor:
        return self.batch.tokens[self.row, : self.length]  # [length]

    def __len__(self) -> int:
        return self.length

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[int]: ...
    def __getitem__(self, i: int | slice) -> int | Sequence[int]:
        if isinstance(i, slice) and i.start in (None, 0) and i.step in (None, 1):
            end = self.length if i.stop is None else max(0, min(i.stop, self.length))
            return DeviceTokens(self.batch, self.row, end)  # a prefix stays where it is
        return self.batch.host()[self.row][: self.length][i]

    def __iter__(self) -> Iterator[int]:
        return iter(self.batch.host()[self.row][: self.length])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"DeviceTokens({list(self) if self.batch.on_host else '...'})"


def device_drafts(tokens: Sequence[int]) -> torch.Tensor | None:
    """The tensor [k] of drafts still where they were drafted; None for a list."""
    return tokens.tensor if isinstance(tokens, DeviceTokens) else None


def read_back(drafts: Iterable[Sequence[int]]) -> None:
    """Bring every batch behind ``drafts`` to the host (one read back each)."""
    for tokens in drafts:
        if isinstance(tokens, DeviceTokens):
            tokens.batch.host()


@dataclass(slots=True)
class SequenceTokens:
    """Truncate ``seq_id`` to ``cached_len`` tokens, then append ``token_ids``."""

    seq_id: int
    cached_len: int
    token_ids: list[int]


@dataclass(slots=True)
class ProposeRequest:
    tokens: SequenceTokens
    sampling: SamplingOptions


@dataclass(slots=True)
class Proposal:
    seq_id: int
    status: SequenceStatus
    token_ids: Sequence[int] = field(default_factory=list)  # k drafts (DeviceTokens in process)
    draft_ids: torch.Tensor | None = None  # [k, N] int64: support of each q
    draft_probs: torch.Tensor | None = None  # [k, N] float32: q on that support


@dataclass(slots=True)
class VerifyRequest:
    """Append ``tokens`` and the drafts, and sample 1..k+1 tokens (k = 0: just one)."""

    tokens: SequenceTokens
    sampling: SamplingOptions
    draft_token_ids: Sequence[int] = field(default_factory=list)  # or DeviceTokens
    draft_ids: torch.Tensor | None = None  # [k, N]
    draft_probs: torch.Tensor | None = None  # [k, N]


@dataclass(slots=True)
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
    forwards: StepCounts = field(default_factory=StepCounts)  # since the worker started
    wire_version: int = WIRE_VERSION  # of the batch wire it speaks (0: older than the field)
