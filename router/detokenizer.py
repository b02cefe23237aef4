"""Incremental detokenization: text grows as tokens arrive, never re-decoding
more than a few tokens, and holding back bytes of a character not yet complete.

Fast tokenizers (every tokenizer the ``tokenizers`` library backs) stream
through its ``DecodeStream``; others decode a short window twice per token.
A stream that cannot go on (DecodeStream refuses some token runs of
byte-fallback tokenizers, such as Llama 2's) hands over to the windows,
which are replayed over the tokens so far.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream
from transformers import PreTrainedTokenizerBase

# Prompt tokens decoded with the first output tokens, so that word boundaries
# (a leading space, say) come out as they would in the whole text.
CONTEXT_TOKENS = 4


class IncrementalDetokenizer:
    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        prompt_ids: Sequence[int],
        skip_special_tokens: bool = True,
    ):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.ids = list(prompt_ids[-CONTEXT_TOKENS:])
        self._context = len(self.ids)
        self.text = ""
        backend: Tokenizer | None = getattr(tokenizer, "backend_tokenizer", None)
        self._stream = None
        if backend is not None:
            stream = DecodeStream(ids=self.ids, skip_special_tokens=skip_special_tokens)
            self._stream = (stream, backend)
        self.prefix_offset = 0  # start of the window that is decoded again
        self.read_offset = len(self.ids)  # tokens before this are in self.text

    def push(self, token_id: int) -> str:
        """Add one token; return the text it completes (possibly empty)."""
        if self._stream is None:
            new = self._push_window(token_id)
        else:
            self.ids.append(token_id)
            stream, backend = self._stream
            try:
                new = stream.step(backend, token_id) or ""
            except Exception:  # the library's "Invalid prefix encountered", untyped
                new = self._to_windows()
        self.text += new
        return new

    def extend(self, token_ids: Sequence[int]) -> str:
        """Add several tokens; return the text they complete: what pushing
        them one by one returns, joined, for fewer calls."""
        if self._stream is None:
            new = "".join(self._push_window(t) for t in token_ids)
            self.text += new
            return new
        stream, backend = self._stream
        pieces = []
        for i, token in enumerate(token_ids):
            self.ids.append(token)
            try:
                pieces.append(stream.step(backend, token) or "")
            except Exception:  # as in push: the windows take over from here
                self.text += "".join(pieces)
                rest = self._to_windows() + "".join(map(self._push_window, token_ids[i + 1 :]))
                self.text += rest
                return "".join(pieces) + rest
        new = "".join(pieces)
        self.text += new
        return new

    def _to_windows(self) -> str:
        """Decode in windows from now on: replay them over every output token
        so far, and return the text they have past what the stream gave."""
        self._stream = None
        output, self.ids = self.ids[self._context :], self.ids[: self._context]
        self.prefix_offset, self.read_offset = 0, self._context
        replayed = "".join(self._push_window(t) for t in output)
        # Sent text stands; the two differ only where bytes make no character.
        return replayed[len(self.text) :]

    def _push_window(self, token_id: int) -> str:
        self.ids.append(token_id)
        before = self._decode(self.ids[self.prefix_offset : self.read_offset])
        after = self._decode(self.ids[self.prefix_offset :])
        if len(after) <= len(before) or after.endswith("\ufffd"):
            return ""  # a special token, or part of a multi-byte character
        self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
        return after[len(before) :]

    def _decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=self.skip_special_tokens))
