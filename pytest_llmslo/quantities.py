"""Quantities as a person types them: durations (``90s``, ``5m``, ``1h30m``, ``250ms``),
rates (``2.5/s``, ``150/m``), sizes and counts (``4Ki``, ``2k``, ``2k tokens``) and
percentiles (``p99``, ``p99.9``, ``99.9``). One parser each, shared by every setting that
takes such a value (command line, environment, ini, marker, run file); each raises
``ValueError`` naming the text and the forms it takes.

A bare number keeps the unit the setting always had: seconds for a duration, requests per
second for a rate, a plain count for a size.
"""

from __future__ import annotations

import math
import re

__all__ = [
    "DURATION_FORMS",
    "RATE_FORMS",
    "SIZE_FORMS",
    "parse_duration",
    "parse_percentile",
    "parse_rate",
    "parse_size",
]

DURATION_FORMS = "seconds (90, 90s), 250ms, 5m, 1h30m or 1h 30m 10s"
RATE_FORMS = "requests per second (2.5, 2.5/s), per minute (150/m) or per hour (900/h)"
SIZE_FORMS = "a count (4096), 2k (2000), 4Ki (4096), 1M, 1Mi, optionally followed by 'tokens'"

_DURATION_UNITS: dict[str, float] = {
    "ms": 0.001,
    "s": 1.0,
    "sec": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?"
_DURATION_PART = re.compile(rf"\s*({_NUMBER})\s*(ms|sec|min|s|m|h|d)", re.IGNORECASE)
_RATE_UNITS: dict[str, float] = {"s": 1.0, "sec": 1.0, "m": 1 / 60, "min": 1 / 60, "h": 1 / 3600}
_SIZE_UNITS: dict[str, int] = {
    "": 1,
    "k": 1000,
    "m": 1000**2,
    "g": 1000**3,
    "ki": 1024,
    "mi": 1024**2,
    "gi": 1024**3,
}
_SIZE = re.compile(rf"\s*({_NUMBER})\s*(ki|mi|gi|k|m|g|)\s*(?:tokens?)?\s*", re.IGNORECASE)
_MAX_TEXT = 64  # no quantity of ours is longer; a longer text is refused before any regex


def _text(text: object, what: str, forms: str) -> str:
    s = str(text).strip()
    if not s or len(s) > _MAX_TEXT:
        raise ValueError(f"Could not parse {what}: {text!r}. Expected {forms}.")
    return s


def _finite(value: float, text: object, what: str, forms: str) -> float:
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"Could not parse {what}: {text!r}. Expected {forms}, >= 0.")
    return value


def parse_duration(text: object) -> float:
    """Seconds >= 0 from ``90``, ``90s``, ``1.5s``, ``250ms``, ``5m``, ``1h30m``,
    ``1h 30m 10s``. A bare number is seconds."""
    s = _text(text, "duration", DURATION_FORMS)
    try:
        return _finite(float(s), text, "duration", DURATION_FORMS)
    except ValueError:
        pass
    total = 0.0
    pos = 0
    low = s.lower()
    while pos < len(low):
        match = _DURATION_PART.match(low, pos)
        if not match:
            raise ValueError(
                f"Could not parse duration: {text!r}. Expected {DURATION_FORMS}."
            ) from None
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        pos = match.end()
        while pos < len(low) and low[pos] == " ":
            pos += 1
    return _finite(total, text, "duration", DURATION_FORMS)


def parse_rate(text: object) -> float:
    """Requests per second >= 0 from ``2.5``, ``2.5/s``, ``150/m``, ``150/min``, ``900/h``
    (``rps``, ``req/s`` are taken as per second)."""
    s = _text(text, "rate", RATE_FORMS).lower().replace(" ", "")
    for suffix in ("rps", "req/s", "reqs/s", "requests/s"):
        if s.endswith(suffix):
            s = s[: -len(suffix)] + "/s"
            break
    number, sep, unit = s.partition("/")
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"Could not parse rate: {text!r}. Expected {RATE_FORMS}.") from None
    if sep:
        if unit not in _RATE_UNITS:
            raise ValueError(
                f"Could not parse rate: {text!r}: unknown unit {unit!r}. Expected {RATE_FORMS}."
            )
        value *= _RATE_UNITS[unit]
    return _finite(value, text, "rate", RATE_FORMS)


def parse_size(text: object) -> int:
    """A whole count >= 0 from ``4096``, ``2k`` (2000), ``4Ki`` (4096), ``1.5M``, ``1Mi``,
    ``2k tokens``. A result that is not whole (``1.5``, ``0.3k``) is refused."""
    s = _text(text, "size", SIZE_FORMS)
    match = _SIZE.fullmatch(s)
    if not match:
        raise ValueError(f"Could not parse size: {text!r}. Expected {SIZE_FORMS}.")
    value = float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
    _finite(value, text, "size", SIZE_FORMS)
    if value != int(value):
        raise ValueError(f"Could not parse size: {text!r}: {value:g} is not a whole count.")
    return int(value)


def parse_percentile(text: object) -> float:
    """A percentile in (0, 100) from ``p99``, ``P99.9``, ``99.9`` or ``p50``."""
    forms = "p50, p99, p99.9 (or the number alone, in (0, 100))"
    s = _text(text, "percentile", forms).lower().removeprefix("p")
    try:
        value = float(s)
    except ValueError:
        raise ValueError(f"Could not parse percentile: {text!r}. Expected {forms}.") from None
    if not 0.0 < value < 100.0:
        raise ValueError(f"Could not parse percentile: {text!r}. Expected {forms}.")
    return value
