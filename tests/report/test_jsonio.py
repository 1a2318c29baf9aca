"""The JSON run document: round trip, validation errors with field paths, atomic writes,
partial documents."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_llmslo import __version__, slo
from pytest_llmslo.errors import ConfigError
from pytest_llmslo.report import jsonio
from pytest_llmslo.report.jsonio import (
    SCHEMA_VERSION,
    DocumentError,
    build_document,
    jsonable,
    load_points,
    read_document,
    validate_document,
    write_atomic,
)
from pytest_llmslo.sweep import SweepPoint, find_knee

CONSTANTS: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "precision": "bf16",
    "hardware": {"gpu": "sim", "count": 1},
    "workload": {"kind": "synthetic", "isl": 512, "osl": 16},
    "slo": [slo.Objective("ttft", 99, "<", 500.0), slo.Objective("itl", 50, "<", 30.0)],
    "warmup": 200,
    "requests": 60,
}


class FakeHandle:
    def metadata(self) -> dict[str, Any]:
        return {"kind": "sim", "runtime": "process", "command": ["python", "-m", "sim"]}

    def version(self) -> str:
        return "sim-1.2"


@pytest.fixture
def points(sweep_factory: Callable[..., list[SweepPoint]]) -> list[SweepPoint]:
    sim = sweep_factory("sim", samples=True)
    vllm = sweep_factory("vllm", levels=(1, 4, 8), ttft=lambda c: 30.0 * c, samples=True)
    return sim + vllm


@pytest.fixture
def doc(points: list[SweepPoint]) -> dict[str, Any]:
    return build_document(CONSTANTS, {"sim": FakeHandle(), "vllm": {"version": "0.11.0"}}, points)


def test_document_contents(doc: dict[str, Any], points: list[SweepPoint]) -> None:
    validate_document(doc)
    assert doc["schema"] == "pytest-llmslo/run"
    assert doc["schema_version"] == SCHEMA_VERSION
    assert doc["harness"] == {"name": "pytest-llmslo", "version": __version__}
    assert doc["complete"] is True
    assert doc["created_utc"].endswith("Z")
    c = doc["constants"]
    assert c["model"] == "llama-3.1-8b" and c["precision"] == "bf16"
    assert c["workload"]["isl"] == 512
    assert c["slo"][0]["label"] == "ttft_p99 < 500 ms"
    assert doc["engines"]["sim"] == {
        "version": "sim-1.2",
        "metadata": {"kind": "sim", "runtime": "process", "command": ["python", "-m", "sim"]},
    }
    assert doc["engines"]["vllm"]["version"] == "0.11.0"
    assert len(doc["points"]) == len(points)
    first = doc["points"][0]
    assert first["engine"] == "sim" and first["level"]["value"] == 1.0
    assert first["summary"]["requests"] == 60
    assert first["verdict"]["passed"] is True
    sweeps = {(s["engine"], s["test"]): s for s in doc["sweeps"]}
    assert sweeps[("sim", "test_chat")]["levels"] == ["c1", "c4", "c8", "c16", "c32"]
    sim = sweeps[("sim", "test_chat")]
    assert sim["knee"]["level"]["value"] == 8.0
    assert sim["points"] == [0, 1, 2, 3, 4] and sweeps[("vllm", "test_chat")]["points"] == [5, 6, 7]
    assert doc["points"][sim["points"][sim["knee"]["index"]]]["level"]["value"] == 8.0
    assert sweeps[("vllm", "test_chat")]["knee"]["status"] == "all_passed"
    knees = {r["engine"]: r for r in doc["results_at_knee"]}
    assert knees["sim"]["label"] == "c8"
    assert doc["points"][knees["sim"]["point"]]["level"]["value"] == 8.0
    assert knees["sim"]["goodput_tok_s"] == pytest.approx(find_knee(points[:5]).goodput_tok_s)
    assert knees["sim"]["ttft_p99_ms"] < 500
    assert knees["vllm"]["label"] == "c8"


def test_samples_are_compact_and_aligned(point_factory: Callable[..., SweepPoint]) -> None:
    point = point_factory(1, ttft_ms=50.0, failed=2, samples=True)
    samples = build_document(CONSTANTS, {}, [point])["points"][0]["samples"]
    assert set(samples) >= {"ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "ok", "output_tokens"}
    assert all(len(v) == 60 for v in samples.values())
    # The two failed requests: no latency, not ok.
    assert samples["ttft_ms"][:2] == [None, None] and samples["ok"][:3] == [0, 0, 1]
    for value in samples["ttft_ms"][2:] + samples["e2e_ms"][2:]:
        assert value == round(value, 3)  # rounded to µs


def test_round_trip(tmp_path: Path, doc: dict[str, Any], points: list[SweepPoint]) -> None:
    path = write_atomic(tmp_path / "run.json", doc)
    assert path == tmp_path / "run.json"
    back = read_document(path)
    assert back == json.loads(json.dumps(doc))
    loaded = load_points(back)
    assert [p.to_dict() for p in loaded] == [jsonable(p.to_dict()) for p in points]
    assert loaded[0].verdict is not None and loaded[0].verdict.passed
    # Knees recomputed from the loaded points match the document's.
    assert find_knee(loaded[:5]).to_dict() == back["sweeps"][0]["knee"]


def test_file_is_strict_json_with_one_line_per_point(tmp_path: Path, doc: dict[str, Any]) -> None:
    doc = copy.deepcopy(doc)
    doc["constants"]["note"] = "ünïcode"
    path = write_atomic(tmp_path / "run.json", doc)
    text = path.read_text(encoding="utf-8")
    assert "NaN" not in text and "Infinity" not in text
    assert "ünïcode" in text
    point_lines = [line for line in text.splitlines() if line.startswith('    {"engine"')]
    assert len(point_lines) == len(doc["points"])
    assert json.loads(text) == doc
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_nan_and_numpy_become_plain_json() -> None:
    value = {
        "a": math.nan,
        "b": (1, math.inf),
        "c": np.float64(2.5),
        "d": np.arange(3),
        "e": Path("/x"),
        99.0: "k",
    }
    assert jsonable(value) == {
        "a": None,
        "b": [1, None],
        "c": 2.5,
        "d": [0, 1, 2],
        "e": "/x",
        "99.0": "k",
    }


def test_engine_without_metadata_gets_an_entry(points: list[SweepPoint]) -> None:
    doc = build_document({}, {}, points)
    assert doc["engines"]["vllm"] == {"version": None, "metadata": {}}
    validate_document(doc)


def test_empty_document_is_valid() -> None:
    doc = build_document({}, {}, [])
    validate_document(doc)
    assert doc["points"] == [] and doc["sweeps"] == [] and doc["results_at_knee"] == []


# --------------------------------------------------------------------------- validation


def _mutations() -> list[tuple[str, Callable[[dict[str, Any]], None], str, str]]:
    def setp(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
        def apply(doc: dict[str, Any]) -> None:
            obj: Any = doc
            keys = path.split(".")
            for k in keys[:-1]:
                obj = obj[int(k)] if isinstance(obj, list) else obj[k]
            last = keys[-1]
            if value is KeyError:
                del obj[last]
            elif isinstance(obj, list):
                obj[int(last)] = value
            else:
                obj[last] = value

        return apply

    return [
        ("schema", setp("schema", "other/thing"), "schema", "not a pytest-llmslo run document"),
        (
            "newer",
            setp("schema_version", SCHEMA_VERSION + 1),
            "schema_version",
            "upgrade pytest-llmslo",
        ),
        ("older", setp("schema_version", 0), "schema_version", "no migration"),
        ("version type", setp("schema_version", "1"), "schema_version", "integer"),
        ("no harness", setp("harness", KeyError), "harness", "missing"),
        ("complete", setp("complete", "yes"), "complete", "true/false"),
        ("mode", setp("points.3.level.mode", "tokens"), "points[3].level.mode", "one of"),
        ("value", setp("points.0.level.value", 0), "points[0].level.value", "> 0"),
        ("requests", setp("points.1.summary.requests", -1), "points[1].summary.requests", ">= 0"),
        (
            "count type",
            setp("points.1.summary.failed", True),
            "points[1].summary.failed",
            "integer",
        ),
        ("engine", setp("points.2.engine", "sglang"), "points[2].engine", "not in engines"),
        (
            "thr",
            setp("points.0.summary.output_tok_s", "fast"),
            "points[0].summary.output_tok_s",
            "number",
        ),
        (
            "dist",
            setp("points.0.summary.distributions.ttft.count", None),
            "points[0].summary.distributions.ttft.count",
            "integer",
        ),
        ("verdict", setp("points.0.verdict.passed", 1), "points[0].verdict.passed", "true/false"),
        (
            "result",
            setp("points.0.verdict.results.1.objective", "ttft"),
            "points[0].verdict.results[1].objective",
            "object",
        ),
        (
            "sample",
            setp("points.4.samples.ttft_ms.7", "x"),
            "points[4].samples.ttft_ms[7]",
            "number or null",
        ),
        ("sample len", setp("points.4.samples.ok", [1]), "points[4].samples", "differ in length"),
        ("sweep", setp("sweeps.0.knee.status", "great"), "sweeps[0].knee.status", "one of"),
        ("knee lv", setp("sweeps.0.knee.level.value", -1), "sweeps[0].knee.level.value", "> 0"),
        (
            "knee idx",
            setp("results_at_knee.0.point", 99),
            "results_at_knee[0].point",
            "no point 99",
        ),
        ("members", setp("sweeps.1.points.0", 8), "sweeps[1].points[0]", "index into points"),
        ("knee pos", setp("sweeps.0.knee.index", 5), "sweeps[0].knee.index", "in the sweep"),
        ("engines", setp("engines.sim.metadata", []), "engines.sim.metadata", "object"),
    ]


@pytest.mark.parametrize(
    ("case", "mutate", "field", "message"),
    [pytest.param(*m, id=m[0]) for m in _mutations()],
)
def test_validation_errors_name_the_field(
    doc: dict[str, Any],
    case: str,
    mutate: Callable[[dict[str, Any]], None],
    field: str,
    message: str,
) -> None:
    bad = copy.deepcopy(doc)
    mutate(bad)
    with pytest.raises(DocumentError) as info:
        validate_document(bad)
    assert info.value.field == field, case
    assert message in str(info.value)
    assert str(info.value).startswith(field)


def test_validation_of_non_objects() -> None:
    with pytest.raises(DocumentError, match="JSON object"):
        validate_document([1, 2])


def test_document_error_is_a_config_error() -> None:
    assert issubclass(DocumentError, ConfigError)


def test_read_document_errors(tmp_path: Path, doc: dict[str, Any]) -> None:
    with pytest.raises(DocumentError, match="no such file"):
        read_document(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema": "pytest-llmslo/run", "points": [', encoding="utf-8")
    with pytest.raises(DocumentError, match=r"not valid JSON \(line 1, column"):
        read_document(broken)
    newer = copy.deepcopy(doc)
    newer["schema_version"] = SCHEMA_VERSION + 1
    path = tmp_path / "newer.json"
    path.write_text(json.dumps(newer), encoding="utf-8")
    with pytest.raises(DocumentError) as info:
        read_document(path)
    expected = f"{path}: schema_version: written with schema version {SCHEMA_VERSION + 1}"
    assert str(info.value).startswith(expected)
    assert info.value.source == str(path) and info.value.field == "schema_version"


# --------------------------------------------------------------------------- atomic writes


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_failure_mid_write_leaves_the_previous_file(
    tmp_path: Path, doc: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_atomic(tmp_path / "run.json", doc)
    before = path.read_bytes()
    bad = copy.deepcopy(doc)
    bad["points"][3]["summary"]["unserialisable"] = object()  # json.dumps raises here
    removed: list[int] = []
    real_unlink = os.unlink

    def spy_unlink(name: str) -> None:
        removed.append(Path(name).stat().st_size)
        real_unlink(name)

    monkeypatch.setattr(jsonio.os, "unlink", spy_unlink)
    with pytest.raises(TypeError):
        write_atomic(path, bad, validate=False)
    # The writer got part of the way (header and three points) before it raised ...
    assert len(removed) == 1 and 0 < removed[0] < len(before)
    # ... and the target still holds the previous document, with no temporary file left.
    assert path.read_bytes() == before
    assert _leftovers(tmp_path) == []


def test_failure_mid_write_without_a_previous_file(tmp_path: Path, doc: dict[str, Any]) -> None:
    bad = copy.deepcopy(doc)
    bad["points"][2]["summary"]["x"] = math.nan  # strict JSON: refused
    with pytest.raises(ValueError):
        write_atomic(tmp_path / "run.json", bad, validate=False)
    assert list(tmp_path.iterdir()) == []


def test_interrupt_before_rename_keeps_the_old_file(
    tmp_path: Path, doc: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "run.json"
    path.write_text("previous", encoding="utf-8")

    def interrupted(*_: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(jsonio.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(path, doc)
    assert path.read_text(encoding="utf-8") == "previous"
    assert _leftovers(tmp_path) == []


def test_invalid_document_is_not_written(tmp_path: Path, doc: dict[str, Any]) -> None:
    bad = copy.deepcopy(doc)
    bad["schema_version"] = 99
    with pytest.raises(DocumentError):
        write_atomic(tmp_path / "run.json", bad)
    assert list(tmp_path.iterdir()) == []


def test_write_creates_the_directory_and_keeps_the_mode(
    tmp_path: Path, doc: dict[str, Any]
) -> None:
    path = tmp_path / "a" / "b" / "run.json"
    write_atomic(path, doc)
    os.chmod(path, 0o600)
    write_atomic(path, doc)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_engine_handle_that_cannot_answer(points: list[SweepPoint]) -> None:
    class Stopped:
        def metadata(self) -> dict[str, Any]:
            raise ConnectionError("engine stopped")

        def version(self) -> str:
            raise ConnectionError("engine stopped")

    doc = build_document({}, {"sim": Stopped()}, points[:1])
    assert doc["engines"]["sim"]["version"] is None
    assert "engine stopped" in doc["engines"]["sim"]["metadata"]["error"]
    validate_document(doc)


def test_samples_check_accepts_numpy_numbers_and_rejects_booleans(doc: dict[str, Any]) -> None:
    ok = copy.deepcopy(doc)
    ok["points"][0]["samples"]["ttft_ms"][5] = np.float64(1.5)
    validate_document(ok)
    bad = copy.deepcopy(doc)
    bad["points"][0]["samples"]["e2e_ms"][9] = True
    with pytest.raises(DocumentError) as info:
        validate_document(bad)
    assert info.value.field == "points[0].samples.e2e_ms[9]"
    assert type(jsonable(np.float64(2.0))) is float


# --------------------------------------------------------------------------- capacity, interrupt


def _capacity_result() -> Any:
    from pytest_llmslo.records import LoadLevel
    from pytest_llmslo.capacity import CapacitySearch, CapacitySpec

    search = CapacitySearch(CapacitySpec("concurrency", max_probes=12))
    while (level := search.next_level()) is not None:
        search.record(level, level.value <= 6)
    assert search.result.capacity == LoadLevel.concurrency(6)
    return search.result


def test_capacity_is_stored_on_its_sweep(tmp_path: Path, points: list[SweepPoint]) -> None:
    from pytest_llmslo.capacity import CapacityResult

    result = _capacity_result()
    doc = build_document(
        CONSTANTS, {"sim": FakeHandle()}, points, capacities={("sim", "test_chat"): result}
    )
    validate_document(doc)
    sweeps = {(s["engine"], s["test"]): s for s in doc["sweeps"]}
    cap = sweeps[("sim", "test_chat")]["capacity"]
    assert cap["capacity"] == {"mode": "concurrency", "value": 6.0, "arrival": "closed", "seed": 0}
    assert (cap["lower"], cap["upper"]) == (6.0, 7.0)
    assert cap["reason"] == "bracketed to the resolution"
    assert [h["passed"] for h in cap["history"]] == [True, True, True, False, True, False]
    assert sweeps[("vllm", "test_chat")]["capacity"] is None
    back = read_document(write_atomic(tmp_path / "run.json", doc))
    again = CapacityResult.from_dict(back["sweeps"][0]["capacity"])
    assert again == result
    assert again.describe() == "capacity: c6 (c7 failed), 6 levels: bracketed to the resolution"
    assert again.probes_text() == "c1 pass, c2 pass, c4 pass, c8 FAIL, c6 pass, c7 FAIL"
    # A capacity of another load mode belongs to no sweep of this one.
    rate = {**result.to_dict(), "mode": "rate"}
    other = build_document(CONSTANTS, {}, points, capacities={("sim", "test_chat"): rate})
    assert other["sweeps"][0]["capacity"] is None


def test_capacity_and_interrupted_are_validated(doc: dict[str, Any]) -> None:
    bad = copy.deepcopy(doc)
    bad["points"][0]["interrupted"] = "yes"
    with pytest.raises(DocumentError) as info:
        validate_document(bad)
    assert info.value.field == "points[0].interrupted"
    bad = copy.deepcopy(doc)
    bad["sweeps"][0]["capacity"] = {**_capacity_result().to_dict(), "probes": "six"}
    with pytest.raises(DocumentError) as info:
        validate_document(bad)
    assert info.value.field == "sweeps[0].capacity.probes"


def test_interrupted_point_round_trips(points: list[SweepPoint]) -> None:
    cut = dataclasses.replace(points[0], interrupted=True)
    doc = build_document(CONSTANTS, {}, [cut, *points[1:]], complete=False)
    assert doc["points"][0]["interrupted"] is True and doc["points"][1]["interrupted"] is False
    loaded = load_points(doc)
    assert loaded[0].interrupted and not loaded[1].interrupted


def _version_1(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` as schema version 1 wrote it: session-wide hardware of the client machine,
    no per-engine constants, no capacity, no interrupted flag."""
    old = copy.deepcopy(doc)
    old["schema_version"] = 1
    old["constants"] = {
        **CONSTANTS,
        "slo": [o.to_dict() for o in CONSTANTS["slo"]],
        "hardware": {"machine": "x86_64", "cpus": 8, "python": "3.11.9", "sim_profile": "p1"},
    }
    for p in old["points"]:
        del p["interrupted"]
    for s in old["sweeps"]:
        del s["capacity"]
    old["engines"]["vllm"]["metadata"] = {
        "kind": "vllm",
        "model": "served",
        "dtype": "bfloat16",
        "gpus": "1",
        "hardware": {"gpus": ["NVIDIA H100 80GB HBM3, 81559 MiB, 550.1", "NVIDIA L4, 1 MiB, 5"]},
    }
    return old


def test_version_1_documents_are_read_and_upgraded(tmp_path: Path, doc: dict[str, Any]) -> None:
    old = _version_1(doc)
    validate_document(old)
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(old), encoding="utf-8")
    back = read_document(path)
    assert back["schema_version"] == SCHEMA_VERSION and back["upgraded_from"] == 1
    per_engine = back["constants"]["per_engine"]
    assert per_engine["sim"] == {
        "model": "llama-3.1-8b",
        "precision": "bf16",
        "hardware": {"sim_profile": "p1"},
    }
    assert per_engine["vllm"]["hardware"] == {"gpus": ["NVIDIA H100 80GB HBM3, 81559 MiB"]}
    assert load_points(back)[0].interrupted is False
    assert jsonio.upgrade_document(back) == back
    # A joined model of several engines: each engine's own from its metadata.
    several = copy.deepcopy(old)
    several["constants"]["model"] = "a,b"
    several["constants"]["precision"] = "bf16,fp8"
    up = jsonio.upgrade_document(several)["constants"]["per_engine"]["vllm"]
    assert (up["model"], up["precision"]) == ("served", "bfloat16")
