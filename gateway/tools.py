"""Tool calls on chat completions, as vLLM serves them.

- ``tool_choice`` "none": the tools are not shown to the model; plain text.
- a named function: the output is that function's arguments, held to its
  parameters' JSON schema by the grammar engine; one call.
- "required": the output is a JSON list of one or more calls
  (``{"name", "parameters"}``, each held to its tool's schema).
- "auto" (the default when tools are given): the model decides; its output
  is read by the server's tool-call parser (``--enable-auto-tool-choice
  --tool-call-parser hermes``), and refused without one.

``parallel_tool_calls`` false allows one call: "required" asks the grammar
for one, "auto" keeps the first the model wrote.

The tools reach the chat template (``tools=``); a reply with calls ends with
finish_reason "tool_calls", each call with an id, its name and its
arguments as JSON text.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from gateway.hermes import HermesParser, ParsedCall
from gateway.hermes import parse as parse_hermes
from router.structured import StructuredOutputsParams

TOOL_CALL_PARSERS = ("hermes",)
# A forced call's JSON goes to a program, not a reader: no whitespace between
# its tokens (a small model might otherwise wander in it to max_tokens).
COMPACT = True


class FunctionSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str | None = None
    parameters: dict[str, Any] = {"type": "object", "properties": {}}
    strict: bool | None = None


class ToolSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["function"]
    function: FunctionSpec


class FunctionName(BaseModel):
    name: str


class NamedToolChoice(BaseModel):
    type: Literal["function"]
    function: FunctionName


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


@dataclass(frozen=True)
class ToolUse:
    """How one request uses its tools."""

    kind: Literal["auto", "required", "named"]
    tools: tuple[ToolSpec, ...]
    name: str | None = None  # the named function's
    parallel: bool = True  # more than one call may come (parallel_tool_calls)

    @classmethod
    def of(
        cls, tools: list[ToolSpec] | None, choice: ToolChoice | None, parallel: bool = True
    ) -> ToolUse | None:
        """None: no tools in play. ValueError for a choice that cannot be served
        (whether "auto" can is the server's to say: ``check_auto``)."""
        if choice is not None and choice != "none" and not tools:
            raise ValueError("tool_choice needs tools")
        if not tools or choice == "none":
            return None
        if isinstance(choice, NamedToolChoice):
            if choice.function.name not in {t.function.name for t in tools}:
                raise ValueError(f"tool_choice names {choice.function.name!r}, not in tools")
            return cls("named", tuple(tools), choice.function.name)
        if choice == "required":
            return cls("required", tuple(tools), parallel=parallel)
        return cls("auto", tuple(tools), parallel=parallel)

    def check_auto(self, parser: str | None) -> None:
        """ValueError for "auto" on a server without a tool-call parser."""
        if self.kind == "auto" and parser is None:
            raise ValueError(
                '"auto" tool choice needs the server started with --enable-auto-tool-choice '
                "and --tool-call-parser hermes"
            )

    def template_tools(self) -> list[dict[str, Any]]:
        """The tools as chat templates take them."""
        return [t.model_dump(exclude_none=True) for t in self.tools]

    def grammar(self) -> StructuredOutputsParams | None:
        """What the output must match (None for auto: the model is free)."""
        if self.kind == "named":
            (tool,) = [t for t in self.tools if t.function.name == self.name]
            return StructuredOutputsParams(
                json=tool.function.parameters, disable_any_whitespace=COMPACT
            )
        if self.kind == "required":
            calls = [
                {
                    "type": "object",
                    "properties": {
                        "name": {"const": t.function.name},
                        "parameters": t.function.parameters,
                    },
                    "required": ["name", "parameters"],
                    "additionalProperties": False,
                }
                for t in self.tools
            ]
            most = {} if self.parallel else {"maxItems": 1}
            return StructuredOutputsParams(
                json={"type": "array", "minItems": 1, **most, "items": {"anyOf": calls}},
                disable_any_whitespace=COMPACT,
            )
        return None


@dataclass
class CallReader:
    """One choice's output read as content and tool calls."""

    use: ToolUse
    _text: str = ""
    _parser: HermesParser = field(default_factory=HermesParser)
    sent: int = 0  # calls handed out so far

    def whole(self, text: str) -> tuple[str | None, list[dict[str, Any]]]:
        """A whole output: (content, the calls in the API's shape)."""
        if self.use.kind == "auto":
            content, parsed = parse_hermes(text)
            kept = parsed if self.use.parallel else parsed[:1]
            return content, [self._shaped(c, i) for i, c in enumerate(kept)]
        return None, [self._shaped(c, i) for i, c in enumerate(self._forced(text))]

    def stream(self, text: str, final: bool) -> tuple[str, list[dict[str, Any]]]:
        """More output: the content it completes and the calls it closes. A
        named call's arguments stream as they come (its first delta with its
        id and name); "required" calls come whole at the end, once their
        JSON list is complete."""
        if self.use.kind == "named":
            return "", self._named_piece(text)
        if self.use.kind == "auto":
            content, closed = self._parser.feed(text, final)
            closed = closed if self.use.parallel else closed[: max(0, 1 - self.sent)]
        else:
            self._text += text
            content, closed = "", self._forced(self._text) if final else []
        shaped = [self._shaped(c, self.sent + i) for i, c in enumerate(closed)]
        self.sent += len(shaped)
        return content, shaped

    def _named_piece(self, text: str) -> list[dict[str, Any]]:
        if self.sent == 0:
            assert self.use.name is not None
            self.sent = 1
            return [self._shaped(ParsedCall(self.use.name, text), 0)]
        return [{"index": 0, "function": {"arguments": text}}] if text else []

    def _forced(self, text: str) -> list[ParsedCall]:
        if self.use.kind == "named":
            assert self.use.name is not None
            return [ParsedCall(self.use.name, text)]
        try:
            items = json.loads(text)
        except json.JSONDecodeError:
            return []  # cut short (max_tokens): no complete call
        return [ParsedCall(i["name"], json.dumps(i["parameters"])) for i in items]

    @staticmethod
    def _shaped(call: ParsedCall, index: int) -> dict[str, Any]:
        return {
            "index": index,
            "id": f"chatcmpl-tool-{uuid.uuid4().hex}",
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments},
        }
