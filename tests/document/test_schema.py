"""The results document's checks: every malformed field is named by its path."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from document_helpers import capacity_result

from pytest_llmslo.document import (
    SCHEMA_VERSION,
    DocumentError,
    jsonable,
    validate_document,
)
from pytest_llmslo.errors import ConfigError


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


def test_capacity_and_interrupted_are_validated(doc: dict[str, Any]) -> None:
    bad = copy.deepcopy(doc)
    bad["points"][0]["interrupted"] = "yes"
    with pytest.raises(DocumentError) as info:
        validate_document(bad)
    assert info.value.field == "points[0].interrupted"
    bad = copy.deepcopy(doc)
    bad["sweeps"][0]["capacity"] = {**capacity_result().to_dict(), "probes": "six"}
    with pytest.raises(DocumentError) as info:
        validate_document(bad)
    assert info.value.field == "sweeps[0].capacity.probes"
