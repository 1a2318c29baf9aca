"""Fixtures of the report tests: synthetic points and sweeps (``sweep_helpers``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sweep_helpers import make_point, make_sweep

from pytest_llmslo.sweep import SweepPoint


@pytest.fixture
def point_factory() -> Callable[..., SweepPoint]:
    return make_point


@pytest.fixture
def sweep_factory() -> Callable[..., list[SweepPoint]]:
    return make_sweep
