"""assert_recovery on a run's fault records: the bounds judged with their numbers, a fault
not done or not recovered, and the mistakes of a call said plainly."""

from __future__ import annotations

import dataclasses

import pytest

from pytest_llmslo import SloViolation, assert_recovery
from pytest_llmslo.errors import LoadError

try:
    from tests.metrics_helpers import make_run, rec
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    from metrics_helpers import make_run, rec  # type: ignore[no-redef]


def _run(*faults: dict):  # type: ignore[no-untyped-def]
    run = make_run([rec(0, sent=0, chunks=[5, 6])])
    return dataclasses.replace(run, meta={"faults": list(faults)})


KILL = {"label": "kill at 4s", "asked_s": 4.1, "recovery_s": 1.5, "failed": 4}


def test_bounds_that_hold_pass_and_say_so() -> None:
    verdict = assert_recovery(_run(KILL), max_recovery_s=2, max_failed=4)
    assert verdict.passed
    assert verdict.format() == (
        "  kill at 4s: recovered in 1.500 s (max 2 s); 4 request(s) failed (max 4) -> pass"
    )


def test_each_bound_missed_is_named_with_its_numbers() -> None:
    with pytest.raises(SloViolation) as info:
        assert_recovery(_run(KILL), max_recovery_s=1, max_failed=2)
    text = str(info.value)
    assert text.startswith(
        "recovery objectives missed: kill at 4s: recovered in 1.500 s, more than 1 s, "
        "4 requests failed, more than 2"
    )
    assert info.value.verdict.results[0].recovery_s == 1.5


def test_a_fault_not_done_or_not_recovered_fails() -> None:
    not_done = {"label": "stall at 9s for 2 s", "why": "the level ended before its point (9s)"}
    failed = {"label": "kill at 1s", "asked_s": 1.0, "error": "ConfigError: cannot"}
    never = {"label": "restart at 2s", "asked_s": 2.0, "recovery_s": None, "failed": 3,
             "why": "never 3 s in a row ..."}  # fmt: skip
    with pytest.raises(SloViolation) as info:
        assert_recovery(_run(not_done, failed, never), max_recovery_s=5)
    text = str(info.value)
    assert "stall at 9s for 2 s: not done: the level ended before its point (9s)" in text
    assert "kill at 1s: not done: ConfigError: cannot" in text
    assert "restart at 2s: not recovered (never 3 s in a row ...)" in text
    # fault= picks one.
    assert assert_recovery(_run(not_done, KILL), max_recovery_s=5, fault=1).passed


def test_mistakes_are_said_plainly() -> None:
    with pytest.raises(TypeError, match="needs max_recovery_s"):
        assert_recovery(_run(KILL))
    with pytest.raises(TypeError, match="max_failed is a number of requests"):
        assert_recovery(_run(KILL), max_failed=1.5)  # type: ignore[arg-type]
    with pytest.raises(LoadError, match="this level had no fault: ask for one"):
        assert_recovery(_run(), max_recovery_s=1)
    with pytest.raises(LoadError, match="found no current run"):
        assert_recovery(max_recovery_s=1)
    with pytest.raises(LoadError, match=r"fault=3\): the level had 1"):
        assert_recovery(_run(KILL), max_recovery_s=1, fault=3)
