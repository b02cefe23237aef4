"""Batches held column by column in-process, read as per-sequence messages
(``protos.messages``) only by whoever needs those.

A round's path should not build or read a message per sequence: the router
cuts the next round's draft batch from the verify outputs' columns
(router/ahead.py) and the wire takes columns as they are
(``protos.columns``); a worker in process, or the engine's bookkeeping off
the round's path, reads the per-sequence messages, built once when first
read.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterator, Sequence
from itertools import accumulate
from typing import Generic, TypeVar, overload

from model_runtime.sampling import SamplingOptions
from protos.messages import Proposal, ProposeRequest, SequenceTokens, VerifyOutput

T = TypeVar("T")


class _ReadAsMessages(Sequence[T], Generic[T]):
    """Columns that read as a sequence of messages, built by ``build`` when
    first read (and then kept)."""

    def __init__(self, build: Callable[[], list[T]]):
        self._build: Callable[[], list[T]] | None = build
        self._messages: list[T] = []

    def messages(self) -> list[T]:
        if self._build is not None:
            self._messages, self._build = self._build(), None
        return self._messages

    @overload
    def __getitem__(self, i: int) -> T: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[T]: ...
    def __getitem__(self, i: int | slice) -> T | Sequence[T]:
        return self.messages()[i]

    def __iter__(self) -> Iterator[T]:
        return iter(self.messages())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and self.messages() == list(other)


class ProposeColumns(_ReadAsMessages[ProposeRequest]):
    """A propose batch: per sequence its id, the tokens the draft keeps
    (``cached_lens``) and the ``num_tokens`` it appends (concatenated in
    ``token_ids``), sampled with ``samplings[sampling_index[i]]``."""

    def __init__(
        self,
        seq_ids: list[int],
        cached_lens: list[int],
        num_tokens: list[int],
        token_ids: list[int],
        samplings: list[SamplingOptions],
        sampling_index: list[int],
    ):
        self.seq_ids, self.cached_lens, self.num_tokens = seq_ids, cached_lens, num_tokens
        self.token_ids, self.samplings, self.sampling_index = token_ids, samplings, sampling_index
        super().__init__(self._requests)

    def _requests(self) -> list[ProposeRequest]:
        ends = accumulate(self.num_tokens)
        return [
            ProposeRequest(
                SequenceTokens(seq_id, cached, self.token_ids[end - n : end]),
                self.samplings[index],
            )
            for seq_id, cached, n, end, index in zip(
                self.seq_ids,
                self.cached_lens,
                self.num_tokens,
                ends,
                self.sampling_index,
                strict=True,
            )
        ]

    def __len__(self) -> int:
        return len(self.seq_ids)


class VerifyColumns(_ReadAsMessages[VerifyOutput]):
    """A verify batch's outputs: per sequence the ``num_tokens`` it gained
    (concatenated in ``token_ids``) and its ``num_accepted`` drafts, at once;
    the outputs themselves (statuses, logprobs) from ``parse`` when first
    read. ``failed`` holds the indices of the sequences that failed."""

    def __init__(
        self,
        num_tokens: list[int],
        token_ids: list[int],
        num_accepted: list[int],
        failed: Container[int],
        parse: Callable[[], list[VerifyOutput]],
    ):
        self.num_tokens, self.token_ids, self.num_accepted = num_tokens, token_ids, num_accepted
        self.failed = failed
        super().__init__(parse)

    @classmethod
    def of(cls, outputs: Sequence[VerifyOutput]) -> VerifyColumns:
        """The columns of outputs already built (a worker in process)."""
        if isinstance(outputs, VerifyColumns):
            return outputs
        flat: list[int] = []
        for o in outputs:
            flat += o.token_ids
        return cls(
            [len(o.token_ids) for o in outputs],
            flat,
            [o.num_accepted_drafts for o in outputs],
            {i for i, o in enumerate(outputs) if not o.status.ok},
            lambda: list(outputs),
        )

    def __len__(self) -> int:
        return len(self.num_accepted)


class ProposalColumns(_ReadAsMessages[Proposal]):
    """A propose batch's results: each sequence's ``num_drafts`` and the
    indices of those that ``failed``, at once; ``wire``, the drafts as they
    came, for a target over the wire to take as they are; the proposals
    themselves from ``parse`` when first read."""

    def __init__(
        self,
        seq_ids: list[int],
        num_drafts: list[int],
        failed: Container[int],
        wire: object,
        parse: Callable[[], list[Proposal]],
    ):
        self.seq_ids, self.num_drafts, self.failed, self.wire = seq_ids, num_drafts, failed, wire
        super().__init__(parse)

    def __len__(self) -> int:
        return len(self.seq_ids)


def seq_ids_of(requests: Sequence[ProposeRequest]) -> list[int]:
    """The sequence ids of a batch, in order (no message read from columns)."""
    if isinstance(requests, ProposeColumns):
        return requests.seq_ids
    return [r.tokens.seq_id for r in requests]
