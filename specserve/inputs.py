"""The prompt forms ``LLM.generate`` takes, as ``vllm.inputs`` names them:
a string, ``TextPrompt`` ({"prompt": text}) or ``TokensPrompt``
({"prompt_token_ids": ids}, optionally with the text they came from)."""

from __future__ import annotations

from typing import TypedDict


class TextPrompt(TypedDict):
    prompt: str


class _TokenIds(TypedDict):
    prompt_token_ids: list[int]


class TokensPrompt(_TokenIds, total=False):
    prompt: str  # the text, when known (kept in RequestOutput.prompt)


PromptType = str | TextPrompt | TokensPrompt
