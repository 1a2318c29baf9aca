"""What the results document's tests share: constants, an engine handle, a document of
synthetic points, a finished capacity search."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pytest_llmslo import slo
from pytest_llmslo.capacity import CapacityResult, CapacitySearch, CapacitySpec
from pytest_llmslo.document import Results, build_document
from pytest_llmslo.records import LoadLevel
from pytest_llmslo.sweep import SweepPoint

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


def document_of(
    points: Iterable[SweepPoint],
    constants: Mapping[str, Any] | None = None,
    engines: Mapping[str, Any] | None = None,
    **kw: Any,
) -> dict[str, Any]:
    """The results document of ``points`` (``Results.of`` with the rest)."""
    return build_document(Results.of(points, constants=constants, engines=engines, **kw))


def capacity_result() -> CapacityResult:
    """A concurrency search whose capacity is c6."""
    search = CapacitySearch(CapacitySpec("concurrency", max_probes=12))
    while (level := search.next_level()) is not None:
        search.record(level, level.value <= 6)
    assert search.result.capacity == LoadLevel.concurrency(6)
    return search.result
