"""The reproducible JSON document of a session (DESIGN "Reports"), versioned.

Layout (``SCHEMA_VERSION`` 2)::

    {
      "schema": "pytest-llmslo/run", "schema_version": 2,
      "harness": {"name": "pytest-llmslo", "version": "0.1.0"},
      "created_utc": "2026-12-02T14:00:00Z",
      "complete": true,              # false: partial results (interrupted session)
      "constants": {...},            # model, precision, hardware, workload, slo, warmup, ...
      "engines": {NAME: {"version": "...", "metadata": {...}}},
      "points": [                    # every measured level, one SweepPoint.to_dict() each
        {"engine", "test", "level", "summary", "verdict", "samples", "interrupted",
         "cache"}, ...],            # cache: was the prefix cache emptied before the level
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
records), so a later comparison can run rank tests without the raw records.

Version 1 documents are still read: ``read_document`` upgrades them (``upgrade_document``),
deriving each engine's constants from its recorded metadata.

Writing is atomic (``write_atomic``: a temporary file in the same directory, fsync,
``os.replace``), so an interrupted session leaves either the previous document or the new
one, never half a file. NaN and infinities become ``null``: the file is strict JSON that
any parser reads.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_llmslo._version import __version__
from pytest_llmslo.catalog import METRICS
from pytest_llmslo.errors import ConfigError
from pytest_llmslo.records import ARRIVALS, LoadLevel
from pytest_llmslo.sweep import (
    Knee,
    SweepPoint,
    point_at,
    point_attainment,
    point_goodput,
    summary_stat,
    sweep_knees,
)

if TYPE_CHECKING:
    from pytest_llmslo.records import Run

__all__ = [
    "HARNESS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "DocumentError",
    "build_document",
    "compact_samples",
    "jsonable",
    "load_points",
    "read_document",
    "upgrade_document",
    "validate_document",
    "write_atomic",
    "write_atomic_text",
]

SCHEMA = "pytest-llmslo/run"
SCHEMA_VERSION = 2
#: The oldest schema version ``read_document`` reads (and upgrades).
OLDEST_READABLE = 1
HARNESS = "pytest-llmslo"

#: Per-request metrics carried as samples (ms), in this order.
SAMPLE_METRICS: tuple[str, ...] = METRICS

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


# --------------------------------------------------------------------------- building


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data: mappings with str keys, lists, finite floats (NaN and
    infinities become None), objects with ``to_dict()`` or dataclasses expanded, numpy
    scalars and arrays converted, paths as strings; anything else becomes ``str()``."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):  # also numpy float64, made a plain float here
        return float(value) if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict) and not isinstance(value, type):
        return jsonable(to_dict())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    tolist = getattr(value, "tolist", None)  # numpy arrays and scalars
    if callable(tolist):
        return jsonable(tolist())
    return str(value)


def compact_samples(run: Run, *, digits: int = 3) -> dict[str, list[float | None]]:
    """Per-request values of ``run`` for the document: ``<metric>_ms`` for ttft, ttfot,
    itl (the request's own gap statistic), tpot and e2e, rounded to ``digits`` decimals
    (µs), None where undefined (failed request, single-token output); plus ``ok`` (1/0) and
    ``output_tokens``. Aligned with ``run.records``."""
    import numpy as np  # only needed when samples are wanted

    from pytest_llmslo import metrics

    per = metrics.per_request(run)
    out: dict[str, list[Any]] = {}
    for name in SAMPLE_METRICS:
        values = per.get(name)
        if values is None:
            continue
        rounded = np.round(np.asarray(values, dtype=np.float64), digits)
        out[f"{name}_ms"] = [v if math.isfinite(v) else None for v in rounded.tolist()]
    out["ok"] = [1 if r.ok else 0 for r in run.records]
    out["output_tokens"] = [r.output_tokens for r in run.records]
    return out


def _engine_entry(value: Any) -> dict[str, Any]:
    """An EngineHandle (``metadata()``/``version()``) or a mapping of its metadata, as
    ``{"version", "metadata"}``. A handle that cannot answer (its engine already stopped)
    costs the report its metadata, never the document."""
    meta_fn = getattr(value, "metadata", None)
    if callable(meta_fn):
        try:
            metadata = dict(meta_fn())
        except Exception as exc:
            metadata = {"error": f"metadata unavailable: {exc!r}"}
        version_fn = getattr(value, "version", None)
        try:
            version = version_fn() if callable(version_fn) else metadata.get("version")
        except Exception:
            version = metadata.get("version")
    else:
        metadata = dict(value or {})
        version = metadata.get("version")
    return {"version": None if version is None else str(version), "metadata": jsonable(metadata)}


def _knee_result(point: SweepPoint, index: int, knee: Knee) -> dict[str, Any]:
    s = point.summary
    return {
        "engine": point.engine,
        "test": point.test,
        "level": point.level.to_dict(),
        "label": point.level.label,
        "point": index,
        "status": knee.status,
        "goodput_tok_s": point_goodput(point),
        "output_tok_s": s.output_tok_s,
        "attainment": point_attainment(point),
        "ttft_p50_ms": summary_stat(s, "ttft", 50),
        "ttft_p99_ms": summary_stat(s, "ttft", 99),
        "itl_p50_ms": summary_stat(s, "itl", 50),
        "tpot_p50_ms": summary_stat(s, "tpot", 50),
        "e2e_p99_ms": summary_stat(s, "e2e", 99),
        "saturation_level": None
        if knee.saturation_level is None
        else knee.saturation_level.to_dict(),
    }


def _level_result(p: SweepPoint) -> dict[str, Any]:
    s = p.summary
    attainment = point_attainment(p)
    return {
        p.level.mode: p.level.value,
        "ttft_p50_ms": summary_stat(s, "ttft", 50),
        "ttft_p99_ms": summary_stat(s, "ttft", 99),
        "itl_p50_ms": summary_stat(s, "itl", 50),
        "output_tok_s": s.output_tok_s,
        "goodput_tok_s": point_goodput(p),
        "goodput_pct": None if attainment is None else 100.0 * attainment,
        "error_rate": s.error_rate,
        "outcome": p.outcome,
    }


def _asserted_slo(sweep: Sequence[SweepPoint]) -> list[str]:
    """The objectives a test asserted in its body (no marker objectives), from a verdict."""
    for p in sweep:
        if p.verdict is not None and p.verdict.results:
            return [r.objective.label for r in p.verdict.results]
    return []


def _engine_report(
    constants: Mapping[str, Any],
    engines: Mapping[str, Mapping[str, Any]],
    engine: str,
    test: str,
    sweep: Sequence[SweepPoint],
    at_knee: SweepPoint | None,
) -> dict[str, Any]:
    """One engine's sweep of one test as a self-contained record: the harness, what was
    served on what (for the sim engine, the setup it simulates), the dataset and SLO, every
    level and the results at the knee (see the module docstring)."""
    entry = engines.get(engine) or {}
    meta = entry.get("metadata") or {}
    own = (constants.get("per_engine") or {}).get(engine) or {}
    test_consts = (constants.get("tests") or {}).get(test) or {}
    simulated = meta.get("simulated") if isinstance(meta.get("simulated"), Mapping) else None
    hardware: Any = own.get("hardware", constants.get("hardware"))
    if simulated and simulated.get("hardware"):
        hardware = {"simulated": simulated["hardware"], **(hardware or {})}
    workload = test_consts.get("workload", constants.get("workload"))
    return {
        "harness": {"name": HARNESS, "version": __version__},
        "engine": {"name": engine, "kind": meta.get("kind"), "version": entry.get("version")},
        "model": own.get("model", constants.get("model")),
        "precision": own.get("precision") or (simulated or {}).get("precision"),
        "hardware": hardware,
        "simulated": simulated,
        "dataset": {
            "path": test_consts.get("dataset", constants.get("dataset")),
            "workload": workload,
        },
        "slo": test_consts.get("slo") or _asserted_slo(sweep) or constants.get("slo"),
        "test": test,
        "mode": sweep[0].level.mode if sweep else None,
        "sweep": [_level_result(p) for p in sweep],
        "results_at_knee": None if at_knee is None else _level_result(at_knee),
    }


def build_document(
    constants: Mapping[str, Any],
    engines: Mapping[str, Any],
    points: Sequence[SweepPoint],
    knees: Mapping[Any, Knee] | None = None,
    *,
    complete: bool = True,
    created_utc: str | None = None,
    capacities: Mapping[tuple[str, str], Any] | None = None,
) -> dict[str, Any]:
    """The run document (see the module docstring). ``engines`` maps engine name to an
    ``EngineHandle`` or its metadata mapping (``version`` inside); an engine that has points
    but no entry gets an empty one. ``knees`` is keyed by ``(engine, test)`` or engine name;
    missing knees are computed with ``find_knee``. ``complete=False`` marks partial results.
    ``capacities`` maps ``(engine, test)`` to the ``CapacityResult`` (or its dict) of the
    capacity search that test ran; it goes on the sweep of the same load mode.
    """
    points = list(points)
    return _assemble(
        constants,
        {str(name): _engine_entry(v) for name, v in engines.items()},
        points,
        [jsonable(p.to_dict()) for p in points],
        knees,
        complete=complete,
        created_utc=created_utc,
        capacities=capacities,
    )


def _capacity_entry(
    capacities: Mapping[tuple[str, str], Any] | None, key: tuple[str, str], mode: str
) -> Any:
    if not capacities or key not in capacities:
        return None
    entry = jsonable(capacities[key])
    return entry if isinstance(entry, Mapping) and entry.get("mode") == mode else None


def _assemble(
    constants: Mapping[str, Any],
    engine_entries: Mapping[str, dict[str, Any]],
    points: Sequence[SweepPoint],
    point_dicts: Sequence[Any],
    knees: Mapping[Any, Knee] | None,
    *,
    complete: bool,
    created_utc: str | None,
    capacities: Mapping[tuple[str, str], Any] | None = None,
) -> dict[str, Any]:
    engine_map = dict(engine_entries)
    for p in points:
        engine_map.setdefault(p.engine, {"version": None, "metadata": {}})
    position = {id(p): i for i, p in enumerate(points)}
    sweeps: list[dict[str, Any]] = []
    at_knee: list[dict[str, Any]] = []
    reports: list[dict[str, Any]] = []
    for (engine, test), sweep, knee in sweep_knees(points, knees):
        levels = sorted({p.level.value: p.level for p in sweep}.values(), key=lambda lv: lv.value)
        sweeps.append(
            {
                "engine": engine,
                "test": test,
                "mode": sweep[0].level.mode,
                "levels": [lv.label for lv in levels],
                "points": [position[id(p)] for p in sweep],
                "knee": jsonable(knee.to_dict()),
                "capacity": _capacity_entry(capacities, (engine, test), sweep[0].level.mode),
            }
        )
        at = point_at(sweep, knee.level)
        if at is not None:
            at_knee.append(jsonable(_knee_result(at, position[id(at)], knee)))
        reports.append(jsonable(_engine_report(constants, engine_map, engine, test, sweep, at)))
    if created_utc is None:
        now = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0)
        created_utc = now.isoformat().replace("+00:00", "Z")
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "harness": {"name": HARNESS, "version": __version__},
        "created_utc": created_utc,
        "complete": bool(complete),
        "constants": jsonable(dict(constants)),
        "engines": engine_map,
        "points": list(point_dicts),
        "sweeps": sweeps,
        "results_at_knee": at_knee,
        "reports": reports,
    }


def load_points(doc: Mapping[str, Any]) -> list[SweepPoint]:
    """The document's points as ``SweepPoint`` objects (needs metrics and slo)."""
    return [SweepPoint.from_dict(p) for p in doc.get("points", ())]


# --------------------------------------------------------------------------- writing


def write_atomic(
    path: str | os.PathLike[str], doc: Mapping[str, Any], *, validate: bool = True
) -> Path:
    """Write ``doc`` to ``path`` atomically and durably; return the path.

    The document goes to a temporary file in the same directory (same filesystem, so the
    rename is atomic), is fsync'ed, then renamed over ``path`` and the directory fsync'ed.
    If anything fails on the way the temporary file is removed and ``path`` keeps its
    previous content. The header is indented for reading; each point is one compact line.
    """
    if validate:
        validate_document(doc)
    return _write_durably(path, lambda f: _dump(doc, f))


def write_atomic_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` as ``write_atomic`` writes a document (Markdown and SVG
    reports: a reader never sees half a file)."""
    return _write_durably(path, lambda f: f.write(text))


def _write_durably(path: str | os.PathLike[str], write: Any) -> Path:
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    directory.mkdir(parents=True, exist_ok=True)
    mode = target.stat().st_mode & 0o777 if target.exists() else 0o644
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(directory)
    return target


def _dump(doc: Mapping[str, Any], f: Any) -> None:
    def enc(v: Any, indent: int | None = None) -> str:
        return json.dumps(v, ensure_ascii=False, allow_nan=False, indent=indent)

    f.write("{\n")
    keys = list(doc)
    for n, key in enumerate(keys):
        value = doc[key]
        f.write(f"  {enc(key)}: ")
        if key == "points" and isinstance(value, list):
            f.write("[" if value else "[]")
            for i, point in enumerate(value):
                f.write("\n    " + enc(point) + ("," if i < len(value) - 1 else "\n  ]"))
        else:
            f.write(enc(value, 2).replace("\n", "\n  "))
        f.write(",\n" if n < len(keys) - 1 else "\n")
    f.write("}\n")


def _fsync_dir(directory: Path) -> None:
    # Makes the rename itself durable; not every platform can open a directory.
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


# --------------------------------------------------------------------------- reading


def read_document(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate a run document, upgraded to the current schema version
    (``upgrade_document``). Raises ``DocumentError`` (a ``ConfigError``) for a missing file,
    malformed JSON, a document of another kind, a schema version this pytest-llmslo cannot
    read, or a malformed field (the message names its path)."""
    source = os.fspath(path)
    try:
        text = Path(source).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DocumentError("no such file", source=source) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DocumentError(f"cannot read the file: {exc}", source=source) from exc
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DocumentError(
            f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
            "an interrupted writer never leaves such a file, so it was written or cut elsewhere",
            source=source,
        ) from exc
    try:
        validate_document(doc)
    except DocumentError as exc:
        raise DocumentError(_strip(exc), field=exc.field, source=source) from None
    checked: dict[str, Any] = doc  # a JSON object, as validate_document just checked
    return upgrade_document(checked)


def upgrade_document(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A valid run document at the current schema version: a current one as it is (a
    copy of its top level), an older one upgraded.

    Version 1 recorded ``model``, ``precision`` and ``hardware`` once for the whole
    session (the last being the client's machine). The upgrade adds ``constants.per_engine``
    with each engine's own constants, derived from what the document recorded
    (``constants.engine_constants``): the session's model or precision where there was one,
    else the engine's metadata; the engine's GPUs from its metadata, or the sim engine's
    profile. Points and sweeps need no change: their new fields are optional."""
    out = dict(doc)
    version = out.get("schema_version")
    if version == SCHEMA_VERSION:
        return out
    if version == 1:
        from pytest_llmslo.constants import engine_constants

        constants = dict(out.get("constants") or {})
        if "per_engine" not in constants:
            model = constants.get("model")
            precision = constants.get("precision")
            hardware = constants.get("hardware")
            profile = hardware.get("sim_profile") if isinstance(hardware, Mapping) else None
            # A joined value ("a,b") named several engines' models: each engine's own
            # comes from its metadata instead.
            one_model = model if isinstance(model, str) and "," not in model else None
            one_precision = (
                precision if isinstance(precision, str) and "," not in precision else None
            )
            per_engine: dict[str, Any] = {}
            for name, entry in (out.get("engines") or {}).items():
                metadata = (entry or {}).get("metadata") or {}
                per_engine[str(name)] = engine_constants(
                    metadata,
                    model=one_model,
                    precision=one_precision,
                    sim_profile=profile if isinstance(profile, str) else None,
                )
            constants["per_engine"] = per_engine
            out["constants"] = constants
        out["schema_version"] = SCHEMA_VERSION
        out["upgraded_from"] = version
    return out


def _strip(exc: DocumentError) -> str:
    text = str(exc)
    prefix = f"{exc.field}: " if exc.field else ""
    return text[len(prefix) :] if prefix and text.startswith(prefix) else text


def validate_document(doc: Any) -> None:
    """Structural checks of a run document; raises ``DocumentError`` naming the first bad
    field's path. Checks kinds and required keys, not every number's plausibility."""
    _expect(isinstance(doc, Mapping), "", "a run document is a JSON object")
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
    harness = _get(doc, "harness", Mapping, "")
    _get(harness, "name", str, "harness")
    _get(harness, "version", str, "harness")
    _get(doc, "complete", bool, "")
    _get(doc, "constants", Mapping, "")
    engines = _get(doc, "engines", Mapping, "")
    for name, entry in engines.items():
        where = f"engines.{name}"
        _expect(isinstance(entry, Mapping), where, "expected an object")
        _opt(entry, "version", str, where)
        _get(entry, "metadata", Mapping, where)
    points = _get(doc, "points", list, "")
    for i, p in enumerate(points):
        _check_point(p, f"points[{i}]", engines)
    for i, s in enumerate(_get(doc, "sweeps", list, "")):
        where = f"sweeps[{i}]"
        _expect(isinstance(s, Mapping), where, "expected an object")
        _get(s, "engine", str, where)
        _get(s, "test", str, where)
        _expect(s.get("mode") in _LOAD_MODES, f"{where}.mode", f"expected one of {_LOAD_MODES}")
        levels = _get(s, "levels", list, where)
        for j, lv in enumerate(levels):
            _expect(isinstance(lv, str), f"{where}.levels[{j}]", "expected a level label")
        members = _get(s, "points", list, where)
        for j, idx in enumerate(members):
            ok = _is(idx, int) and 0 <= idx < len(points)
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
    for i, r in enumerate(_get(doc, "results_at_knee", list, "")):
        where = f"results_at_knee[{i}]"
        _expect(isinstance(r, Mapping), where, "expected an object")
        _get(r, "engine", str, where)
        _get(r, "test", str, where)
        _check_level(r.get("level"), f"{where}.level")
        idx = _get(r, "point", int, where)
        _expect(0 <= idx < len(points), f"{where}.point", f"no point {idx} in points")
        for key in ("goodput_tok_s", "output_tok_s", "ttft_p99_ms"):
            _opt(r, key, (int, float), where)
    # Documents written before ``reports`` existed have none: it is derived, not required.
    for i, rep in enumerate(_opt(doc, "reports", list, "") or []):
        where = f"reports[{i}]"
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
