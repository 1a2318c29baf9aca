"""The results document's files: round trip, strict JSON, read errors, atomic writes,
version 1 upgrades."""

from __future__ import annotations

import copy
import json
import math
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from document_helpers import CONSTANTS

from pytest_llmslo.document import (
    SCHEMA_VERSION,
    DocumentError,
    Results,
    files,
    jsonable,
    read_document,
    upgrade_document,
    validate_document,
    write_atomic,
)
from pytest_llmslo.sweep import SweepPoint, find_knee


def test_round_trip(tmp_path: Path, doc: dict[str, Any], points: list[SweepPoint]) -> None:
    path = write_atomic(tmp_path / "run.json", doc)
    assert path == tmp_path / "run.json"
    back = read_document(path)
    assert back == json.loads(json.dumps(doc))
    loaded = Results.from_document(back).points
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

    monkeypatch.setattr(files.os, "unlink", spy_unlink)
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

    monkeypatch.setattr(files.os, "replace", interrupted)
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
    assert Results.from_document(back).points[0].interrupted is False
    assert upgrade_document(back) == back
    # A joined model of several engines: each engine's own from its metadata.
    several = copy.deepcopy(old)
    several["constants"]["model"] = "a,b"
    several["constants"]["precision"] = "bf16,fp8"
    up = upgrade_document(several)["constants"]["per_engine"]["vllm"]
    assert (up["model"], up["precision"]) == ("served", "bfloat16")
