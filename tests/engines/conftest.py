"""Fixtures of the engine launcher tests: paths, and checks that each test left nothing
running (no registered unit, no llmslo container of this session)."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from engines_helpers import FAKE_ENGINE

from pytest_llmslo.engines import lifecycle


@pytest.fixture
def fake_engine_argv() -> list[str]:
    return [sys.executable, str(FAKE_ENGINE)]


@pytest.fixture(autouse=True)
def _nothing_left_registered() -> Iterator[None]:
    before = lifecycle.registered()
    yield
    left = lifecycle.registered() - before
    if left:
        lifecycle.stop_all()
        pytest.fail(f"{left} engine unit(s) were left running by the test")
