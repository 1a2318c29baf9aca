"""The SLO tests start and end without a bound run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pytest_llmslo.slo import unbind_run


@pytest.fixture(autouse=True)
def _no_bound_run() -> Iterator[None]:
    unbind_run()
    yield
    unbind_run()
