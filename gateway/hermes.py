"""The Hermes tool-call format that Qwen3 (and Hermes, and others) emit:
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, any number of
them after the message's text (vLLM's ``--tool-call-parser hermes``).

``HermesParser`` reads a stream of text: what comes before the first call
is content (text that may be the start of a tag is held back until it is
not), and each call is handed over whole when its closing tag comes. Text
that is not a well-formed call stays content, as it was written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

OPEN, CLOSE = "<tool_call>", "</tool_call>"


@dataclass(frozen=True)
class ParsedCall:
    name: str
    arguments: str  # JSON text


@dataclass
class HermesParser:
    _buffer: str = ""
    _inside: bool = False
    calls: list[ParsedCall] = field(default_factory=list)

    def feed(self, text: str, final: bool = False) -> tuple[str, list[ParsedCall]]:
        """More of the output: the content it completes and the calls it closes.
        ``final``: nothing more comes (whatever is held back is content now)."""
        self._buffer += text
        content, closed = [], []
        while True:
            if not self._inside:
                at = self._buffer.find(OPEN)
                if at < 0:
                    keep = 0 if final else _partial_tag(self._buffer)
                    content.append(self._buffer[: len(self._buffer) - keep])
                    self._buffer = self._buffer[len(self._buffer) - keep :]
                    break
                content.append(self._buffer[:at])
                self._buffer, self._inside = self._buffer[at + len(OPEN) :], True
            end = self._buffer.find(CLOSE)
            if end < 0:
                if final:  # an unclosed call: it stays text
                    content.append(OPEN + self._buffer)
                    self._buffer = ""
                break
            body, self._buffer = self._buffer[:end], self._buffer[end + len(CLOSE) :]
            self._inside = False
            call = _call(body)
            if call is None:
                content.append(OPEN + body + CLOSE)
            else:
                closed.append(call)
        self.calls += closed
        return "".join(content), closed


def parse(text: str) -> tuple[str | None, list[ParsedCall]]:
    """A whole output: its content (None when it is only calls) and its calls."""
    content, calls = HermesParser().feed(text, final=True)
    return (content.strip() or None) if calls else content, calls


def _call(body: str) -> ParsedCall | None:
    try:
        value = json.loads(body)
    except json.JSONDecodeError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    return ParsedCall(value["name"], json.dumps(arguments))


def _partial_tag(text: str) -> int:
    """How many characters at the end of ``text`` may begin the opening tag."""
    for n in range(min(len(OPEN) - 1, len(text)), 0, -1):
        if OPEN.startswith(text[-n:]):
            return n
    return 0
