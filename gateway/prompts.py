"""Turning a request's prompt into token ids: a completion's prompt(s) in any
of the OpenAI API's forms, or a chat's messages through the chat template."""

from __future__ import annotations

from typing import Any

from transformers import PreTrainedTokenizerBase

from gateway.protocol import ChatMessage, GatewayError


def completion_prompts(
    prompt: Any, tokenizer: PreTrainedTokenizerBase
) -> tuple[list[list[int]], list[str]]:
    """A completion request's prompt(s) as token ids, and as text (for echo)."""
    if isinstance(prompt, str):
        return [list(tokenizer.encode(prompt))], [prompt]
    items = list(prompt)
    if items and all(isinstance(x, str) for x in items):
        return [list(tokenizer.encode(x)) for x in items], [str(x) for x in items]
    if items and all(isinstance(x, int) for x in items):
        ids = [int(x) for x in items]
        return [ids], [str(tokenizer.decode(ids))]
    if items and all(isinstance(x, list) and x for x in items):
        lists = [[int(t) for t in x] for x in items]
        return lists, [str(tokenizer.decode(x)) for x in lists]
    raise GatewayError(
        "prompt must be a string, a list of strings, token ids or lists of token ids, and not empty"
    )


def chat_prompt(messages: list[ChatMessage], tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The messages rendered by the model's chat template, with the assistant's
    turn opened, as token ids."""
    try:
        text = tokenizer.apply_chat_template(
            [m.model_dump() for m in messages], add_generation_prompt=True, tokenize=False
        )
    except Exception as e:  # a template that rejects these messages
        raise GatewayError(f"the chat template cannot render these messages: {e}") from e
    return list(tokenizer.encode(str(text), add_special_tokens=False))
