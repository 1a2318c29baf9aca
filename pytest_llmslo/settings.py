"""Settings of an SLO session and of each SLO test, resolved from their sources.

Every setting has one spec (``SPECS``) that names it on every source:

- the command line (``--isl 1024``), parsed by argparse ``type=`` functions from here;
- the environment (``LLMSLO_ISL=1024``);
- ini files (``llmslo_isl = 1024`` in pytest.ini/tox.ini, or ``[tool.pytest.ini_options]``);
- the test's marker (``@pytest.mark.slo(isl=1024)``), for per-test settings only;
- a built-in default.

The first source that sets a value wins, in that order: CLI, then environment, then ini,
then marker, then the default. A bad value raises ``errors.ConfigError`` whose message
names the source and lists the valid choices; the plugin turns it into a
``pytest.UsageError``. Nothing here imports pytest, so resolution is testable on its own.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pytest_llmslo.engines.base import ENGINE_KINDS
from pytest_llmslo.engines.sim import DEFAULT_PROFILE as SIM_DEFAULT_PROFILE
from pytest_llmslo.errors import ConfigError
from pytest_llmslo.records import LoadLevel
from pytest_llmslo.stats import DEFAULT_CONFIDENCE

ENV_PREFIX = "LLMSLO_"
INI_PREFIX = "llmslo_"
DEFAULT_CONCURRENCY: tuple[int, ...] = (1, 4, 8, 16, 32, 48, 64)
ARRIVALS = ("poisson", "constant", "gamma")
# Copies of load.traces.TRACE_FORMATS and load.workload.THINK_DISTRIBUTIONS.
TRACE_FORMATS = ("auto", "mooncake", "azure", "burstgpt", "jsonl")
THINK_DISTRIBUTIONS = ("fixed", "exponential", "uniform")
# Copies of load.client.Endpoint and TransportName (a test keeps them equal): reading the
# options must not import the load generator.
ENDPOINTS = ("chat", "completions")
TRANSPORTS = ("auto", "fast", "httpx")
RECEIVE_STAMPS = ("auto", "read")
WORKLOADS = ("synthetic", "sharegpt", "jsonl", "shared_prefix", "trace")
DISTRIBUTIONS = ("fixed", "normal", "lognormal", "uniform")
CAPACITY_MODES = ("concurrency", "rate")
EARLY_STOP_MODES = ("auto", "on", "off")
RESET_CACHE_MODES = ("auto", "on", "off")
# Past the last planned level, at most this many extra levels are run by --slo-extend, so a
# curve that never drops (an engine far from saturation) cannot extend a session forever.
MAX_EXTEND_LEVELS = 6

Scope = Literal["session", "test"]


class _Unset:
    """The default of every command-line option: "not given", told apart from a value that
    parses to None (``--duration=0``, ``--requests=none``), which overrides an ini value."""

    def __repr__(self) -> str:
        return "<not given>"


UNSET: Any = _Unset()


def cli_given(spec: Spec, value: Any) -> bool:
    """Whether the command line gave ``spec`` (argparse's value for its option)."""
    if spec.repeatable:
        return value not in (None, [])
    return value is not UNSET


# --------------------------------------------------------------------------- parsers
# Each parser turns text (CLI, env, ini) into a value and raises ValueError with a short
# reason; ``parse_from`` adds the source. Marker values may already be typed (lists, ints,
# Objective objects): ``coerce`` functions accept both.


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
    try:
        v = int(str(text).strip())
    except ValueError:
        raise ValueError(f"Could not parse value: {text!r}. Expected an integer.") from None
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
    return parse_positive_float(s)


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
    """Seconds; ``0``/``none``/empty mean no duration bound."""
    s = str(text).strip().lower()
    if s in ("", "0", "none", "off"):
        return None
    s = s.removesuffix("s")
    v = parse_float(s)
    return v or None


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


def _choice(name: str, choices: Sequence[str]) -> Callable[[str], str]:
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
    return _coerce_with(parse_models)(value)


def parse_objectives(text: str) -> tuple[Any, ...]:
    """``"ttft_p99<500,itl_p50<30"`` -> Objectives (via ``slo.parse_objectives``)."""
    from pytest_llmslo import slo

    s = str(text).strip()
    if not s:
        return ()
    try:
        return tuple(slo.parse_objectives(s))
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


def _coerce_with(parser: Callable[[str], Any]) -> Callable[[Any], Any]:
    """Marker values may be typed already; normalise through the text parser anyway so every
    source gets the same checks."""

    def coerce(value: Any) -> Any:
        if isinstance(value, bool):
            return parser("true" if value else "false")
        if isinstance(value, (list, tuple)):
            return parser(",".join(str(v) for v in value))
        return parser(str(value))

    return coerce


def _coerce_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return parse_bool(str(value))


# ----------------------------------------------------------------------------- specs


@dataclass(frozen=True, slots=True)
class Spec:
    """One setting on every source. ``cli`` is the flag (``None``: not on the command line),
    ``marker`` the marker keyword (``None``: session-wide only)."""

    name: str
    parse: Callable[[str], Any]
    default: Any
    help: str
    cli: str | None = None
    marker: str | None = None
    coerce: Callable[[Any], Any] | None = None
    metavar: str | None = None
    flag: bool = False  # a CLI switch without a value
    repeatable: bool = False  # the CLI flag may be given several times
    choices: tuple[str, ...] = ()
    #: The ``TOPICS`` key its option is listed under in ``--help``.
    topic: str = ""
    #: What the default means where the value does not say it (``None`` that stands for
    #: 0.9, 10 ms, ``auto`` or a sim profile): ``--help`` shows this.
    shown_default: str | None = None

    @property
    def ini(self) -> str:
        return INI_PREFIX + self.name

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def scope(self) -> Scope:
        return "test" if self.marker else "session"

    def coerce_marker(self, value: Any) -> Any:
        return (self.coerce or _coerce_with(self.parse))(value)


def _spec(name: str, parse: Callable[[str], Any], default: Any, help: str, **kw: Any) -> Spec:
    return Spec(name=name, parse=parse, default=default, help=help, **kw)


#: The topics the options are grouped by in ``--help`` (``Spec.topic``), in their order.
TOPICS: dict[str, str] = {
    "engines": "engines (what is measured)",
    "load": "load (levels, arrivals, request counts)",
    "workload": "workload (prompts and their lengths)",
    "traffic": "traffic (traces, conversations)",
    "requests": "requests (endpoint, shaping, deadlines, TLS)",
    "slo": "SLO (objectives, gates, extension, capacity)",
    "client": "client health (when the load generator was the bottleneck)",
    "signals": "engine signals",
    "outputs": "outputs (results document, reports)",
    "regression": "regression (baselines)",
}

#: ``llmslo run``'s own defaults, where an interactive run wants another than a suite of SLO
#: tests: each level ends after 30 s of measurement (or its --requests, whichever comes
#: first), after a warm-up of 20 requests (at least one wave of a closed loop). With the
#: plugin's 200 + 500 requests per level, the default sweep took over 40 minutes.
RUN_DEFAULTS: dict[str, Any] = {"duration": 30.0, "warmup": 20}

SPECS: tuple[Spec, ...] = (
    # session-wide
    _spec(
        "engine",
        parse_name_list,
        ("sim",),
        "Engines to test: configured engine names or bare kinds "
        f"({', '.join(ENGINE_KINDS)}); comma list or repeated.",
        cli="--engine",
        topic="engines",
        metavar="NAME[,NAME]",
        repeatable=True,
    ),
    _spec(
        "engine_url",
        parse_optional_url,
        None,
        "Base URL of an already running OpenAI-compatible server (engine kind 'external'); "
        "without --engine it means --engine=external.",
        cli="--engine-url",
        topic="engines",
        metavar="URL",
    ),
    _spec(
        "engine_config",
        parse_optional_str,
        None,
        "TOML file with [engines.NAME] tables (or [tool.llmslo.engines.NAME]).",
        cli="--engine-config",
        topic="engines",
        shown_default="the rootdir's pyproject.toml [tool.llmslo.engines.*]",
        metavar="PATH",
    ),
    _spec(
        "engine_opt",
        parse_engine_opts,
        (),
        "Override one engine config key: NAME.key=value (repeatable).",
        cli="--engine-opt",
        topic="engines",
        metavar="NAME.KEY=VALUE",
        repeatable=True,
    ),
    _spec(
        "engine_restarts",
        parse_int,
        1,
        "Restarts of an engine that died during the session: it is started again for the "
        "next test, at most this many times (0: never; its later tests then error).",
        cli="--engine-restarts",
        topic="engines",
        metavar="N",
    ),
    _spec(
        "sim_profile",
        parse_optional_str,
        None,
        "Profile of the sim engine (python -m pytest_llmslo.sim --list-profiles).",
        cli="--sim-profile",
        topic="engines",
        shown_default=SIM_DEFAULT_PROFILE,
        metavar="NAME",
    ),
    _spec(
        "slo_json",
        parse_optional_str,
        None,
        "Write the session's results document (versioned JSON) to PATH, atomically.",
        cli="--slo-json",
        topic="outputs",
        metavar="PATH",
    ),
    _spec(
        "slo_markdown",
        parse_optional_str,
        None,
        "Write the session's sweeps, knees and Pareto summary as Markdown to PATH.",
        cli="--slo-markdown",
        topic="outputs",
        metavar="PATH",
    ),
    _spec(
        "slo_svg",
        parse_optional_str,
        None,
        "Write the chart of the session's sweeps (throughput vs TTFT P99 with the Pareto "
        "frontier, goodput per level) as SVG to PATH.",
        cli="--slo-svg",
        topic="outputs",
        metavar="PATH",
    ),
    _spec(
        "slo_csv",
        parse_optional_str,
        None,
        "Write one CSV row per engine x test x load level (latencies, throughput, goodput, "
        "outcome, knee) to PATH.",
        cli="--slo-csv",
        topic="outputs",
        metavar="PATH",
    ),
    _spec(
        "slo_save",
        parse_optional_str,
        None,
        "Save the session's results as the named baseline (under .llmslo/baselines).",
        cli="--slo-save",
        topic="regression",
        metavar="NAME",
    ),
    _spec(
        "slo_compare",
        parse_optional_str,
        None,
        "Compare each test against a saved baseline (a name or a JSON path).",
        cli="--slo-compare",
        topic="regression",
        metavar="NAME|PATH",
    ),
    _spec(
        "slo_compare_fail",
        parse_optional_str,
        None,
        "Regression tolerances per metric, e.g. goodput:5%,ttft_p99:10%.",
        cli="--slo-compare-fail",
        topic="regression",
        shown_default="goodput:5%,throughput:5%,attainment:2pp, latencies 10%",
        metavar="SPEC",
    ),
    # per test (marker keywords too)
    _spec(
        "concurrency",
        parse_int_list,
        None,
        "Closed-loop sweep: concurrent requests per level.",
        cli="--concurrency",
        topic="load",
        marker="concurrency",
        metavar="N[,N]",
    ),
    _spec(
        "rate",
        parse_float_list,
        None,
        "Open-loop sweep: requests per second per level (instead of --concurrency).",
        cli="--rate",
        topic="load",
        marker="rate",
        metavar="R[,R]",
    ),
    _spec(
        "arrival",
        _choice("arrival", ARRIVALS),
        "poisson",
        "Arrivals of an open-loop (--rate) level.",
        cli="--arrival",
        topic="load",
        marker="arrival",
        choices=ARRIVALS,
    ),
    _spec(
        "model",
        parse_str,
        "",
        "Model to serve and request.",
        cli="--model",
        topic="engines",
        shown_default="the engine config's",
        marker="model",
        metavar="NAME",
    ),
    _spec(
        "isl",
        parse_positive_int,
        512,
        "Input sequence length (prompt tokens) of synthetic requests.",
        cli="--isl",
        topic="workload",
        marker="isl",
        metavar="N",
    ),
    _spec(
        "osl",
        parse_positive_int,
        256,
        "Output sequence length (max tokens, ignore_eos) of every request.",
        cli="--osl",
        topic="workload",
        marker="osl",
        metavar="N",
    ),
    _spec(
        "isl_stddev",
        parse_float,
        0.0,
        "Standard deviation of the input length (0: fixed).",
        cli="--isl-stddev",
        topic="workload",
        marker="isl_stddev",
        metavar="X",
    ),
    _spec(
        "osl_stddev",
        parse_float,
        0.0,
        "Standard deviation of the output length (0: fixed).",
        cli="--osl-stddev",
        topic="workload",
        marker="osl_stddev",
        metavar="X",
    ),
    _spec(
        "distribution",
        _choice("distribution", DISTRIBUTIONS),
        None,
        "Length distribution when a stddev is set.",
        cli="--length-distribution",
        topic="workload",
        shown_default="normal with a stddev, else fixed",
        marker="distribution",
        choices=DISTRIBUTIONS,
    ),
    _spec(
        "dataset",
        parse_optional_str,
        None,
        "Dataset instead of synthetic prompts: a ShareGPT .json or a .jsonl path "
        "(prefix sharegpt: or jsonl: to force the format).",
        cli="--dataset",
        topic="workload",
        marker="dataset",
        metavar="PATH",
    ),
    _spec(
        "workload",
        _choice("workload", WORKLOADS),
        None,
        "Workload kind.",
        cli="--workload",
        topic="workload",
        shown_default="synthetic, or the dataset's kind",
        marker="workload",
        choices=WORKLOADS,
    ),
    _spec(
        "num_prefixes",
        parse_int,
        0,
        "shared_prefix workload: number of distinct shared prefixes.",
        cli="--num-prefixes",
        topic="workload",
        marker="num_prefixes",
        metavar="N",
    ),
    _spec(
        "prefix_len",
        parse_int,
        0,
        "shared_prefix workload: tokens in each shared prefix.",
        cli="--prefix-len",
        topic="workload",
        marker="prefix_len",
        metavar="N",
    ),
    _spec(
        "seed",
        parse_int,
        0,
        "Seed of prompts, lengths and Poisson arrivals.",
        cli="--seed",
        topic="workload",
        marker="seed",
        metavar="N",
    ),
    _spec(
        "prompt_salt",
        parse_prompt_salt,
        "auto",
        "Salt of the words of built prompts (synthetic, shared-prefix, trace blocks): 'auto' "
        "draws one per session, so a second run against an engine that stayed up does not "
        "hit the prefix cache the first one filled (prompt lengths and shared prefixes "
        "within the session stay as they are); 'none' for the seed's prompts alone; any "
        "other text repeats a session's prompts exactly (the results document records it).",
        cli="--prompt-salt",
        topic="workload",
        marker="prompt_salt",
        metavar="auto|none|TEXT",
    ),
    _spec(
        "warmup",
        parse_int,
        200,
        "Warm-up requests per level, sent first and discarded (at least one wave, the "
        "concurrency, of a closed loop; 0 for none).",
        cli="--warmup",
        topic="load",
        marker="warmup",
        metavar="N",
    ),
    _spec(
        "requests",
        parse_request_count,
        500,
        "Measured requests per level; 'none' with --duration for a level bounded by time "
        "alone (its prompts are built as they are needed).",
        cli="--requests",
        topic="load",
        marker="requests",
        metavar="N",
    ),
    _spec(
        "duration",
        parse_optional_duration,
        None,
        "Time bound of the measurement per level in seconds (0: none); the level ends at "
        "--requests or here, and requests in flight get min(30 s, this) to finish.",
        cli="--duration",
        topic="load",
        marker="duration",
        metavar="S",
    ),
    _spec(
        "endpoint",
        _choice("endpoint", ENDPOINTS),
        "chat",
        "OpenAI endpoint: chat (/v1/chat/completions) or completions (/v1/completions).",
        cli="--endpoint",
        topic="requests",
        marker="endpoint",
        choices=ENDPOINTS,
    ),
    _spec(
        "slo",
        parse_objectives,
        (),
        'SLO of every SLO test, e.g. "ttft_p99<500,itl_p50<30" (ms).',
        cli="--slo",
        topic="slo",
        marker="objectives",
        coerce=coerce_objectives,
        metavar="SPEC",
    ),
    _spec(
        "slo_strict",
        parse_bool,
        False,
        "Gate on the upper confidence bound of each percentile, not the point estimate.",
        cli="--slo-strict",
        topic="slo",
        marker="strict",
        coerce=_coerce_bool,
        flag=True,
    ),
    _spec(
        "slo_confidence",
        parse_confidence,
        DEFAULT_CONFIDENCE,
        "Confidence of the percentile upper bounds.",
        cli="--slo-confidence",
        topic="slo",
        marker="confidence",
        metavar="C",
    ),
    _spec(
        "slo_extend",
        parse_bool,
        False,
        "Extend each sweep past its last level until goodput < 50% of its best "
        f"(at most {MAX_EXTEND_LEVELS} extra levels).",
        cli="--slo-extend",
        topic="slo",
        marker="extend",
        coerce=_coerce_bool,
        flag=True,
    ),
    _spec(
        "slo_capacity",
        parse_bool,
        False,
        "Instead of the sweep, search each SLO test's capacity: the highest load meeting its "
        "objectives (exponential probe from the first level, then bisection; one test per "
        "engine, id ENGINE-capacity).",
        cli="--slo-capacity",
        topic="slo",
        marker="capacity",
        coerce=_coerce_bool,
        flag=True,
    ),
    _spec(
        "capacity_max",
        parse_optional_duration,
        None,
        "Highest load a capacity search probes (concurrency or rate).",
        cli="--slo-capacity-max",
        topic="slo",
        shown_default="none (12 levels at most)",
        marker="capacity_max",
        metavar="N",
    ),
    _spec(
        "slo_retries",
        parse_int,
        2,
        "Retries of a level whose run was invalid (the client, not the engine, was the "
        "bottleneck); still invalid after them, the test ends as inconclusive, an error of "
        "its own kind, never an SLO failure.",
        cli="--slo-retries",
        topic="slo",
        marker="retries",
        metavar="N",
    ),
    _spec(
        "slo_early_stop",
        _choice("early_stop", EARLY_STOP_MODES),
        "auto",
        "End a level as soon as its verdict is settled at the confidence: a violation shown "
        "by a confidence bound, or (strict) a pass; 'auto' is on for capacity searches and "
        "sweep extensions and off for the levels a comparison reads.",
        cli="--slo-early-stop",
        topic="slo",
        marker="early_stop",
        choices=EARLY_STOP_MODES,
    ),
    _spec(
        "early_stop_min",
        parse_positive_int,
        100,
        "Completed requests a level needs before an early stop may end it.",
        cli="--slo-early-stop-min",
        topic="slo",
        marker="early_stop_min",
        metavar="N",
    ),
    _spec(
        "min_attainment",
        parse_fraction,
        None,
        "Minimum share of good requests (0..1 or NN%) of the configured SLO.",
        cli="--slo-min-attainment",
        topic="slo",
        shown_default="0.9",
        marker="min_attainment",
        metavar="F",
    ),
    _spec(
        "min_goodput",
        parse_float,
        None,
        "Minimum goodput in output tok/s of the configured SLO.",
        cli="--slo-min-goodput",
        topic="slo",
        shown_default="none",
        marker="min_goodput_tok_s",
        metavar="TOK_S",
    ),
    _spec(
        "client_max_lag",
        parse_float,
        None,
        "Client health: schedule and event-loop lag P99 (ms) above which a run is marked "
        "invalid (the load generator was the bottleneck).",
        cli="--client-max-lag",
        topic="client",
        shown_default="10 ms",
        marker="client_max_lag",
        metavar="MS",
    ),
    _spec(
        "client_max_stalled",
        parse_fraction,
        0.001,
        "Client health: share of streamed tokens (0..1 or NN%) timestamped inside an "
        "event-loop stall (a wake later than --client-max-lag) above which a run is invalid.",
        cli="--client-max-stalled",
        topic="client",
        marker="client_max_stalled",
        metavar="F",
    ),
    _spec(
        "client_max_cpu",
        parse_float,
        None,
        "Client health: CPU share of a core (e.g. 0.9) above which a run is marked invalid.",
        cli="--client-max-cpu",
        topic="client",
        shown_default="0.9",
        marker="client_max_cpu",
        metavar="F",
    ),
    _spec(
        "request_timeout",
        parse_positive_float,
        600.0,
        "Total deadline of one request in seconds, from send to its last byte.",
        cli="--request-timeout",
        topic="requests",
        marker="request_timeout",
        metavar="S",
    ),
    _spec(
        "connect_timeout",
        parse_positive_float,
        10.0,
        "Deadline of a connection (TCP and TLS) in seconds.",
        cli="--connect-timeout",
        topic="requests",
        marker="connect_timeout",
        metavar="S",
    ),
    _spec(
        "first_byte_timeout",
        parse_positive_float,
        300.0,
        "Deadline of a request's first response data in seconds (a loaded engine may queue "
        "a request for minutes before its prefill).",
        cli="--first-byte-timeout",
        topic="requests",
        marker="first_byte_timeout",
        metavar="S",
    ),
    _spec(
        "idle_timeout",
        parse_positive_float,
        60.0,
        "A stream that sends no data for this many seconds has stalled and fails as a "
        "timeout; SSE comments and keep-alives do not count as data.",
        cli="--idle-timeout",
        topic="requests",
        marker="idle_timeout",
        metavar="S",
    ),
    _spec(
        "level_timeout",
        parse_level_timeout,
        None,
        "Wall-clock bound of one load level in seconds: calibration, warm-up, measurement "
        "and drain together ('none' for no bound; 'auto': 3 x --duration when --duration is "
        "set, else no bound, each request has its deadlines).",
        cli="--level-timeout",
        topic="load",
        shown_default="auto",
        marker="level_timeout",
        metavar="S",
    ),
    _spec(
        "max_error_rate",
        parse_fraction,
        0.01,
        "Highest share of failed requests (0..1 or NN%) with which a level can pass; a "
        "level where every request failed always fails, with or without objectives.",
        cli="--slo-max-error-rate",
        topic="slo",
        marker="max_error_rate",
        metavar="F",
    ),
    _spec(
        "max_short_outputs",
        parse_fraction,
        0.05,
        "Share of completed requests (0..1 or NN%) allowed to return fewer tokens than the "
        "pinned output length; above it the level is flagged as not comparable (the server "
        "ignores ignore_eos/min_tokens, so it ran another workload).",
        cli="--max-short-outputs",
        topic="slo",
        marker="max_short_outputs",
        metavar="F",
    ),
    # What a verdict may rest on: a usage count the stream did not show, a load the
    # client did not apply (docs/metrics.md, docs/load.md).
    _spec(
        "max_usage_mismatch",
        parse_fraction,
        0.05,
        "Share of completed requests (0..1 or NN%) allowed a usage.completion_tokens that "
        "disagrees with the stream (by more than 2 tokens or 5 %, or above max_tokens); "
        "such a count is never credited, and above this share the level is flagged as not "
        "comparable.",
        cli="--max-usage-mismatch",
        topic="slo",
        marker="max_usage_mismatch",
        metavar="F",
    ),
    _spec(
        "client_min_load",
        parse_fraction,
        0.9,
        "Client health: the share of the load asked (0..1 or NN%) the client must have "
        "applied over the measured window, the time-averaged requests in flight of a closed "
        "loop or the arrival rate of an open loop; below it the run is invalid, whatever "
        "the cause (0: no check).",
        cli="--client-min-load",
        topic="client",
        marker="client_min_load",
        metavar="F",
    ),
    _spec(
        "ca_bundle",
        parse_optional_str,
        None,
        "PEM file of the CAs to trust for https engines (load generator and readiness probes).",
        cli="--ca-bundle",
        topic="requests",
        shown_default="the system store (SSL_CERT_FILE and SSL_CERT_DIR honoured)",
        marker="ca_bundle",
        metavar="PATH",
    ),
    _spec(
        "insecure",
        parse_bool,
        False,
        "Accept any TLS certificate (self-signed test servers).",
        cli="--insecure",
        topic="requests",
        marker="insecure",
        coerce=_coerce_bool,
        flag=True,
    ),
    _spec(
        "pin_output",
        parse_bool,
        True,
        "Send ignore_eos and min_tokens so that every output is --osl tokens long (false for "
        "a server that rejects unknown request fields).",
        cli="--pin-output",
        topic="requests",
        marker="pin_output",
        coerce=_coerce_bool,
        metavar="BOOL",
    ),
    _spec(
        "transport",
        _choice("transport", TRANSPORTS),
        "auto",
        "HTTP client of the load generator: auto (the fast HTTP/1.1 client), fast, or httpx.",
        cli="--transport",
        topic="requests",
        marker="transport",
        choices=TRANSPORTS,
    ),
    _spec(
        "receive_stamps",
        _choice("receive_stamps", RECEIVE_STAMPS),
        "auto",
        "When a chunk arrived: auto (the kernel's arrival stamp where the fast client can "
        "read it, plain http on Linux; see docs/load.md) or read (when the client read it).",
        cli="--receive-stamps",
        topic="requests",
        marker="receive_stamps",
        choices=RECEIVE_STAMPS,
    ),
    _spec(
        "api_key_env",
        parse_str,
        "OPENAI_API_KEY",
        "Environment variable whose value is sent as the bearer API key (never logged); "
        "empty for none.",
        cli="--api-key-env",
        topic="requests",
        shown_default="OPENAI_API_KEY",
        marker="api_key_env",
        metavar="VAR",
    ),
    _spec(
        "burstiness",
        parse_positive_float,
        1.0,
        "Gamma arrivals' shape (--arrival=gamma): 1 is Poisson, below 1 burstier, above 1 "
        "more regular (vLLM bench's --burstiness).",
        cli="--burstiness",
        topic="load",
        marker="burstiness",
        metavar="K",
    ),
    _spec(
        "ramp",
        parse_ramp,
        None,
        "One open-loop level whose rate goes linearly from START to END requests/s over "
        "SECONDS (instead of --rate or --concurrency).",
        cli="--ramp",
        topic="load",
        marker="ramp",
        metavar="START:END:SECONDS",
    ),
    _spec(
        "steps",
        parse_steps,
        None,
        "One open-loop level that holds each rate for SECONDS in turn (instead of --rate or "
        "--concurrency).",
        cli="--steps",
        topic="load",
        marker="steps",
        metavar="R,R,...:SECONDS",
    ),
    _spec(
        "max_concurrency",
        parse_optional_request_cap,
        None,
        "Cap on the requests in flight of an open loop (rate, ramp, steps, trace): an "
        "arrival that finds it reached waits for a slot (vLLM bench's --max-concurrency).",
        cli="--max-concurrency",
        topic="load",
        shown_default="none",
        marker="max_concurrency",
        metavar="N",
    ),
    _spec(
        "trace",
        parse_optional_str,
        None,
        "Replay a timestamped trace (Mooncake JSONL, Azure or BurstGPT CSV, JSONL with "
        "'timestamp'): its rows are the requests, sent at their times (see --trace-speed).",
        cli="--trace-file",
        topic="traffic",
        marker="trace",
        metavar="PATH",
    ),
    _spec(
        "trace_format",
        _choice("trace_format", TRACE_FORMATS),
        "auto",
        "The trace's format (auto: by its header or first line).",
        cli="--trace-format",
        topic="traffic",
        marker="trace_format",
        choices=TRACE_FORMATS,
    ),
    _spec(
        "trace_speed",
        parse_float_list,
        None,
        "Replay speed-ups, one level each: 2 sends the trace twice as fast (a concurrency or "
        "rate instead sends its rows as a dataset).",
        cli="--trace-speed",
        topic="traffic",
        shown_default="1 with --trace-file",
        marker="trace_speed",
        metavar="X[,X]",
    ),
    _spec(
        "trace_start",
        parse_float,
        0.0,
        "Start of the trace window, in seconds from its first request.",
        cli="--trace-start",
        topic="traffic",
        marker="trace_start",
        metavar="SECONDS",
    ),
    _spec(
        "trace_window",
        parse_optional_duration,
        None,
        "Length of the trace window in seconds.",
        cli="--trace-window",
        topic="traffic",
        shown_default="to the end of the trace",
        marker="trace_window",
        metavar="SECONDS",
    ),
    _spec(
        "block_tokens",
        parse_positive_int,
        512,
        "Tokens per hash id of a Mooncake trace (its release uses 512).",
        cli="--block-tokens",
        topic="traffic",
        marker="block_tokens",
        metavar="N",
    ),
    _spec(
        "turns",
        parse_positive_int,
        1,
        "Turns per conversation: above 1 each request is a conversation's turn, its prompt "
        "the history (earlier messages and the replies streamed) plus --isl new tokens; "
        "with ShareGPT, up to this many of each conversation's human turns.",
        cli="--turns",
        topic="traffic",
        marker="turns",
        metavar="N",
    ),
    _spec(
        "think_time",
        parse_float,
        0.0,
        "Seconds a user thinks between a reply and the next turn (mean, see --think-distribution).",
        cli="--think-time",
        topic="traffic",
        marker="think_time",
        metavar="SECONDS",
    ),
    _spec(
        "think_distribution",
        _choice("think_distribution", THINK_DISTRIBUTIONS),
        "fixed",
        "Think times: fixed, exponential or uniform over [0, 2 x mean], seeded.",
        cli="--think-distribution",
        topic="traffic",
        marker="think_distribution",
        choices=THINK_DISTRIBUTIONS,
    ),
    _spec(
        "history_turns",
        parse_int,
        0,
        "Turns of history each prompt carries (0: all of them).",
        cli="--history-turns",
        topic="traffic",
        marker="history_turns",
        metavar="N",
    ),
    _spec(
        "session_header",
        parse_optional_str,
        None,
        "Header that carries each conversation's id on its turns (sticky routing), e.g. "
        "X-Session-ID.",
        cli="--session-header",
        topic="traffic",
        marker="session_header",
        metavar="NAME",
    ),
    _spec(
        "header",
        parse_headers,
        (),
        "Extra HTTP header on every request: 'NAME: VALUE' (repeatable; ';' between several "
        "in env and ini).",
        cli="--header",
        topic="requests",
        marker="headers",
        coerce=coerce_headers,
        metavar="'NAME: VALUE'",
        repeatable=True,
    ),
    _spec(
        "extra_body",
        parse_json_object,
        None,
        "JSON object merged into every request body, e.g. '{\"top_k\": 20}'.",
        cli="--extra-body",
        topic="requests",
        marker="extra_body",
        coerce=coerce_json_object,
        metavar="JSON",
    ),
    _spec(
        "models",
        parse_models,
        None,
        "Each request asks for one of these models, drawn by weight: NAME[:WEIGHT],... "
        "(LoRA adapters an engine serves beside its base model).",
        cli="--models",
        topic="traffic",
        marker="models",
        coerce=coerce_models,
        metavar="NAME[:W],...",
    ),
    _spec(
        "slo_signals",
        parse_bool,
        True,
        "Scrape each engine's /metrics (and NVML or --dcgm-url) before, during and after "
        "each level: queue, KV cache, preemptions, engine-side latencies, GPU; a failed "
        "objective names the signal that explains it.",
        cli="--slo-signals",
        topic="signals",
        marker="signals",
        coerce=_coerce_bool,
        metavar="BOOL",
    ),
    _spec(
        "signals_interval",
        parse_positive_float,
        1.0,
        "Seconds between /metrics scrapes during a level.",
        cli="--signals-interval",
        topic="signals",
        marker="signals_interval",
        metavar="SECONDS",
    ),
    _spec(
        "dcgm_url",
        parse_optional_url,
        None,
        "A DCGM exporter's /metrics URL: GPU utilisation, memory, power and energy (J/token) "
        "per level instead of NVML.",
        cli="--dcgm-url",
        topic="signals",
        marker="dcgm_url",
        metavar="URL",
    ),
    # Bounded auxiliaries and honest caches.
    _spec(
        "signals_timeout",
        parse_positive_float,
        5.0,
        "Total deadline of one /metrics scrape (connect, headers, the whole body): a body "
        "that does not end in time is given up, and not scraped again in that level.",
        cli="--signals-timeout",
        topic="signals",
        marker="signals_timeout",
        metavar="SECONDS",
    ),
    _spec(
        "external_ready_timeout",
        parse_positive_float,
        60.0,
        "How long an external engine (already running) may take to answer ready "
        "(/v1/models listing the model) before the session says what it saw and stops.",
        cli="--external-ready-timeout",
        topic="engines",
        metavar="SECONDS",
    ),
    _spec(
        "reset_cache",
        _choice("reset_cache", RESET_CACHE_MODES),
        "auto",
        "Empty the engine's prefix cache before each level (vLLM /reset_prefix_cache, "
        "SGLang /flush_cache, Dynamo /clear_kv_blocks, the sim): 'auto' where the harness "
        "started the engine, 'on' also for an external engine, 'off' never.",
        cli="--reset-cache",
        topic="engines",
        marker="reset_cache",
        choices=RESET_CACHE_MODES,
    ),
)

SPEC_BY_NAME: dict[str, Spec] = {s.name: s for s in SPECS}
MARKER_KWARGS: dict[str, Spec] = {s.marker: s for s in SPECS if s.marker}
# ``slo=`` is accepted as an alias of ``objectives=`` on the marker.
MARKER_ALIASES = {"slo": "objectives", "min_goodput": "min_goodput_tok_s"}
#: Marker keywords that only a test can set (no CLI, ini or environment form): the engines
#: a test runs on, replacing the session's (``--engine`` still narrows them).
MARKER_ONLY: dict[str, Callable[[Any], Any]] = {"engines": _coerce_with(parse_name_list)}


def cli_type(spec: Spec) -> Callable[[str], Any]:
    """The argparse ``type=`` of a spec: format errors become argparse's own messages."""

    def parse(text: str) -> Any:
        try:
            return spec.parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = spec.name
    return parse


def given_cli(getoption: Callable[[str], Any]) -> dict[str, Any]:
    """The options given on a command line parsed with ``argparse_option``'s keywords:
    ``getoption(dest)`` reads one (``config.getoption``, ``getattr(namespace, ...)``)."""
    given = ((s, getoption(f"llmslo_{s.name}")) for s in SPECS if s.cli)
    return {s.name: v for s, v in given if cli_given(s, v)}


def default_text(spec: Spec, defaults: Mapping[str, Any] | None = None) -> str:
    """The default of ``spec`` as ``--help`` shows it: the value that applies when nothing
    sets it (``defaults``: ``llmslo run``'s own, ``RUN_DEFAULTS``), never a bare None."""
    if defaults and spec.name in defaults:
        value = defaults[spec.name]
    elif spec.shown_default is not None:
        return spec.shown_default
    elif spec.name == "concurrency":
        value = DEFAULT_CONCURRENCY
    else:
        value = spec.default
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value) or "none"
    if isinstance(value, bool):
        return ("on" if value else "off") if spec.flag else str(value).lower()
    if value is None:
        return "none"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def argparse_option(
    spec: Spec, *, ini: bool = True, defaults: Mapping[str, Any] | None = None
) -> tuple[str, dict[str, Any]]:
    """The command-line flag of ``spec`` and its ``add_argument`` keywords: the same for the
    pytest plugin (``parser.addoption``) and ``llmslo run``, so an option has one name and
    one meaning everywhere. The value lands in ``llmslo_<name>``; an option not given is
    ``UNSET`` (``None`` for a repeatable one), which ``cli_given`` tells apart. ``ini``:
    the help names the ini key (``llmslo run`` reads no ini file); ``defaults``: the
    defaults that apply instead of the spec's (``RUN_DEFAULTS``)."""
    if not spec.cli:
        raise ValueError(f"setting {spec.name!r} has no command-line flag")
    where = f"Ini: {spec.ini}, env: {spec.env}" if ini else f"Env: {spec.env}"
    helptext = f"{spec.help} {where}. Default: {default_text(spec, defaults)}."
    kw: dict[str, Any] = {
        "dest": f"llmslo_{spec.name}",
        "default": None if spec.repeatable else UNSET,
        # argparse %-formats help texts.
        "help": helptext.replace("%", "%%"),
    }
    if spec.flag:
        kw.update(action="store_const", const=True)
    else:
        kw.update(
            action="append" if spec.repeatable else "store",
            type=cli_type(spec),
            metavar=spec.metavar or (("{" + ",".join(spec.choices) + "}") or None),
        )
    return spec.cli, kw


# --------------------------------------------------------------------------- sources


@dataclass(frozen=True, slots=True)
class Sources:
    """Raw values from each source. ``cli`` holds the values argparse parsed for the options
    that were given (only those: a given value may be None, e.g. ``--duration=0``;
    repeatable flags a list of parsed values); ``ini`` holds the raw text of each ini key
    (``""`` when unset); ``env`` is the process environment."""

    cli: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    ini: Mapping[str, Any] = field(default_factory=dict)
    #: Parsed values that replace the specs' defaults (``llmslo run``: ``RUN_DEFAULTS``).
    defaults: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_environ(
        cls,
        cli: Mapping[str, Any],
        ini: Mapping[str, Any],
        env: Mapping[str, str] | None = None,
        defaults: Mapping[str, Any] | None = None,
    ) -> Sources:
        return cls(
            cli=cli,
            env=dict(os.environ if env is None else env),
            ini=ini,
            defaults=dict(defaults or {}),
        )


def _flatten_cli(spec: Spec, value: Any) -> Any:
    if spec.repeatable and isinstance(value, list):
        out: list[Any] = []
        for v in value:
            out.extend(v if isinstance(v, (tuple, list)) else (v,))
        return tuple(out)
    return value


def _lookup(
    spec: Spec, sources: Sources, marker: Mapping[str, Any] | None, where: str
) -> tuple[Any, str, bool]:
    """(value, source label, found). Checks the sources in precedence order."""
    if spec.cli and spec.name in sources.cli:
        v = sources.cli[spec.name]
        if not (spec.repeatable and v in (None, [])):
            return _flatten_cli(spec, v), spec.cli, True
    raw = sources.env.get(spec.env)
    if raw is not None and raw.strip() != "":
        return _parse_from(spec, raw, spec.env), spec.env, True
    raw = sources.ini.get(spec.ini)
    if isinstance(raw, list):  # ini "args"/"linelist" types
        raw = " ".join(raw)
    if raw is not None and str(raw).strip() != "":
        label = f"ini {spec.ini}"
        return _parse_from(spec, str(raw), label), label, True
    if marker is not None and spec.marker and spec.marker in marker:
        label = f"@pytest.mark.slo({spec.marker}=...) on {where}"
        try:
            return spec.coerce_marker(marker[spec.marker]), label, True
        except ValueError as exc:
            raise ConfigError(f"{label}: {exc}") from None
    return sources.defaults.get(spec.name, spec.default), "default", False


def _parse_from(spec: Spec, raw: str, label: str) -> Any:
    try:
        return spec.parse(raw)
    except ValueError as exc:
        raise ConfigError(f"{label}: {exc}") from None


# -------------------------------------------------------------------------- settings


@dataclass(frozen=True, slots=True)
class SessionSettings:
    """Session-wide settings (engines, files, regression); one per pytest session."""

    engines: tuple[str, ...] = ("sim",)
    engine_url: str | None = None
    engine_config: str | None = None
    engine_opts: tuple[str, ...] = ()
    engine_restarts: int = 1
    sim_profile: str | None = None
    json_path: str | None = None
    markdown_path: str | None = None
    svg_path: str | None = None
    csv_path: str | None = None
    save: str | None = None
    compare: str | None = None
    compare_fail: str | None = None
    external_ready_timeout_s: float = 60.0
    sources: Mapping[str, str] = field(default_factory=dict)
    #: The path of every output setting (topic ``outputs``: ``slo_json`` and each report
    #: format's ``slo_<name>``) by setting name; None where none was asked for.
    outputs: Mapping[str, str | None] = field(default_factory=dict)
    #: Problems worth a warning that stop nothing (an ``LLMSLO_*`` variable no setting reads).
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TestSettings:
    """What one SLO test runs: its load levels, workload, request counts and SLO."""

    __test__ = False  # not a test class, despite the name

    levels: tuple[LoadLevel, ...] = tuple(LoadLevel.concurrency(n) for n in DEFAULT_CONCURRENCY)
    model: str = ""
    isl: int = 512
    osl: int = 256
    isl_stddev: float = 0.0
    osl_stddev: float = 0.0
    distribution: str | None = None
    dataset: str | None = None
    workload_kind: str | None = None
    num_prefixes: int = 0
    prefix_len: int = 0
    seed: int = 0
    prompt_salt: str = "auto"
    warmup: int = 200
    requests: int | None = 500
    duration_s: float | None = None
    endpoint: str = "chat"
    objectives: tuple[Any, ...] = ()
    strict: bool = False
    confidence: float = DEFAULT_CONFIDENCE
    extend: bool = False
    capacity: bool = False
    capacity_max: float | None = None
    min_attainment: float | None = None
    min_goodput_tok_s: float | None = None
    retries: int = 2
    early_stop: str = "auto"
    early_stop_min: int = 100
    request_timeout_s: float = 600.0
    connect_timeout_s: float = 10.0
    first_byte_timeout_s: float = 300.0
    idle_timeout_s: float = 60.0
    level_timeout_s: float | None = None
    max_error_rate: float = 0.01
    max_short_outputs: float = 0.05
    max_usage_mismatch: float = 0.05
    client_min_load: float = 0.9
    ca_bundle: str | None = None
    insecure: bool = False
    client_max_lag_ms: float | None = None
    client_max_cpu: float | None = None
    client_max_stalled: float = 0.001
    pin_output: bool = True
    transport: str = "auto"
    receive_stamps: str = "auto"
    api_key_env: str = "OPENAI_API_KEY"
    burstiness: float = 1.0
    max_concurrency: int | None = None
    trace: str | None = None
    trace_format: str = "auto"
    trace_start_s: float = 0.0
    trace_window_s: float | None = None
    block_tokens: int = 512
    turns: int = 1
    think_time_s: float = 0.0
    think_distribution: str = "fixed"
    history_turns: int = 0
    session_header: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    extra_body: Mapping[str, Any] | None = None
    models: tuple[tuple[str, float], ...] | None = None
    signals: bool = True
    signals_interval_s: float = 1.0
    dcgm_url: str | None = None
    signals_timeout_s: float = 5.0
    reset_cache: str = "auto"
    #: The test's own engines (``engines=`` on its marker); empty: the session's.
    engines: tuple[str, ...] = ()
    sources: Mapping[str, str] = field(default_factory=dict)

    def warmup_for(self, level: LoadLevel) -> int:
        """Warm-up requests at ``level``: the setting, but never less than one wave of a
        closed loop. Its first ``concurrency`` requests all leave at the same instant, a
        burst of prefills that no steady load has; measured, it puts a cold-start spike
        into TTFT P99 (at c32 with 4 warm-up requests the sim's TTFT P99 read 780 ms instead
        of 300 ms). ``warmup=0`` still means none."""
        if self.warmup <= 0 or level.mode != "concurrency":
            return self.warmup
        return max(self.warmup, math.ceil(level.value))

    @property
    def grace_s(self) -> float:
        """How long requests in flight may finish after the duration bound: 30 s, but no
        longer than the duration itself (a 5 s level does not wait 30 s for stragglers)."""
        return min(30.0, self.duration_s) if self.duration_s else 30.0

    def level_bound_s(self) -> float | None:
        """The wall-clock bound of one level: the setting, or by default (``auto``)
        3 x duration when a duration is set (calibration and warm-up, measurement, drain:
        each gets about the duration); None: no bound."""
        if self.level_timeout_s is not None:
            return None if math.isinf(self.level_timeout_s) else self.level_timeout_s
        if self.duration_s:
            return 3.0 * self.duration_s
        return None

    def workload_fields(self) -> dict[str, Any]:
        """Keyword arguments of ``load.WorkloadSpec`` for this test."""
        kind, path = self.dataset_kind()
        dist = self.distribution
        if dist is None:
            dist = "normal" if (self.isl_stddev or self.osl_stddev) else "fixed"
        return {
            "kind": kind,
            "isl": self.isl,
            "osl": self.osl,
            "isl_stddev": self.isl_stddev,
            "osl_stddev": self.osl_stddev,
            "distribution": dist,
            "path": path,
            "num_prefixes": self.num_prefixes,
            "prefix_len": self.prefix_len,
            "seed": self.seed,
            "trace_format": self.trace_format,
            "block_tokens": self.block_tokens,
            "trace_start_s": self.trace_start_s,
            "trace_window_s": self.trace_window_s,
            "turns": self.turns,
            "think_time_s": self.think_time_s,
            "think_distribution": self.think_distribution,
            "history_turns": self.history_turns,
        }

    def dataset_kind(self) -> tuple[str, str | None]:
        """(workload kind, dataset path)."""
        if self.trace:
            return "trace", self.trace
        if self.dataset:
            text = self.dataset
            for k in ("sharegpt", "jsonl"):
                if text.startswith(k + ":"):
                    return k, text[len(k) + 1 :]
            if self.workload_kind in ("sharegpt", "jsonl"):
                return self.workload_kind, text
            return ("jsonl" if text.endswith(".jsonl") else "sharegpt"), text
        return (self.workload_kind or "synthetic"), None

    @property
    def slo_text(self) -> str:
        return ", ".join(getattr(o, "label", str(o)) for o in self.objectives)


#: ``LLMSLO_*`` variables the package reads besides the settings' own: where the engine
#: suites find their installs (``engines/local.py``, ``.ci/engines.sh``) and CI switches.
OTHER_ENV: frozenset[str] = frozenset(
    {
        "LLMSLO_ENGINES_HOME",
        "LLMSLO_ENGINES_STRICT",
        "LLMSLO_REQUIRE_ENGINES",
        "LLMSLO_VLLM_PYTHON",
        "LLMSLO_DYNAMO_PYTHON",
        "LLMSLO_TINY_MODEL",
        "LLMSLO_SIM_IMAGE",
        "LLMSLO_IMAGE_PYTHON",
        "LLMSLO_CI_VENV",
    }
)


def check_environment(env: Mapping[str, str], also: Iterable[str] = ()) -> list[str]:
    """Warnings for the ``LLMSLO_*`` variables that nothing reads (``also``: names read
    elsewhere, such as the API key variable). One that is a near miss of a setting's own
    (``LLMSLO_CONCURENCY``) is a ``ConfigError`` naming it: the typo would silently run
    the defaults, a sweep of seven levels instead of the one asked for."""
    import difflib

    known = {s.env for s in SPECS} | OTHER_ENV | set(also)
    suffixes = {s.env.removeprefix(ENV_PREFIX): s.env for s in SPECS}
    out: list[str] = []
    for name in sorted(env):
        if not name.startswith(ENV_PREFIX) or name in known:
            continue
        close = difflib.get_close_matches(
            name.removeprefix(ENV_PREFIX), list(suffixes), n=1, cutoff=0.8
        )
        if close:
            raise ConfigError(
                f"{name} is set, but no setting reads it: did you mean {suffixes[close[0]]}? "
                "(README 'Options' lists every variable.)"
            )
        out.append(f"{name} is set, but no pytest-llmslo setting reads it; it is ignored")
    return out


def resolve_session(sources: Sources) -> SessionSettings:
    """Resolve the session-wide settings; raises ``ConfigError`` naming the source.

    ``--engine-url`` without ``--engine`` (from any source) means the external engine:
    a URL is never left unused while the built-in sim is measured."""
    vals: dict[str, Any] = {}
    where: dict[str, str] = {}
    for spec in SPECS:
        if spec.scope != "session":
            continue
        v, label, _found = _lookup(spec, sources, None, "")
        vals[spec.name] = v
        where[spec.name] = label
    api_key_env, _, _ = _lookup(SPEC_BY_NAME["api_key_env"], sources, None, "")
    warnings = check_environment(sources.env, (api_key_env,))
    engines = tuple(dict.fromkeys(vals["engine"]))  # de-duplicated, order kept
    if vals["engine_url"] and where["engine"] == "default":
        engines = ("external",)
        where["engine"] = where["engine_url"]
    return SessionSettings(
        engines=engines,
        engine_url=vals["engine_url"],
        engine_config=vals["engine_config"],
        engine_opts=tuple(vals["engine_opt"]),
        engine_restarts=vals["engine_restarts"],
        sim_profile=vals["sim_profile"],
        json_path=vals["slo_json"],
        markdown_path=vals["slo_markdown"],
        svg_path=vals["slo_svg"],
        csv_path=vals["slo_csv"],
        save=vals["slo_save"],
        compare=vals["slo_compare"],
        compare_fail=vals["slo_compare_fail"],
        external_ready_timeout_s=vals["external_ready_timeout"],
        sources=where,
        outputs={
            s.name: vals[s.name] for s in SPECS if s.scope == "session" and s.topic == "outputs"
        },
        warnings=tuple(warnings),
    )


def split_marker(args: Sequence[Any], kwargs: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Marker positional arguments are objectives; keyword arguments must be known."""
    out: dict[str, Any] = {}
    for k, v in kwargs.items():
        key = MARKER_ALIASES.get(k, k)
        if key not in MARKER_KWARGS and key not in MARKER_ONLY:
            valid = ", ".join(sorted([*MARKER_KWARGS, *MARKER_ONLY]))
            raise ConfigError(
                f"@pytest.mark.slo on {where}: {k!r} is not a known argument. Valid: {valid}."
            )
        out[key] = v
    if args:
        extra = list(args)
        if "objectives" in out:
            extra.append(out["objectives"])
        out["objectives"] = extra
    return out


def check_marker(marker: Mapping[str, Any], where: str) -> None:
    """Every marker value must be valid, also one a higher source (CLI, env, ini)
    overrides: a bad marker is a bug in the test file that must not hide until someone
    runs it without the override."""
    for key, value in marker.items():
        spec = MARKER_KWARGS.get(key)
        coerce = MARKER_ONLY.get(key) or (spec.coerce_marker if spec is not None else None)
        if coerce is None:
            continue  # split_marker rejects unknown keywords, naming the valid ones
        try:
            coerce(value)
        except ValueError as exc:
            raise ConfigError(f"@pytest.mark.slo({key}=...) on {where}: {exc}") from None


def resolve_test(
    sources: Sources,
    marker: Mapping[str, Any] | None = None,
    where: str = "",
) -> TestSettings:
    """Resolve one test's settings; ``marker`` holds the merged ``slo`` marker keywords
    (from ``split_marker``). Raises ``ConfigError`` naming the source."""
    marker = marker or {}
    check_marker(marker, where)
    vals: dict[str, Any] = {}
    where_from: dict[str, str] = {}
    found: dict[str, bool] = {}
    for spec in SPECS:
        if spec.scope != "test":
            continue
        v, label, ok = _lookup(spec, sources, marker, where)
        vals[spec.name] = v
        where_from[spec.name] = label
        found[spec.name] = ok
    levels = _resolve_levels(sources, marker, where, vals, where_from)
    if vals["requests"] is None and not vals["duration"] and not vals["trace"]:
        raise ConfigError(
            f"{where_from['requests']}: a level without a request count needs a duration: "
            "give --duration (or a request count)"
        )
    return TestSettings(
        levels=levels,
        model=vals["model"],
        isl=vals["isl"],
        osl=vals["osl"],
        isl_stddev=vals["isl_stddev"],
        osl_stddev=vals["osl_stddev"],
        distribution=vals["distribution"],
        dataset=vals["dataset"],
        workload_kind=vals["workload"],
        num_prefixes=vals["num_prefixes"],
        prefix_len=vals["prefix_len"],
        seed=vals["seed"],
        prompt_salt=vals["prompt_salt"],
        warmup=vals["warmup"],
        requests=vals["requests"],
        duration_s=vals["duration"],
        endpoint=vals["endpoint"],
        objectives=tuple(vals["slo"]),
        strict=bool(vals["slo_strict"]),
        confidence=vals["slo_confidence"],
        extend=bool(vals["slo_extend"]),
        capacity=bool(vals["slo_capacity"]),
        capacity_max=vals["capacity_max"],
        min_attainment=vals["min_attainment"],
        min_goodput_tok_s=vals["min_goodput"],
        retries=vals["slo_retries"],
        early_stop=vals["slo_early_stop"],
        early_stop_min=vals["early_stop_min"],
        request_timeout_s=vals["request_timeout"],
        connect_timeout_s=vals["connect_timeout"],
        first_byte_timeout_s=vals["first_byte_timeout"],
        idle_timeout_s=vals["idle_timeout"],
        level_timeout_s=vals["level_timeout"],
        max_error_rate=vals["max_error_rate"],
        max_short_outputs=vals["max_short_outputs"],
        max_usage_mismatch=vals["max_usage_mismatch"],
        client_min_load=vals["client_min_load"],
        ca_bundle=vals["ca_bundle"],
        insecure=bool(vals["insecure"]),
        client_max_lag_ms=vals["client_max_lag"],
        client_max_cpu=vals["client_max_cpu"],
        client_max_stalled=vals["client_max_stalled"],
        pin_output=bool(vals["pin_output"]),
        transport=vals["transport"],
        receive_stamps=vals["receive_stamps"],
        api_key_env=vals["api_key_env"],
        burstiness=vals["burstiness"],
        max_concurrency=vals["max_concurrency"],
        trace=vals["trace"],
        trace_format=vals["trace_format"],
        trace_start_s=vals["trace_start"],
        trace_window_s=vals["trace_window"],
        block_tokens=vals["block_tokens"],
        turns=vals["turns"],
        think_time_s=vals["think_time"],
        think_distribution=vals["think_distribution"],
        history_turns=vals["history_turns"],
        session_header=vals["session_header"],
        headers=tuple(vals["header"] or ()),
        extra_body=vals["extra_body"],
        models=vals["models"],
        signals=bool(vals["slo_signals"]),
        signals_interval_s=vals["signals_interval"],
        dcgm_url=vals["dcgm_url"],
        signals_timeout_s=vals["signals_timeout"],
        reset_cache=vals["reset_cache"],
        engines=tuple(dict.fromkeys(MARKER_ONLY["engines"](marker["engines"])))
        if "engines" in marker
        else (),
        sources=where_from,
    )


def _resolve_levels(
    sources: Sources,
    marker: Mapping[str, Any],
    where: str,
    vals: Mapping[str, Any],
    where_from: dict[str, str],
) -> tuple[LoadLevel, ...]:
    """The load is one setting given five ways (concurrency, rate, ramp, steps, trace
    speed-ups): the highest source that gives one wins; one source giving two is an error.
    A trace without any of them is replayed at its own pace."""
    order = ("cli", "env", "ini", "marker", "default")

    def rank(label: str) -> int:
        if label.startswith("--"):
            return 0
        if label.startswith(ENV_PREFIX):
            return 1
        if label.startswith("ini "):
            return 2
        if label.startswith("@pytest"):
            return 3
        return 4

    kinds = ("concurrency", "rate", "ramp", "steps", "trace_speed")
    ranks = {k: rank(where_from[k]) for k in kinds}
    best = min(ranks.values())
    given = [k for k in kinds if ranks[k] == best]
    if best < 4 and len(given) > 1:
        src = order[best]
        what = " and ".join(given) if len(given) > 2 else f"both {given[0]} and {given[1]}"
        raise ConfigError(
            f"{' and '.join(where_from[k] for k in given)}: a {src} source sets {what}; "
            "give one of them."
        )
    cap = vals["max_concurrency"]
    seed = vals["seed"]
    arrival = vals["arrival"]
    gamma: dict[str, Any] = {"burstiness": vals["burstiness"]} if arrival == "gamma" else {}
    if vals["burstiness"] != 1.0 and arrival != "gamma":
        raise ConfigError(
            f"{where_from['burstiness']}: burstiness shapes gamma arrivals; "
            "give --arrival=gamma with it"
        )
    kind = given[0] if best < 4 else ("trace_speed" if vals["trace"] else "concurrency")
    where_from["load"] = where_from[kind]
    if vals["trace"] and kind in ("ramp", "steps", "rate"):
        raise ConfigError(
            f"{where_from[kind]}: a trace brings its own arrival times; give --trace-speed "
            "(or a concurrency, to send its rows as a dataset)"
        )
    if kind == "trace_speed":
        if not vals["trace"]:
            raise ConfigError(
                f"{where_from['trace_speed']}: --trace-speed needs a trace (--trace-file)"
            )
        return tuple(LoadLevel.trace(x, max_concurrency=cap) for x in vals["trace_speed"] or (1.0,))
    if cap is not None and kind == "concurrency":
        raise ConfigError(
            f"{where_from['max_concurrency']}: max_concurrency caps an open loop; a closed "
            "loop's concurrency is its cap already"
        )
    if kind == "ramp":
        a, b, secs = vals["ramp"]
        return (LoadLevel.ramp(a, b, secs, arrival, seed, max_concurrency=cap, **gamma),)
    if kind == "steps":
        rates, secs = vals["steps"]
        return (LoadLevel.steps(rates, secs, arrival, seed, max_concurrency=cap, **gamma),)
    if kind == "rate":
        return tuple(
            LoadLevel.rate(r, arrival, seed, max_concurrency=cap, **gamma) for r in vals["rate"]
        )
    conc = vals["concurrency"] or DEFAULT_CONCURRENCY
    return tuple(LoadLevel.concurrency(n) for n in conc)


def level_ids(levels: Sequence[LoadLevel]) -> list[str]:
    """Test ids of the levels (``c32``, ``r2.5``), unique even when values repeat."""
    ids: list[str] = []
    seen: dict[str, int] = {}
    for lv in levels:
        label = lv.label
        n = seen.get(label, 0)
        seen[label] = n + 1
        ids.append(label if n == 0 else f"{label}_{n}")
    return ids


def check_engine_names(names: Sequence[str], configured: Iterable[str], label: str) -> None:
    """Every name must be a configured engine or a bare kind."""
    known = list(dict.fromkeys([*configured, *ENGINE_KINDS]))
    for n in names:
        if n not in known:
            raise ConfigError(f"{label}: {n!r} is not a known engine. Known: {', '.join(known)}.")


def describe_workload(test: TestSettings) -> str:
    """The workload and request counts of one test, in a few words (the plugin prints it
    per test after collection)."""
    kind, path = test.dataset_kind()
    if path is not None:
        wl = f"{kind}:{path}"
    else:
        isl = f"{test.isl}" + (f"±{test.isl_stddev:g}" if test.isl_stddev else "")
        osl = f"{test.osl}" + (f"±{test.osl_stddev:g}" if test.osl_stddev else "")
        wl = f"{kind} isl={isl} osl={osl}"
    if test.turns > 1:
        think = f" think={test.think_time_s:g}s" if test.think_time_s else ""
        wl += f" turns={test.turns}{think}"
    parts = [wl, f"warmup={test.warmup}", f"requests={test.requests or 'none'}"]
    if test.duration_s:
        parts.append(f"duration={test.duration_s:g}s")
    if test.objectives:
        parts.append(f"slo={test.slo_text}")
    return " ".join(parts)


def describe(session: SessionSettings, test: TestSettings, engines: str | None = None) -> str:
    """One line of the active settings (for the report header); ``engines``: the engines
    with what each measures (``session.engines_text``), in place of their names."""
    levels = ",".join(lv.label for lv in test.levels)
    kind, path = test.dataset_kind()
    wl = f"{kind} isl={test.isl} osl={test.osl}" if path is None else f"{kind}:{path}"
    parts = [
        f"engines={engines or ','.join(session.engines)}",
        f"levels={levels}",
        f"workload={wl}",
        f"warmup={test.warmup}",
        f"requests={test.requests or 'none'}",
    ]
    if test.duration_s:
        parts.append(f"duration={test.duration_s:g}s")
    parts.append(f"endpoint={test.endpoint}")
    if test.objectives:
        parts.append(f"slo={test.slo_text}")
    if test.strict:
        parts.append("strict")
    if test.extend:
        parts.append("extend")
    if test.capacity:
        parts.append("capacity-search")
    return " ".join(parts)
