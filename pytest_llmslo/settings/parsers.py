"""Parsers of setting values: text (command line, environment, ini) into a value.

Each parser raises ``ValueError`` with a short reason; ``sources`` adds the source that gave
the text. Marker values may already be typed (lists, ints, ``Objective`` objects): the
``coerce`` functions accept both, and the rest go through ``coerce_with``'s text form, so
every source gets the same checks.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from pytest_llmslo import quantities
from pytest_llmslo.errors import ConfigError


def _split_list(text: str) -> list[str]:
    return [p.strip() for p in text.replace(";", ",").split(",") if p.strip()]


def _split_items(text: str, example: str) -> list[str]:
    """The items of a comma list, none of them empty: ``1,,2`` is a typo (a level left
    out), not the list ``1,2``."""
    parts = [p.strip() for p in str(text).replace(";", ",").split(",")]
    if len(parts) > 1 and not all(parts):
        raise ValueError(
            f"Could not parse value: {text!r}. An item is empty (two commas in a row, or one "
            f"at an end); expected a comma list like {example}."
        )
    return [p for p in parts if p]


def parse_int_list(text: str) -> tuple[int, ...]:
    """``"1,4,8"`` -> ``(1, 4, 8)``; every value a positive integer."""
    parts = _split_items(text, "1,4,8")
    if not parts:
        raise ValueError(f"Could not parse value: {text!r}. Expected a comma list like 1,4,8.")
    out = []
    for p in parts:
        try:
            v = int(p)
        except ValueError:
            raise ValueError(
                f"Could not parse value: {text!r}. {p!r} is not an integer; "
                "expected a comma list like 1,4,8."
            ) from None
        if v <= 0:
            raise ValueError(f"Could not parse value: {text!r}. Levels must be > 0.")
        out.append(v)
    return tuple(out)


def parse_float_list(text: str) -> tuple[float, ...]:
    """``"1,2.5,4"`` -> ``(1.0, 2.5, 4.0)``; every value positive and finite."""
    parts = _split_items(text, "1,2,4")
    if not parts:
        raise ValueError(f"Could not parse value: {text!r}. Expected a comma list like 1,2,4.")
    out = []
    for p in parts:
        try:
            v = float(p)
        except ValueError:
            raise ValueError(
                f"Could not parse value: {text!r}. {p!r} is not a number; "
                "expected a comma list like 1,2,4."
            ) from None
        if not (v > 0 and math.isfinite(v)):
            raise ValueError(f"Could not parse value: {text!r}. Rates must be > 0.")
        out.append(v)
    return tuple(out)


def parse_int(text: str) -> int:
    """A whole number >= 0: ``4096``, or a size as a person types it (``4Ki``, ``2k``,
    ``2k tokens``; ``quantities.parse_size``)."""
    try:
        v = int(str(text).strip())
    except ValueError:
        if str(text).strip().startswith("-"):
            raise ValueError(f"Could not parse value: {text!r}. Must be >= 0.") from None
        try:
            v = quantities.parse_size(text)
        except ValueError:
            raise ValueError(
                f"Could not parse value: {text!r}. Expected an integer ({quantities.SIZE_FORMS})."
            ) from None
    if v < 0:
        raise ValueError(f"Could not parse value: {text!r}. Must be >= 0.")
    return v


def parse_positive_int(text: str) -> int:
    v = parse_int(text)
    if v == 0:
        raise ValueError(f"Could not parse value: {text!r}. Must be > 0.")
    return v


def parse_float(text: str) -> float:
    try:
        v = float(str(text).strip())
    except ValueError:
        raise ValueError(f"Could not parse value: {text!r}. Expected a number.") from None
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"Could not parse value: {text!r}. Must be a finite number >= 0.")
    return v


def parse_positive_float(text: str) -> float:
    """A number > 0 (seconds of a timeout: 0 would fail every request at once)."""
    v = parse_float(str(text).strip().lower().removesuffix("s"))
    if v == 0:
        raise ValueError(f"Could not parse value: {text!r}. Must be > 0.")
    return v


def parse_seconds(text: str) -> float:
    """A duration > 0 in seconds, as a person types it (``90``, ``90s``, ``5m``, ``1h30m``,
    ``250ms``; ``quantities.parse_duration``): a timeout of 0 would fail every request at once."""
    v = quantities.parse_duration(text)
    if v == 0:
        raise ValueError(f"Could not parse value: {text!r}. Must be > 0.")
    return v


def parse_seconds_or_zero(text: str) -> float:
    """A duration >= 0 in seconds (``quantities.parse_duration``)."""
    return quantities.parse_duration(text)


def parse_rate_list(text: str) -> tuple[float, ...]:
    """Open-loop rates, one level each: ``"1,2.5,4"`` (requests per second) or with a unit
    (``"2.5/s,150/m"``; ``quantities.parse_rate``); every rate > 0."""
    parts = _split_items(text, "1,2.5/s,150/m")
    if not parts:
        raise ValueError(f"Could not parse value: {text!r}. Expected a comma list like 1,2,4.")
    out = []
    for p in parts:
        v = quantities.parse_rate(p)
        if v <= 0:
            raise ValueError(f"Could not parse value: {text!r}. Rates must be > 0.")
        out.append(v)
    return tuple(out)


def parse_optional_load(text: str) -> float | None:
    """A load (concurrency or requests/s) > 0, or ``0``/``none`` for no bound."""
    s = str(text).strip().lower()
    if s in ("", "0", "none", "off"):
        return None
    return parse_float(s.removesuffix("/s")) or None


def parse_request_count(text: str) -> int | None:
    """A request count > 0, or ``none``/``0`` for none (the level is bounded by
    ``--duration`` alone)."""
    t = str(text).strip().lower()
    if t in ("none", "0", "off", ""):
        return None
    return parse_positive_int(t)


def parse_level_timeout(text: str) -> float | None:
    """Seconds > 0; ``auto`` (or empty) for the default, ``none``/``off`` for no bound
    (returned as ``math.inf``)."""
    s = str(text).strip().lower()
    if s in ("", "auto"):
        return None
    if s in ("none", "off"):
        return math.inf
    return parse_seconds(s)


def parse_records_memory(text: str) -> float | None:
    """Megabytes >= 0 (``0``: every record in files); ``none``/``off`` for no bound."""
    t = str(text).strip().lower().removesuffix("mb").strip()
    if t in ("none", "off"):
        return None
    try:
        return parse_float(t)
    except ValueError:
        raise ValueError(
            f"Could not parse value: {text!r}. Give megabytes >= 0 (0: every record in "
            "files), or none for no bound."
        ) from None


def parse_optional_request_cap(text: str) -> int | None:
    """A count > 0, or ``none``/``off`` for no cap. ``0`` is refused: a cap of no request
    in flight would send nothing, and reading it as "no cap" hides the typo."""
    t = str(text).strip().lower()
    if t in ("none", "off", ""):
        return None
    v = parse_int(t)
    if v == 0:
        raise ValueError(
            f"Could not parse value: {text!r}. A cap of 0 lets no request start; give a "
            "count > 0, or none for no cap."
        )
    return v


def parse_optional_duration(text: str) -> float | None:
    """Seconds as a person types them (``90``, ``90s``, ``5m``, ``1h30m``;
    ``quantities.parse_duration``); ``0``/``none``/empty mean no duration bound."""
    s = str(text).strip().lower()
    if s in ("", "0", "none", "off"):
        return None
    return quantities.parse_duration(s) or None


def parse_confidence(text: str) -> float:
    v = parse_float(text)
    if not 0.5 <= v < 1.0:
        raise ValueError(f"Could not parse value: {text!r}. Expected a confidence in [0.5, 1).")
    return v


def parse_fraction(text: str) -> float:
    s = str(text).strip()
    pct = s.endswith("%")
    v = parse_float(s.rstrip("%"))
    if pct:
        v /= 100.0
    if v > 1.0:
        raise ValueError(f"Could not parse value: {text!r}. Expected a fraction in [0, 1].")
    return v


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def parse_bool(text: str) -> bool:
    s = str(text).strip().lower()
    if s in _TRUE:
        return True
    if s in _FALSE:
        return False
    raise ValueError(f"{text!r} is not a boolean. Valid: {', '.join(_TRUE + _FALSE[:-1])}.")


def choice_parser(name: str, choices: Sequence[str]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        s = str(text).strip().lower()
        if s not in choices:
            raise ValueError(f"{text!r} is not a valid {name}. Valid: {', '.join(choices)}.")
        return s

    parse.__name__ = f"parse_{name}"
    return parse


def parse_str(text: str) -> str:
    return str(text).strip()


def parse_optional_str(text: str) -> str | None:
    s = str(text).strip()
    return s or None


def parse_optional_url(text: str) -> str | None:
    """An ``http://`` or ``https://`` URL with a host (or empty for none). Checked here,
    before anything starts: ``localhost:8000`` would only fail when the engine starts."""
    from urllib.parse import urlsplit

    s = str(text).strip()
    if not s:
        return None
    try:
        parts = urlsplit(s)
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        raise ValueError(f"Could not parse value: {s!r}. Not a URL: {exc}.") from None
    if parts.scheme not in ("http", "https"):
        hint = s.split("://", 1)[-1]
        raise ValueError(
            f"Could not parse value: {s!r}. A URL starts with http:// or https://, "
            f"e.g. http://{hint}."
        )
    if not host:
        raise ValueError(f"Could not parse value: {s!r}. The URL names no host.")
    return s


def shown_url(url: str) -> str:
    """``url`` as it may be shown or written: a password in it masked (``user:***@``)."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def parse_prompt_salt(text: str) -> str:
    """``auto`` (a salt drawn per session), ``none`` (no salt) or the salt itself."""
    s = str(text).strip()
    if s.lower() in ("auto", ""):
        return "auto"
    if s.lower() in ("none", "off", "0"):
        return "none"
    if len(s) > 64 or any(c.isspace() for c in s):
        raise ValueError(
            f"Could not parse value: {text!r}. A salt is up to 64 characters without spaces "
            "(or auto, or none)."
        )
    return s


def parse_name_list(text: str) -> tuple[str, ...]:
    parts = tuple(_split_items(text, "sim,vllm"))
    if not parts:
        raise ValueError(f"Could not parse value: {text!r}. Expected names like sim,vllm.")
    return parts


def parse_engine_opts(text: str) -> tuple[str, ...]:
    """Whitespace-separated ``NAME.key=value`` items (env/ini); each is checked."""
    items = tuple(shlex.split(str(text)))
    for item in items:
        parse_engine_opt(item)
    return items


def parse_engine_opt(text: str) -> str:
    """One ``NAME.key=value`` override."""
    s = str(text).strip()
    head, eq, _value = s.partition("=")
    name, dot, key = head.partition(".")
    if not (eq and dot and name.strip() and key.strip()):
        raise ValueError(f"Could not parse value: {text!r}. Expected NAME.key=value.")
    return s


def parse_ramp(text: str) -> tuple[float, float, float]:
    """``"2:8:60"``: the rate goes from 2 to 8 requests/s over 60 s."""
    parts = str(text).strip().lower().removesuffix("s").split(":")
    try:
        a, b, secs = (float(p) for p in parts)
    except ValueError:
        raise ValueError(
            f"Could not parse value: {text!r}. Expected START:END:SECONDS, like 2:8:60."
        ) from None
    if not (a >= 0 and b >= 0 and a + b > 0 and secs > 0) or not math.isfinite(a + b + secs):
        raise ValueError(f"Could not parse value: {text!r}. Rates >= 0 (not both 0), seconds > 0.")
    return a, b, secs


def parse_steps(text: str) -> tuple[tuple[float, ...], float]:
    """``"2,4,8:30"``: 2, then 4, then 8 requests/s, each for 30 s."""
    rates, sep, secs = str(text).strip().rpartition(":")
    try:
        values = tuple(float(r) for r in _split_list(rates))
        step = float(secs.strip().lower().removesuffix("s"))
    except ValueError:
        values, step = (), 0.0
    if not sep or not values or not step > 0 or any(not v > 0 for v in values):
        raise ValueError(
            f"Could not parse value: {text!r}. Expected RATE,RATE,...:SECONDS, like 2,4,8:30."
        )
    return values, step


def parse_headers(text: str) -> tuple[tuple[str, str], ...]:
    """``"X-Tenant: a"``; several separated by ``;`` or new lines (env, ini)."""
    out = []
    for item in str(text).replace("\n", ";").split(";"):
        if not item.strip():
            continue
        name, sep, value = item.partition(":")
        if not sep or not name.strip() or " " in name.strip():
            raise ValueError(f"Could not parse value: {item.strip()!r}. Expected NAME: VALUE.")
        out.append((name.strip(), value.strip()))
    return tuple(out)


def coerce_headers(value: Any) -> tuple[tuple[str, str], ...]:
    if isinstance(value, Mapping):
        return parse_headers(";".join(f"{k}: {v}" for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return parse_headers(";".join(str(v) for v in value))
    return parse_headers(str(value))


def parse_json_object(text: str) -> dict[str, Any]:
    """A JSON object (``--extra-body '{"top_k": 20}'``)."""
    import json

    s = str(text).strip()
    if not s:
        return {}
    try:
        obj = json.loads(s)
    except ValueError as exc:
        raise ValueError(f"Could not parse value: {s!r}. Not JSON: {exc}.") from None
    if not isinstance(obj, dict):
        raise ValueError(f"Could not parse value: {s!r}. Expected a JSON object {{...}}.")
    return obj


def coerce_json_object(value: Any) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return dict(value)
    return parse_json_object(str(value))


def parse_models(text: str) -> tuple[tuple[str, float], ...]:
    """``"base:2,lora-a:1"``: a weighted list of models (weight 1 when left out)."""
    out = []
    for item in _split_list(text):
        name, sep, weight = item.rpartition(":")
        try:
            w = float(weight) if sep else 1.0
        except ValueError:
            name, w = item, 1.0
        name = name if sep and name else item if not sep else name
        if not (w > 0 and math.isfinite(w)) or not name.strip():
            raise ValueError(f"Could not parse value: {item!r}. Expected NAME[:WEIGHT > 0].")
        out.append((name.strip(), w))
    if not out:
        raise ValueError(f"Could not parse value: {text!r}. Expected NAME[:WEIGHT],...")
    return tuple(out)


def coerce_models(value: Any) -> tuple[tuple[str, float], ...]:
    if isinstance(value, Mapping):
        return parse_models(",".join(f"{k}:{v}" for k, v in value.items()))
    return coerce_with(parse_models)(value)


def parse_objectives(text: str) -> tuple[Any, ...]:
    """``"ttft_p99<500,itl_p50<30"`` -> Objectives (via ``slo.parse_objectives``); a quality
    objective among them (``accuracy>=0.95``) is read by ``slo.parse_quality``, and the
    test's settings move it to the quality objectives (``resolve._split_quality``)."""
    from pytest_llmslo import slo
    from pytest_llmslo.slo.quality import QUALITY_METRICS

    s = str(text).strip()
    if not s:
        return ()
    parts = [p for p in re.split(r"[,;\n]", s) if p.strip()]
    quality = [p for p in parts if p.strip().lower().startswith(QUALITY_METRICS)]
    latency = [p for p in parts if p not in quality]
    try:
        out = tuple(slo.parse_objectives(",".join(latency))) if latency else ()
        return out + (tuple(slo.parse_quality(",".join(quality))) if quality else ())
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


def coerce_objectives(value: Any) -> tuple[Any, ...]:
    """Marker ``objectives=``: a string, one Objective, or a sequence of both."""
    if value is None:
        return ()
    if isinstance(value, str):
        return parse_objectives(value)
    if isinstance(value, Iterable):
        out: list[Any] = []
        for v in value:
            out.extend(coerce_objectives(v))
        return tuple(out)
    if hasattr(value, "metric") and hasattr(value, "threshold"):
        return (value,)
    raise ValueError(
        f"{value!r} is not an objective. Use e.g. ttft_p99 < 500 or 'ttft_p99<500,itl_p50<30'."
    )


_T = TypeVar("_T")


def coerce_with(parser: Callable[[str], _T]) -> Callable[[Any], _T]:
    """Marker values may be typed already; normalise through the text parser anyway so every
    source gets the same checks."""

    def coerce(value: Any) -> _T:
        if isinstance(value, bool):
            return parser("true" if value else "false")
        if isinstance(value, (list, tuple)):
            return parser(",".join(str(v) for v in value))
        return parser(str(value))

    return coerce


def coerce_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return parse_bool(str(value))
