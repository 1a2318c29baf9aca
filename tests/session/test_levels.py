"""One level of one test, measured by the session core and recorded as a point: its numbers,
the harness's keys of its run (``RunMeta``), an invalid client run retried, and one that
stays invalid turning the level inconclusive."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from pytest_llmslo import metrics
from pytest_llmslo import session as core
from pytest_llmslo.errors import Inconclusive
from pytest_llmslo.runmeta import RunMeta
from pytest_llmslo.signals.levelsignals import LevelSignals


def test_a_level_is_measured_and_recorded_as_a_point(harness: Any) -> None:
    h = harness()
    ((node, ctx),) = h.tests
    measured = core.measure_level(h.state, node, h.handle(), ctx.level, ctx.settings)
    assert measured.index == 0 and ctx.point_keys == [0]
    point = h.state.points[0]
    assert (point.engine, point.test, point.level.label) == ("external", ctx.test, "c2")
    assert point.summary.requests == 12 and point.summary.completed == 12
    assert point.verdict is None and point.comparable and point.samples
    assert h.state.book.index_of(measured.run) == 0
    assert h.state.book.runs[0] is measured.run
    meta = measured.run.meta
    assert (meta.engine, meta.test, meta.extended) == ("external", ctx.test, False)
    # An engine the harness did not start keeps its cache unless --reset-cache=on.
    assert meta.cache is not None and meta.cache["reset"] is False
    # The engine's signals were asked for (--slo-signals), and it has none to give.
    assert meta.signals is not None
    signals = LevelSignals.from_dict(meta.signals)
    assert signals.scrapes == 0 and (signals.note or "").startswith("no engine signals")
    # The load generator's fields are typed too, and the whole is the JSON object users read.
    assert meta.harness == "pytest-llmslo" and meta.requests == 12
    assert meta["engine"] == "external" and dict(meta) == meta.to_dict()
    assert h.heard.closed == [f"external c2: {h.heard.closed[0].split(': ', 1)[1]}"]
    assert "12/12 requests ok" in h.heard.closed[0]
    # The session's first level is followed by an estimate of the whole session.
    assert len(h.heard.said) >= 1


def test_run_meta_is_typed_and_reads_as_the_json_object_it_was() -> None:
    signals = LevelSignals(engines=("vllm",), scrapes=3, prefix_hit_rate=0.25).to_dict()
    given = {
        "harness": "pytest-llmslo",
        "early_stop": None,  # a null key stays a null key
        "engine": "sim",
        "test": "t.py::test",
        "engine_version": "1.0",
        "extended": True,
        "faults": [{"kind": "kill"}],
        "mine": {"a": 1},  # a key the code does not know is kept as given
    }
    meta = RunMeta.from_dict(given)
    assert (meta.engine, meta.extended, meta.early_stop) == ("sim", True, None)
    assert meta.faults == ({"kind": "kill"},) and meta.other == {"mine": {"a": 1}}
    assert meta.to_dict() == given and list(meta) == list(given)  # the same keys, in order
    assert meta["early_stop"] is None and meta.get("cache") is None and "cache" not in meta
    changed = meta.with_(cache={"reset": True}, signals=signals, engine_version=None)
    assert list(changed)[-2:] == ["cache", "signals"]  # new keys after the old ones
    assert changed["engine_version"] is None and changed.signals == signals
    assert RunMeta.from_dict(changed.to_dict()).to_dict() == changed.to_dict()
    # A value no reader could use is kept as given, and the typed field stays unset.
    odd = RunMeta.from_dict({"processes": "two", "traffic": [1]})
    assert (odd.processes, odd.traffic) == (None, None)
    assert dict(odd) == {"processes": "two", "traffic": [1]}
    assert dict(odd.with_(processes=2)) == {"processes": 2, "traffic": [1]}
    with pytest.raises(ValueError, match="a JSON object"):
        RunMeta.from_dict([("engine", "sim")])
    with pytest.raises(TypeError, match="no field 'nope'"):
        meta.with_(nope=1)


def _invalid_tries(monkeypatch: pytest.MonkeyPatch, bad: int) -> None:
    """The first ``bad`` client runs are invalid, as a starved client's would be (the
    health assessment is the client's own)."""
    import pytest_llmslo.load.runner as runner

    real = runner.assess
    calls = [0]

    def assess(*args: Any) -> Any:
        health = real(*args)
        calls[0] += 1
        if calls[0] <= bad:
            return dataclasses.replace(health, valid=False, reasons=("client starved (injected)",))
        return health

    monkeypatch.setattr(runner, "assess", assess)


def test_a_retry_turns_an_invalid_level_valid(
    harness: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _invalid_tries(monkeypatch, 1)
    h = harness()
    ((node, ctx),) = h.tests
    run = core.load_test(h.state, node, h.handle(), ctx.level, ctx.settings)
    assert run.health.valid
    assert h.heard.closed[0] == (
        "external c2: invalid client run, retrying (1 of 2, --slo-retries): "
        "client starved (injected)"
    )
    assert h.heard.closed[1].startswith("external c2 (retry 1): 12/12 requests ok")
    (point,) = h.state.points
    assert point.notes == ("try 1 was an invalid client run: client starved (injected)",)


@pytest.mark.parametrize(("retries", "tries"), [("0", "1 try"), ("1", "2 tries")])
def test_a_level_that_stays_invalid_is_inconclusive(
    harness: Any, monkeypatch: pytest.MonkeyPatch, retries: str, tries: str
) -> None:
    _invalid_tries(monkeypatch, 99)
    h = harness(LLMSLO_SLO_RETRIES=retries)
    ((node, ctx),) = h.tests
    with pytest.raises(Inconclusive, match=f"inconclusive at c2 after {tries}: the load gen"):
        core.load_test(h.state, node, h.handle(), ctx.level, ctx.settings)
    (point,) = h.state.points
    assert point.summary.valid is False
    if retries != "0":
        assert point.notes[-1] == "inconclusive after 2 tries: the client stayed the bottleneck"


def test_a_judged_level_is_summarised_once(harness: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = metrics.summarize

    def summarize(*args: Any, **kw: Any) -> Any:
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(metrics, "summarize", summarize)
    h = harness(LLMSLO_SLO="ttft_p99<5000")
    ((node, ctx),) = h.tests
    run = core.load_test(h.state, node, h.handle(), ctx.level, ctx.settings)
    with core.bound(h.state, run):
        core.call_test(h.state, node, lambda: None)
    (point,) = h.state.points
    assert point.verdict is not None and point.verdict.passed
    assert len(calls) == 1
    # The goodput of the point is its verdict's.
    assert point.summary.goodput_tok_s == point.verdict.goodput_tok_s
    assert point.summary.attainment == point.verdict.attainment == 1.0
    assert point.summary.objectives == ("ttft_p99 < 5000 ms",)
    # The same numbers as a summary made from scratch over the verdict's objectives.
    again = real(run, [r.objective for r in point.verdict.results], confidence=0.95)
    assert again.goodput_tok_s == point.summary.goodput_tok_s
    assert again.objectives == point.summary.objectives


def test_a_judged_level_stores_its_good_flags(harness: Any) -> None:
    """The samples of a judged level carry, per request, whether it was good under the
    verdict's objectives (goodput's per-window noise bound reads them), in the document."""
    h = harness(LLMSLO_SLO="ttft_p99<5000")
    ((node, ctx),) = h.tests
    run = core.load_test(h.state, node, h.handle(), ctx.level, ctx.settings)
    with core.bound(h.state, run):
        core.call_test(h.state, node, lambda: None)
    (point,) = h.state.points
    assert point.verdict is not None and point.samples is not None
    good = list(point.samples["good"])
    assert len(good) == point.summary.requests == 12
    assert sum(x or 0 for x in good) == point.verdict.good == 12
    (stored,) = h.state.document(complete=True)["points"]
    assert stored["samples"]["good"] == good
