"""Fixtures of the sim engine's tests (the server itself is started by ``sim_helpers``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sim_helpers import SimProc, start_sim


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProc]:
    """The default profile (70B FP8 on 4x H100, vLLM-like), with a token trace."""
    tmp = tmp_path_factory.mktemp("sim")
    with start_sim(tmp, "--max-model-len", "4096", trace=True) as s:
        yield s
