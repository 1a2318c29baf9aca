"""How an answer is scored against its reference.

- ``integer``: the first integer of the reply equals the reference (the built-in tasks);
- ``exact``: the reply equals the reference after normalisation (case folded, whitespace
  collapsed, surrounding quotes and a final period dropped);
- ``contains``: the normalised reply contains the normalised reference;
- ``numeric``: the first number of the reply is within ``tolerance`` of the reference
  (absolute; 0: equal);
- ``regex``: the reference is a regular expression that must match somewhere in the reply
  (searched in its first ``REGEX_CHARS`` characters; a pattern is at most
  ``MAX_PATTERN`` characters);
- ``json``: the reply (or the first ``{...}``/``[...]`` in it) is valid JSON, and, when the
  reference is a JSON object of ``"key": "type"`` pairs (``string``, ``number``,
  ``integer``, ``boolean``, ``array``, ``object``), an object with those keys of those
  types;
- ``schema``: the reply's JSON value is valid against the reference, a JSON schema in the
  subset ``schema.py`` supports (the ``schema`` task);
- ``sequence``: the reference is a list of integers (``7, 12, 41``) and the reply's first
  integers are those, in that order (the ``ordering`` task).

A reply is data: it is bounded (``answers.ANSWER_CHARS``), compared and parsed as JSON,
never run.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from .schema import check_schema, validate

__all__ = ["MAX_PATTERN", "REGEX_CHARS", "SCORERS", "Scorer", "check_reference", "score"]

Scorer = Literal["integer", "exact", "contains", "numeric", "regex", "json", "schema", "sequence"]
SCORERS: tuple[Scorer, ...] = (
    "integer",
    "exact",
    "contains",
    "numeric",
    "regex",
    "json",
    "schema",
    "sequence",
)
REGEX_CHARS = 1024
MAX_PATTERN = 300

_INT_RE = re.compile(r"-?\d[\d,]*")
_NUM_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?|-?\.\d+")
_SPACE_RE = re.compile(r"\s+")
_SEQ_RE = re.compile(r"-?\d+")
_SEQ_REF_RE = re.compile(r"\s*-?\d+(?:\s*,\s*-?\d+){0,999}\s*")
_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


def _sequence(reference: str) -> list[str]:
    return _SEQ_RE.findall(reference)


def normalise(text: str) -> str:
    t = _SPACE_RE.sub(" ", text).strip().casefold()
    t = t.strip("\"'`")
    return t[:-1].rstrip() if t.endswith(".") else t


def _first(pattern: re.Pattern[str], text: str) -> str | None:
    m = pattern.search(text)
    return None if m is None else m.group(0).replace(",", "")


def _json_value(text: str) -> Any:
    for candidate in (text.strip(), _span(text, "{", "}"), _span(text, "[", "]")):
        if candidate:
            try:
                return json.loads(candidate)
            except ValueError:
                continue
    raise ValueError("no JSON value")


def _span(text: str, open_: str, close: str) -> str:
    a, b = text.find(open_), text.rfind(close)
    return text[a : b + 1] if 0 <= a < b else ""


def _json_matches(text: str, reference: str) -> bool:
    try:
        value = _json_value(text)
    except ValueError:
        return False
    if not reference.strip():
        return True
    shape = json.loads(reference)
    if not isinstance(value, dict):
        return False
    for key, kind in shape.items():
        if key not in value:
            return False
        v = value[key]
        if isinstance(v, bool) and kind != "boolean":
            return False
        if not isinstance(v, _TYPES[kind]):
            return False
    return True


def check_reference(scorer: str, reference: str) -> None:
    """Raise ``ValueError`` saying what is wrong with a reference for ``scorer``."""
    if scorer == "custom":
        return  # the configured function's (``custom.py``) to judge
    if scorer not in SCORERS:
        raise ValueError(
            f"unknown scorer {scorer!r}; scorers: {', '.join(SCORERS)}, or custom (a "
            "function named by --slo-eval-scorer)"
        )
    if scorer == "regex":
        if len(reference) > MAX_PATTERN:
            raise ValueError(f"a regex reference is at most {MAX_PATTERN} characters")
        re.compile(reference)
    elif scorer in ("numeric", "integer"):
        float(reference)
    elif scorer == "schema":
        check_schema(json.loads(reference))
    elif scorer == "sequence" and not _SEQ_REF_RE.fullmatch(reference):
        raise ValueError("a sequence reference is integers separated by commas: 7, 12, 41")
    elif scorer == "json" and reference.strip():
        shape = json.loads(reference)
        if not isinstance(shape, dict) or not all(t in _TYPES for t in shape.values()):
            raise ValueError(
                'a json reference is an object of "key": "type" pairs, types: ' + ", ".join(_TYPES)
            )


def score(scorer: str, text: str, reference: str, tolerance: float = 0.0) -> bool:
    """Whether ``text`` answers ``reference`` by ``scorer`` (see the module docstring)."""
    if scorer == "integer":
        return _first(_INT_RE, text) == reference
    if scorer == "exact":
        return normalise(text) == normalise(reference)
    if scorer == "contains":
        return normalise(reference) in normalise(text)
    if scorer == "numeric":
        found = _first(_NUM_RE, text)
        return found is not None and abs(float(found) - float(reference)) <= tolerance
    if scorer == "regex":
        return re.search(reference, text[:REGEX_CHARS]) is not None
    if scorer == "json":
        return _json_matches(text, reference)
    if scorer == "schema":
        try:
            value = _json_value(text)
        except ValueError:
            return False
        return validate(value, json.loads(reference))
    if scorer == "sequence":
        want = _sequence(reference)
        return _SEQ_RE.findall(text)[: len(want)] == want
    raise ValueError(f"unknown scorer {scorer!r}; scorers: {', '.join(SCORERS)}")
