"""Fixtures of the results document tests: synthetic points and sweeps (``sweep_helpers``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from document_helpers import CONSTANTS, FakeHandle, document_of
from sweep_helpers import make_point, make_sweep

from pytest_llmslo.sweep import SweepPoint


@pytest.fixture
def point_factory() -> Callable[..., SweepPoint]:
    return make_point


@pytest.fixture
def sweep_factory() -> Callable[..., list[SweepPoint]]:
    return make_sweep


@pytest.fixture
def points(sweep_factory: Callable[..., list[SweepPoint]]) -> list[SweepPoint]:
    sim = sweep_factory("sim", samples=True)
    vllm = sweep_factory("vllm", levels=(1, 4, 8), ttft=lambda c: 30.0 * c, samples=True)
    return sim + vllm


@pytest.fixture
def doc(points: list[SweepPoint]) -> dict[str, Any]:
    return document_of(points, CONSTANTS, {"sim": FakeHandle(), "vllm": {"version": "0.11.0"}})
