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
    # Only this test's units: engines that other tests of the session hold stay running.
    before = lifecycle.tokens()
    yield
    left = lifecycle.tokens() - before
    for token in left:
        lifecycle.stop(token)
    if left:
        pytest.fail(f"{len(left)} engine unit(s) were left running by the test")
