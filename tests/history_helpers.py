"""Histories of synthetic runs for the history tests (tests/history): each run one point
of ``test_chat`` on ``sim`` at c4 whose ITL P50 is the gap given, saved as a session saves
a run."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from sweep_helpers import make_point

from pytest_llmslo.document import Results, build_document
from pytest_llmslo.history import store

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def run_document(gap_ms: float, version: str = "0.9.2", valid: bool = True) -> dict[str, Any]:
    point = make_point(4, ttft_ms=50.0, gap_ms=gap_ms, valid=valid)
    results = Results.of(
        [point], constants={"isl": 512, "osl": 16}, engines={"sim": {"version": version}}
    )
    return build_document(results)


def save(
    root: Path, i: int, gap_ms: float, version: str = "0.9.2", commit: str = "a", valid: bool = True
) -> Path:
    """Run ``i`` of a history (a day apart from T0) with ITL P50 ``gap_ms``."""
    record = {
        "id": store.new_run_id(T0 + timedelta(days=i)),
        "time_utc": (T0 + timedelta(days=i)).isoformat(),
        "commit": {"id": commit * 40},
        "engines": {"sim": {"version": version, "image": None}},
        "machine": {"node": "ci"},
    }
    return store.save_run(run_document(gap_ms, version, valid), record, root)
