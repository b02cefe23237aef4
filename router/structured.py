"""StructuredOutputsParams: what a request's output must match, as vLLM
spells it (``SamplingParams(structured_outputs=...)``): a JSON schema, any
JSON object, a regular expression, one of a few choices, or a grammar (Lark
or GBNF). Exactly one is given. It becomes llguidance's grammar text, which
travels to the workers in the sampling options (``model_runtime.grammar``);
llguidance checks it here, so that a schema or grammar it cannot take is
refused with its message before anything runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import llguidance

# The grammar of "any JSON object" (OpenAI's response_format json_object).
ANY_OBJECT = {"type": "object"}


@dataclass(frozen=True)
class StructuredOutputsParams:
    json: str | dict[str, Any] | None = None  # a JSON schema
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None  # Lark or GBNF
    json_object: bool | None = None
    llguidance: str | None = None  # llguidance's own grammar text (what the wire carries)
    # JSON without whitespace between its tokens (vLLM's option of that name).
    disable_any_whitespace: bool = False

    def __post_init__(self) -> None:
        given = [
            name
            for name in ("json", "regex", "choice", "grammar", "json_object", "llguidance")
            if getattr(self, name) not in (None, False)
        ]
        if len(given) != 1:
            raise ValueError(
                "structured outputs take exactly one of json, regex, choice, grammar "
                f"and json_object; got {', '.join(given) or 'none'}"
            )
        if self.choice is not None and (
            not self.choice or not all(isinstance(c, str) and c for c in self.choice)
        ):
            raise ValueError("choice must be a list of non-empty strings")
        self.text  # built and checked now  # noqa: B018

    @cached_property
    def text(self) -> str:
        """llguidance's grammar text (ValueError with its message if it refuses it)."""
        try:
            if self.json is not None or self.json_object:
                text = llguidance.grammar_from("json_schema", self._schema())
            elif self.regex is not None:
                text = llguidance.grammar_from("regex", self.regex)
            elif self.choice is not None:
                text = llguidance.grammar_from("choice", json.dumps(self.choice))
            elif self.llguidance is not None:
                text = self.llguidance
            else:
                text = llguidance.grammar_from("grammar", str(self.grammar))
        except (ValueError, TypeError) as e:
            raise ValueError(f"structured outputs: {e}") from e
        failed, messages = llguidance.LLMatcher.validate_grammar_with_warnings(text)
        if failed:
            raise ValueError(f"structured outputs: {'; '.join(messages)}")
        return text

    def _schema(self) -> str:
        """The JSON schema (any object for json_object), with llguidance's
        whitespace option."""
        schema = ANY_OBJECT if self.json_object else self.json
        if not self.disable_any_whitespace:
            return schema if isinstance(schema, str) else json.dumps(schema)
        loaded = json.loads(schema) if isinstance(schema, str) else schema
        if not isinstance(loaded, dict):
            raise ValueError("a JSON schema is an object")
        return json.dumps({**loaded, "x-guidance": {"whitespace_flexible": False}})
