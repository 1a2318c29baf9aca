"""The results document built from a session's results: its contents, samples, engines,
capacities and partial points."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from document_helpers import CONSTANTS, FakeHandle, capacity_result, document_of

from pytest_llmslo import __version__
from pytest_llmslo.capacity import CapacityResult
from pytest_llmslo.document import (
    SCHEMA_VERSION,
    Results,
    jsonable,
    read_document,
    validate_document,
    write_atomic,
)
from pytest_llmslo.sweep import SweepPoint, find_knee


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
    samples = document_of([point], CONSTANTS)["points"][0]["samples"]
    assert set(samples) >= {"ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "ok", "output_tokens"}
    assert all(len(v) == 60 for v in samples.values())
    # The two failed requests: no latency, not ok.
    assert samples["ttft_ms"][:2] == [None, None] and samples["ok"][:3] == [0, 0, 1]
    for value in samples["ttft_ms"][2:] + samples["e2e_ms"][2:]:
        assert value == round(value, 3)  # rounded to µs
    # When each request was sent, answered and ended: s from the window's start, in ms.
    sent, first, end = samples["sent_s"], samples["first_token_s"], samples["end_s"]
    assert first[:2] == [None, None] and None not in sent + end + first[2:]
    for s, f, e in zip(sent[2:], first[2:], end[2:], strict=True):
        assert 0.0 <= s <= f <= e and e == round(e, 3)


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


def test_a_value_with_to_dict_is_expanded_and_a_class_is_not() -> None:
    from pytest_llmslo.document.jsonable import SupportsToDict

    @dataclasses.dataclass
    class Said:
        x: float

        def to_dict(self) -> dict[str, Any]:
            return {"said": self.x, "nan": math.nan}

    assert isinstance(Said(1.0), SupportsToDict)
    # Its to_dict wins over its fields; the class itself is not a value to expand.
    assert jsonable({"v": Said(1.0), "t": Said}) == {
        "v": {"said": 1.0, "nan": None},
        "t": str(Said),
    }


def test_engine_without_metadata_gets_an_entry(points: list[SweepPoint]) -> None:
    doc = document_of(points)
    assert doc["engines"]["vllm"] == {"version": None, "metadata": {}}
    validate_document(doc)


def test_empty_document_is_valid() -> None:
    doc = document_of([])
    validate_document(doc)
    assert doc["points"] == [] and doc["sweeps"] == [] and doc["results_at_knee"] == []


def test_engine_handle_that_cannot_answer(points: list[SweepPoint]) -> None:
    class Stopped:
        def metadata(self) -> dict[str, Any]:
            raise ConnectionError("engine stopped")

        def version(self) -> str:
            raise ConnectionError("engine stopped")

    doc = document_of(points[:1], engines={"sim": Stopped()})
    assert doc["engines"]["sim"]["version"] is None
    assert "engine stopped" in doc["engines"]["sim"]["metadata"]["error"]
    validate_document(doc)


def test_capacity_is_stored_on_its_sweep(tmp_path: Path, points: list[SweepPoint]) -> None:
    result = capacity_result()
    doc = document_of(
        points, CONSTANTS, {"sim": FakeHandle()}, capacities={("sim", "test_chat"): result}
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
    rate = dataclasses.replace(result, mode="rate")
    other = document_of(points, CONSTANTS, capacities={("sim", "test_chat"): rate})
    assert other["sweeps"][0]["capacity"] is None


def test_interrupted_point_round_trips(points: list[SweepPoint]) -> None:
    cut = dataclasses.replace(points[0], interrupted=True)
    doc = document_of([cut, *points[1:]], CONSTANTS, complete=False)
    assert doc["points"][0]["interrupted"] is True and doc["points"][1]["interrupted"] is False
    loaded = Results.from_document(doc).points
    assert loaded[0].interrupted and not loaded[1].interrupted
