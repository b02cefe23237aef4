"""What a finished request returns, shaped like vLLM's RequestOutput."""

from __future__ import annotations

from dataclasses import dataclass

from router.sequence import SequenceState


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None
    stop_reason: int | str | None = None
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = True

    @classmethod
    def from_sequences(cls, prompt: str | None, seqs: list[SequenceState]) -> RequestOutput:
        seqs = sorted(seqs, key=lambda s: s.index)
        return cls(
            request_id=seqs[0].request_id,
            prompt=prompt,
            prompt_token_ids=list(seqs[0].prompt_ids),
            outputs=[
                CompletionOutput(
                    index=s.index,
                    text=s.text,
                    token_ids=list(s.output_ids),
                    finish_reason=s.finish_reason,
                    stop_reason=s.stop_reason,
                    num_drafts=s.counts.num_drafts,
                    num_draft_tokens=s.counts.num_draft_tokens,
                    num_accepted_tokens=s.counts.num_accepted_tokens,
                )
                for s in seqs
            ],
            finished=all(s.finished for s in seqs),
        )
