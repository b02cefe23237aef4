"""Turning a request's prompt into token ids: a completion's prompt(s) in any
of the OpenAI API's forms, or a chat's messages through the chat template.

Tokenizing takes time in proportion to the text, so the gateway runs it off
its event loop, and refuses first, without tokenizing, a text longer than any
max_model_len prompt could be (no token decodes to more characters than the
longest entry of the vocabulary).
"""

from __future__ import annotations

from typing import Any

from transformers import PreTrainedTokenizerBase

from gateway.protocol import ChatMessage, GatewayError


class Prompts:
    """The tokenizer of a backend, and what a prompt may be for it."""

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        vocab_size: int,
        max_model_len: int,
        chat_template: str | None = None,
    ):
        """``chat_template``: one to use instead of the tokenizer's own."""
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.vocab_size = vocab_size
        longest_token = max((len(t) for t in tokenizer.get_vocab()), default=1)
        # No prompt of max_model_len tokens has more characters than this.
        self.max_chars = max_model_len * max(longest_token, 1)

    def encode(self, text: str, **options: Any) -> list[int]:
        if len(text) > self.max_chars:
            raise GatewayError(
                f"the prompt has {len(text)} characters, more than the maximum model length "
                "can hold in tokens; shorten it"
            )
        return list(self.tokenizer.encode(text, **options))

    def decode(self, ids: list[int]) -> str:
        """The text of prompt token ids (checked first: the tokenizer overflows)."""
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise GatewayError(f"prompt token ids {bad[:5]} outside [0, {self.vocab_size})")
        return str(self.tokenizer.decode(ids))

    def completion(self, prompt: Any) -> tuple[list[list[int]], list[str]]:
        """A completion request's prompt(s) as token ids, and as text (for echo)."""
        if isinstance(prompt, str):
            return [self.encode(prompt)], [prompt]
        items = list(prompt)
        if items and all(isinstance(x, str) for x in items):
            return [self.encode(x) for x in items], [str(x) for x in items]
        if items and all(isinstance(x, int) for x in items):
            ids = [int(x) for x in items]
            return [ids], [self.decode(ids)]
        if items and all(isinstance(x, list) and x for x in items):
            lists = [[int(t) for t in x] for x in items]
            return lists, [self.decode(x) for x in lists]
        raise GatewayError(
            "prompt must be a string, a list of strings, token ids or lists of token ids, "
            "and not empty"
        )

    def chat(
        self,
        messages: list[ChatMessage],
        add_generation_prompt: bool = True,
        tools: list[dict[Any, Any]] | None = None,
    ) -> list[int]:
        """The messages (and the tools offered, if any) rendered by the
        model's chat template, with the assistant's turn opened (unless told
        not to), as token ids."""
        try:
            text = self.tokenizer.apply_chat_template(
                [m.rendered() for m in messages],
                tools=list(tools) if tools is not None else None,
                add_generation_prompt=add_generation_prompt,
                tokenize=False,
                chat_template=self.chat_template,
            )
        except Exception as e:  # a template that rejects these messages
            raise GatewayError(f"the chat template cannot render these messages: {e}") from e
        return self.encode(str(text), add_special_tokens=False)
