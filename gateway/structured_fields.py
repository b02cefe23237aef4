"""The request fields that ask for structured outputs, as the OpenAI API
(``response_format``) and vLLM (``structured_outputs``, ``guided_json``,
``guided_regex``, ``guided_choice``, ``guided_grammar``) spell them, turned
into one ``StructuredOutputsParams``. More than one is refused: which would
win is not obvious."""

from __future__ import annotations

from typing import Any

from router.structured import StructuredOutputsParams


def structured_outputs(
    response_format: dict[str, Any] | None,
    fields: dict[str, Any],
    guided: dict[str, Any],
) -> StructuredOutputsParams | None:
    """From ``response_format``, vLLM's ``structured_outputs`` dict
    (``fields``) and the ``guided_*`` fields (``guided``: by name without
    the prefix); ValueError naming what is wrong."""
    asked = {name: value for name, value in guided.items() if value is not None}
    if fields:
        asked["structured_outputs"] = fields
    made = _from_response_format(response_format)
    if made is not None:
        asked["response_format"] = made
    if len(asked) > 1:
        raise ValueError(f"give one way of structuring the output, not {', '.join(asked)}")
    if not asked:
        return None
    ((name, value),) = asked.items()
    if name == "response_format":
        return made
    if name == "structured_outputs":
        try:
            return StructuredOutputsParams(**value)
        except TypeError as e:
            raise ValueError(f"structured_outputs: {e}") from e
    return StructuredOutputsParams(**{name: value})


def _from_response_format(spec: dict[str, Any] | None) -> StructuredOutputsParams | None:
    if spec is None or spec.get("type") == "text":
        return None
    kind = spec.get("type")
    if kind == "json_object":
        return StructuredOutputsParams(json_object=True)
    if kind == "json_schema":
        schema = (spec.get("json_schema") or {}).get("schema")
        if schema is None:
            raise ValueError("response_format json_schema needs json_schema.schema")
        return StructuredOutputsParams(json=schema)
    raise ValueError(
        f"response_format type {kind!r} is not one of 'text', 'json_object', 'json_schema'"
    )
