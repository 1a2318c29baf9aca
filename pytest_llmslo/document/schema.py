"""What a results document is (DESIGN "Reports"): its versioned layout and the checks a
document passes before it is written or after it is read (``validate_document``).

Layout (``SCHEMA_VERSION`` 2)::

    {
      "schema": "pytest-llmslo/run", "schema_version": 2,
      "harness": {"name": "pytest-llmslo", "version": "0.1.0"},
      "created_utc": "2026-12-02T14:00:00Z",
      "complete": true,              # false: partial results (interrupted session)
      "constants": {...},            # model, precision, hardware, workload, slo, warmup, ...
      "engines": {NAME: {"version": "...", "metadata": {...},
                         "cold_start": {"runtime", "phases": {PHASE: seconds}, ...}}},
      "points": [                    # every measured level, one SweepPoint.to_dict() each
        {"engine", "test", "level", "summary", "verdict", "samples", "interrupted",
         "cache", "scale_up",        # cache: was the prefix cache emptied before the level
         "judged": {"outcome", "reason", "figures", "counts", "infinite", "too_few"}},
        ...],                        # judged: judged.judged_entry, what every report prints
      "sweeps": [{"engine", "test", "mode", "levels": ["c1", ...],
                  "points": [0, 1, ...], "knee": {...},
                  "capacity": {...} or null}, ...],   # CapacityResult.to_dict()
      "results_at_knee": [{"engine", "test", "level", "label", "point", "goodput_tok_s",
                           "output_tok_s", "attainment", "ttft_p99_ms", ...}, ...],
      "reports": [{"harness", "engine": {"name", "kind", "version"}, "model", "precision",
                   "hardware", "simulated", "dataset", "slo", "test", "mode",
                   "sweep": [{"concurrency", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms",
                              "output_tok_s", "goodput_tok_s", "goodput_pct", ...}, ...],
                   "results_at_knee": {...} or null}, ...]
    }

``reports`` restates each sweep as one self-contained record, in the shape of the
published engine comparisons: harness and version, engine and version, model, precision,
hardware (for the sim engine also the setup it simulates), dataset, SLO, the sweep, and
the results at the knee (concurrency, TTFT P50/P99, ITL P50, throughput, goodput and the
share of good requests). It is derived from the rest of the document: a reader that
needs one engine's figure needs nothing else.

A sweep is one test on one engine at one load mode; its ``points`` are indices into
``points``, and its knee's ``index`` is a position in that list. ``capacity`` is the
result of the capacity search the test ran (``--slo-capacity`` or the ``slo_capacity``
fixture): the capacity, its bracket, every probe and why the search stopped. A point with
``"interrupted": true`` holds the requests measured before Ctrl-C stopped its load.

``constants`` is what makes a run comparable with another: the plugin puts there ``model``,
``precision``, ``hardware``, ``workload`` (or dataset), ``slo`` (the objectives), ``warmup``,
``requests`` per level, the client settings; ``per_engine`` holds, per engine, the
constants that belong to one engine (``model``, ``precision`` and ``hardware``: the
engine's GPUs, or the sim engine's profile); ``client`` describes the machine that ran the
load generator (information, not compared). ``samples`` are compact per-request values
(``compact_samples``: ttft/itl/tpot/e2e in ms rounded to µs, aligned with the run's
records), so a later comparison can run rank tests without the raw records, and, optional
(a document without them is read as before), ``sent_s``, ``first_token_s`` and ``end_s``:
each request's times in seconds from the measured window's start, for per-second series.

An engine the harness started has its ``cold_start`` (optional: a document without it is
read as before; ``engines.coldstart``): ``runtime``, ``phases`` (``spawned_s``,
``port_open_s``, ``ready_s``, ``model_listed_s``, ``first_token_s``, ... in seconds from
the start, in start order; null for a phase not seen), on kubernetes ``cluster`` (the
pod's own figures), and ``first_token`` (the completion that was asked).

A point of a level that added capacity in its middle (the ``scale_up`` setting) has its
``scale_up`` (optional): what was asked (``asked``: at, replicas, ...), when
(``asked_s``, ``done_s``: seconds into the measured window), what was done, the goodput
before and after (``before_tok_s``, ``after_tok_s``, ``gain``, the per-second
``goodput_tok_s``) and when the new capacity showed (``shows_at_s``, ``capacity_s``), or
``error``/``why`` (``metrics.timetocapacity``).

A point of a level with faults in it (the ``fault`` setting) has ``faults`` (optional):
one object per fault with what was asked (``asked``: kind, at, ...), when (``asked_s``,
``done_s``: seconds into the measured window; ``asked_unix``), what was done (``done``)
or ``error``, and what it cost: ``failed``, ``before_tok_s``, ``goodput_min_tok_s``,
``goodput_dip``, ``before_attainment``, ``attainment_min``, ``recovered_at_s``,
``recovery_s`` (null with ``why``), ``window_s``, ``share`` (``faults.faultcost``); and
``series`` (optional): the level's per-second series (``seconds``, ``in_flight``,
``completed``, ``errors``, ``output_tok_s``, ``goodput_tok_s``, ``attainment``,
``ttft_p50_ms``, ``ttft_p99_ms``, ``itl_p50_ms``, ``itl_p99_ms``: lists of one value per
second).

``validate_document`` checks kinds and required keys and raises ``DocumentError`` (a
``ConfigError``) naming the first bad field's path (``points[3].level.mode``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_llmslo._version import __version__
from pytest_llmslo.errors import ConfigError
from pytest_llmslo.records import ARRIVALS, LoadLevel

__all__ = [
    "HARNESS",
    "OLDEST_READABLE",
    "SCHEMA",
    "SCHEMA_VERSION",
    "DocumentError",
    "validate_document",
]

SCHEMA = "pytest-llmslo/run"
SCHEMA_VERSION = 2
#: The oldest schema version ``read_document`` reads (and upgrades).
OLDEST_READABLE = 1
HARNESS = "pytest-llmslo"

_LOAD_MODES = ("concurrency", "rate")
_NUMBER_TYPES = (int, float)  # exact types: JSON true/false (bool) is not a sample
_ARRIVALS = ("closed", *ARRIVALS)
_KNEE_STATUSES = ("found", "all_passed", "none_passed", "unchecked", "empty")


class DocumentError(ConfigError):
    """A run document that cannot be read or is not well formed. ``field`` is the path of
    the bad field (``points[3].level.mode``), ``source`` the file, when known."""

    def __init__(self, message: str, *, field: str | None = None, source: str | None = None):
        self.field = field
        self.source = source
        where = f"{source}: " if source else ""
        at = f"{field}: " if field else ""
        super().__init__(f"{where}{at}{message}")


def validate_document(doc: Any) -> None:
    """Structural checks of a run document; raises ``DocumentError`` naming the first bad
    field's path. Checks kinds and required keys, not every number's plausibility."""
    _expect(isinstance(doc, Mapping), "", "a run document is a JSON object")
    _check_schema(doc)
    harness = _get(doc, "harness", Mapping, "")
    _get(harness, "name", str, "harness")
    _get(harness, "version", str, "harness")
    _get(doc, "complete", bool, "")
    _get(doc, "constants", Mapping, "")
    engines = _get(doc, "engines", Mapping, "")
    for name, entry in engines.items():
        _check_engine(entry, f"engines.{name}")
    points = _get(doc, "points", list, "")
    for i, p in enumerate(points):
        _check_point(p, f"points[{i}]", engines)
    for i, s in enumerate(_get(doc, "sweeps", list, "")):
        _check_sweep(s, f"sweeps[{i}]", len(points))
    for i, r in enumerate(_get(doc, "results_at_knee", list, "")):
        _check_knee_result(r, f"results_at_knee[{i}]", len(points))
    # Documents written before ``reports`` existed have none: it is derived, not required.
    for i, rep in enumerate(_opt(doc, "reports", list, "") or []):
        _check_report(rep, f"reports[{i}]")


def _check_schema(doc: Mapping[str, Any]) -> None:
    """The document's schema name and a version this release reads."""
    schema = doc.get("schema")
    _expect(
        schema == SCHEMA,
        "schema",
        f"expected {SCHEMA!r}, got {schema!r}: not a pytest-llmslo run document",
    )
    version = doc.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise DocumentError(f"expected an integer, got {version!r}", field="schema_version")
    if version > SCHEMA_VERSION:
        raise DocumentError(
            f"written with schema version {version}; pytest-llmslo {__version__} reads "
            f"versions {OLDEST_READABLE} to {SCHEMA_VERSION}: upgrade pytest-llmslo to read it",
            field="schema_version",
        )
    if version < OLDEST_READABLE:
        raise DocumentError(
            f"schema version {version} is older than {OLDEST_READABLE} and has no migration: "
            "re-run the sweep to produce a current document",
            field="schema_version",
        )


def _check_engine(entry: Any, where: str) -> None:
    _expect(isinstance(entry, Mapping), where, "expected an object")
    _opt(entry, "version", str, where)
    _get(entry, "metadata", Mapping, where)
    cold = _opt(entry, "cold_start", Mapping, where)
    if cold is not None:
        phases = _get(cold, "phases", Mapping, f"{where}.cold_start")
        for phase in phases:
            _opt(phases, phase, (int, float), f"{where}.cold_start.phases")


def _check_sweep(s: Any, where: str, n_points: int) -> None:
    _expect(isinstance(s, Mapping), where, "expected an object")
    _get(s, "engine", str, where)
    _get(s, "test", str, where)
    _expect(s.get("mode") in _LOAD_MODES, f"{where}.mode", f"expected one of {_LOAD_MODES}")
    levels = _get(s, "levels", list, where)
    for j, lv in enumerate(levels):
        _expect(isinstance(lv, str), f"{where}.levels[{j}]", "expected a level label")
    members = _get(s, "points", list, where)
    for j, idx in enumerate(members):
        ok = _is(idx, int) and 0 <= idx < n_points
        _expect(ok, f"{where}.points[{j}]", f"expected an index into points, got {idx!r}")
    knee = _get(s, "knee", Mapping, where)
    kidx = _opt(knee, "index", int, f"{where}.knee")
    if kidx is not None:
        _expect(0 <= kidx < len(members), f"{where}.knee.index", "not a position in the sweep")
    _expect(
        knee.get("status") in _KNEE_STATUSES,
        f"{where}.knee.status",
        f"expected one of {_KNEE_STATUSES}, got {knee.get('status')!r}",
    )
    for key in ("level", "saturation_level", "first_failure"):
        if knee.get(key) is not None:
            _check_level(knee[key], f"{where}.knee.{key}")
    capacity = _opt(s, "capacity", Mapping, where)
    if capacity is not None:
        _check_capacity(capacity, f"{where}.capacity")


def _check_knee_result(r: Any, where: str, n_points: int) -> None:
    _expect(isinstance(r, Mapping), where, "expected an object")
    _get(r, "engine", str, where)
    _get(r, "test", str, where)
    _check_level(r.get("level"), f"{where}.level")
    idx = _get(r, "point", int, where)
    _expect(0 <= idx < n_points, f"{where}.point", f"no point {idx} in points")
    for key in ("goodput_tok_s", "output_tok_s", "ttft_p99_ms"):
        _opt(r, key, (int, float), where)


def _check_report(rep: Any, where: str) -> None:
    _expect(isinstance(rep, Mapping), where, "expected an object")
    _get(_get(rep, "harness", Mapping, where), "version", str, f"{where}.harness")
    _get(_get(rep, "engine", Mapping, where), "name", str, f"{where}.engine")
    _get(rep, "test", str, where)
    for j, level in enumerate(_get(rep, "sweep", list, where)):
        _expect(isinstance(level, Mapping), f"{where}.sweep[{j}]", "expected an object")
        for key in ("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "output_tok_s"):
            _opt(level, key, (int, float), f"{where}.sweep[{j}]")
    _opt(rep, "results_at_knee", Mapping, where)


def _check_capacity(c: Mapping[str, Any], where: str) -> None:
    _expect(c.get("mode") in _LOAD_MODES, f"{where}.mode", f"expected one of {_LOAD_MODES}")
    if c.get("capacity") is not None:
        _check_level(c["capacity"], f"{where}.capacity")
    for key in ("lower", "upper"):
        _opt(c, key, (int, float), where)
    _get(c, "probes", int, where)
    for j, h in enumerate(_get(c, "history", list, where)):
        hw = f"{where}.history[{j}]"
        _expect(isinstance(h, Mapping), hw, "expected an object")
        _check_level(h.get("level"), f"{hw}.level")
        _opt(h, "passed", bool, hw)
    _get(c, "reason", str, where)


def _check_point(p: Any, where: str, engines: Mapping[str, Any]) -> None:
    _expect(isinstance(p, Mapping), where, "expected an object")
    engine = _get(p, "engine", str, where)
    _expect(engine in engines, f"{where}.engine", f"engine {engine!r} is not in engines")
    _get(p, "test", str, where)
    _opt(p, "interrupted", bool, where)
    _check_level(p.get("level"), f"{where}.level")
    s = _get(p, "summary", Mapping, where)
    sw = f"{where}.summary"
    for key in ("requests", "completed", "failed"):
        n = _get(s, key, int, sw)
        _expect(n >= 0, f"{sw}.{key}", f"expected a count >= 0, got {n!r}")
    for key in ("output_tok_s", "total_tok_s", "req_s"):
        _opt(s, key, (int, float), sw)
    for key in ("goodput_tok_s", "goodput_req_s", "attainment"):
        _opt(s, key, (int, float), sw)
    _get(s, "valid", bool, sw)
    dists = _get(s, "distributions", Mapping, sw)
    for name, d in dists.items():
        _expect(isinstance(d, Mapping), f"{sw}.distributions.{name}", "expected an object")
        _get(d, "count", int, f"{sw}.distributions.{name}")
        _get(d, "percentiles", Mapping, f"{sw}.distributions.{name}")
    verdict = p.get("verdict")
    if verdict is not None:
        vw = f"{where}.verdict"
        _expect(isinstance(verdict, Mapping), vw, "expected an object or null")
        _get(verdict, "passed", bool, vw)
        for j, r in enumerate(_get(verdict, "results", list, vw)):
            rw = f"{vw}.results[{j}]"
            _expect(isinstance(r, Mapping), rw, "expected an object")
            _get(r, "objective", Mapping, rw)
            _get(r, "passed", bool, rw)
            _opt(r, "observed", (int, float), rw)
    scale = _opt(p, "scale_up", Mapping, where)
    if scale is not None:
        for key in ("asked_s", "capacity_s", "before_tok_s", "after_tok_s"):
            _opt(scale, key, (int, float), f"{where}.scale_up")
    for j, fault in enumerate(_opt(p, "faults", list, where) or ()):
        fw = f"{where}.faults[{j}]"
        _expect(isinstance(fault, Mapping), fw, "expected an object")
        _get(fault, "asked", Mapping, fw)
        for key in ("asked_s", "recovery_s", "failed", "before_tok_s", "goodput_dip"):
            _opt(fault, key, (int, float), fw)
    series = _opt(p, "series", Mapping, where)
    for key, values in (series or {}).items():
        _expect(isinstance(values, list), f"{where}.series.{key}", "expected a list")
    samples = p.get("samples")
    if samples is not None:
        sw2 = f"{where}.samples"
        _expect(isinstance(samples, Mapping), sw2, "expected an object or null")
        lengths = set()
        for name, values in samples.items():
            _expect(isinstance(values, list), f"{sw2}.{name}", "expected an array")
            lengths.add(len(values))
            # One pass without per-element calls (a document holds millions of samples);
            # the slow search for the culprit only runs when there is one.
            if not all(v is None or type(v) in _NUMBER_TYPES for v in values):
                bad = next(
                    (
                        (j, v)
                        for j, v in enumerate(values)
                        if not (v is None or _is(v, _NUMBER_TYPES))
                    ),
                    None,
                )  # None: only subclasses of int or float (numpy scalars), which are numbers
                if bad is not None:
                    raise DocumentError(
                        f"expected a number or null, got {bad[1]!r}",
                        field=f"{sw2}.{name}[{bad[0]}]",
                    )
        _expect(len(lengths) <= 1, sw2, "sample arrays differ in length (one value per request)")


def _check_level(lv: Any, where: str) -> None:
    _expect(isinstance(lv, Mapping), where, "expected a load level object")
    _expect(
        lv.get("mode") in _LOAD_MODES,
        f"{where}.mode",
        f"expected one of {_LOAD_MODES}, got {lv.get('mode')!r}",
    )
    value = lv.get("value")
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
    _expect(ok, f"{where}.value", f"expected a number > 0, got {value!r}")
    _expect(
        lv.get("arrival", "closed") in _ARRIVALS,
        f"{where}.arrival",
        f"expected one of {_ARRIVALS}, got {lv.get('arrival')!r}",
    )
    try:
        LoadLevel.from_dict(lv)
    except (TypeError, ValueError, KeyError) as exc:
        _expect(False, where, f"not a load level: {exc}")


def _expect(ok: bool, where: str, message: str) -> None:
    if not ok:
        raise DocumentError(message, field=where or "(document)")


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _type_name(kind: Any) -> str:
    names = {Mapping: "an object", list: "an array", str: "a string", bool: "true/false"}
    names[int] = "an integer"
    if isinstance(kind, tuple):
        return "a number"
    return names.get(kind, getattr(kind, "__name__", str(kind)))


def _is(value: Any, kind: Any) -> bool:
    if isinstance(value, bool) and kind is not bool:
        return False  # JSON true/false is not a count or a number here
    return isinstance(value, kind)


def _get(obj: Mapping[str, Any], key: str, kind: Any, where: str) -> Any:
    path = _join(where, key)
    if key not in obj:
        raise DocumentError("missing", field=path)
    value = obj[key]
    if not _is(value, kind):
        raise DocumentError(f"expected {_type_name(kind)}, got {value!r:.60}", field=path)
    return value


def _opt(obj: Mapping[str, Any], key: str, kind: Any, where: str) -> Any:
    value = obj.get(key)
    if value is not None and not _is(value, kind):
        raise DocumentError(
            f"expected {_type_name(kind)} or null, got {value!r:.60}", field=_join(where, key)
        )
    return value
