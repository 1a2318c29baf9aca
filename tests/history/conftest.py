"""The ``history`` fixture: a run history of synthetic runs (``history_helpers``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from history_helpers import save


@pytest.fixture
def history(tmp_path: Path) -> Callable[[Sequence[float], Sequence[str] | None], Path]:
    """``history(gaps, versions)``: a run history with one run per gap, oldest first."""

    def make(gaps: Sequence[float], versions: Sequence[str] | None = None) -> Path:
        root = tmp_path / "runs"
        for i, gap in enumerate(gaps):
            version = versions[i] if versions else "0.9.2"
            save(root, i, gap, version, commit="a" if version == "0.9.2" else "b")
        return root

    return make
