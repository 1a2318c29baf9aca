"""The small subset of JSON Schema the ``schema`` eval task and scorer use, validated here
with no dependency.

Keywords: ``type`` (``object``, ``array``, ``string``, ``integer``, ``number``,
``boolean``, ``null``), ``properties``, ``required``, ``additionalProperties`` (a boolean),
``items``, ``minItems``, ``maxItems``, ``enum``, ``const``, ``minimum``, ``maximum``,
``minLength``, ``maxLength``. A schema with another keyword is refused (``check_schema``
says which), so a user's schema never passes by a keyword silently ignored. A schema and a
reply are data: parsed as JSON, walked to a bounded depth, never run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["KEYWORDS", "MAX_DEPTH", "check_schema", "example", "validate"]

KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "minItems",
        "maxItems",
        "enum",
        "const",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "title",
        "description",
    }
)
#: How deep a schema (and a value checked against it) may nest.
MAX_DEPTH = 8

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def check_schema(schema: Any, depth: int = 0) -> None:
    """Raise ``ValueError`` saying what in ``schema`` is outside the subset supported."""
    if depth > MAX_DEPTH:
        raise ValueError(f"the schema nests deeper than {MAX_DEPTH} levels")
    if not isinstance(schema, Mapping):
        raise ValueError("a schema is a JSON object")
    unknown = sorted(set(schema) - KEYWORDS)
    if unknown:
        raise ValueError(
            f"unsupported schema keyword(s) {unknown}; supported: {', '.join(sorted(KEYWORDS))}"
        )
    kind = schema.get("type")
    if kind is not None and kind not in _TYPES:
        raise ValueError(f"unknown schema type {kind!r}; types: {', '.join(_TYPES)}")
    props = schema.get("properties", {})
    if not isinstance(props, Mapping):
        raise ValueError("'properties' is an object of schemas")
    for sub in props.values():
        check_schema(sub, depth + 1)
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(k, str) for k in required):
        raise ValueError("'required' is a list of property names")
    if "items" in schema:
        check_schema(schema["items"], depth + 1)
    if "additionalProperties" in schema and not isinstance(schema["additionalProperties"], bool):
        raise ValueError("'additionalProperties' is true or false here")
    if "enum" in schema and not isinstance(schema["enum"], list):
        raise ValueError("'enum' is a list of values")


def _is(value: Any, kind: str) -> bool:
    if isinstance(value, bool) and kind in ("integer", "number"):
        return False
    return isinstance(value, _TYPES[kind])


def _bounds(value: Any, schema: Mapping[str, Any]) -> bool:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if number and "minimum" in schema and value < schema["minimum"]:
        return False
    if number and "maximum" in schema and value > schema["maximum"]:
        return False
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0) or len(value) > schema.get("maxLength", 1e18):
            return False
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", 1e18):
            return False
    return True


def validate(value: Any, schema: Mapping[str, Any], depth: int = 0) -> bool:
    """Whether ``value`` is valid against ``schema`` (checked by ``check_schema``)."""
    if depth > MAX_DEPTH:
        return False
    kind = schema.get("type")
    if kind is not None and not _is(value, kind):
        return False
    if "const" in schema and (value != schema["const"] or type(value) is not type(schema["const"])):
        return False
    if "enum" in schema and value not in schema["enum"]:
        return False
    if not _bounds(value, schema):
        return False
    if isinstance(value, dict):
        props = schema.get("properties", {})
        if any(k not in value for k in schema.get("required", [])):
            return False
        if schema.get("additionalProperties") is False and set(value) - set(props):
            return False
        return all(validate(value[k], s, depth + 1) for k, s in props.items() if k in value)
    if isinstance(value, list) and "items" in schema:
        return all(validate(v, schema["items"], depth + 1) for v in value)
    return True


def example(schema: Mapping[str, Any]) -> Any:
    """A value valid against a schema of the ``schema`` task (``tasks._schema``): what the
    sim's "model" answers."""
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type", "null")
    if kind == "object":
        return {k: example(s) for k, s in schema.get("properties", {}).items()}
    if kind == "array":
        return [example(schema.get("items", {}))] * int(schema.get("minItems", 0))
    if kind in ("integer", "number"):
        return int(schema.get("minimum", 0))
    if kind == "string":
        return "x" * int(schema.get("minLength", 1))
    return {"boolean": True}.get(kind)
