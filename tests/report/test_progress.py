"""The live progress line of a level: where the session stands (test i/N, level j/M, the
time left) and the level's time on one clock from its live line to its final one."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from pytest_llmslo import settings as S
from pytest_llmslo.load.job import Progress
from pytest_llmslo.records import LoadLevel
from pytest_llmslo.report import progress as progress_mod
from pytest_llmslo.report.estimate import where_text
from pytest_llmslo.report.progress import LevelProgress


def _ctx(test: str, engine: str, c: int, measured: bool = False) -> Any:
    ts = S.TestSettings(requests=100, warmup=0)
    return SimpleNamespace(
        test=test, engine=engine, level=LoadLevel("concurrency", c), settings=ts,
        capacity=False, point_keys=[0] if measured else [],
    )  # fmt: skip


def test_where_says_test_and_level_of_how_many_and_the_time_left() -> None:
    ctxs = [
        _ctx("t_chat", "a", 1, measured=True), _ctx("t_chat", "a", 2), _ctx("t_chat", "a", 4),
        _ctx("t_chat", "b", 1), _ctx("t_rag", "a", 1),
    ]  # fmt: skip
    # Before the first level's estimate: only the counts.
    assert where_text(ctxs, ctxs[1]) == "test 1/2, level 2/3"
    assert where_text(ctxs, ctxs[4]) == "test 2/2, level 1/1"
    # A closed loop's round took 1 s: c2 is 50 rounds, c4 25, each c1 100; 10 s in.
    text = where_text(ctxs, ctxs[1], (1.0, 100.0), elapsed_s=10.0)
    assert text == "test 1/2, level 2/3, ~4 min left"  # 40 + 25 + 100 + 100 = 265 s


def test_the_live_line_and_the_final_line_keep_one_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    monkeypatch.setattr(progress_mod.time, "monotonic", lambda: now[0])
    out: list[str] = []
    line = LevelProgress("sim c2", write=out.append, tty=True)
    line.where = lambda elapsed: f"test 1/5, level 2/3, ~{300 - elapsed:.0f} s left"
    now[0] += 25.0
    line(Progress(done=30, total=100, failed=0, elapsed_s=3.0, warmup=False))
    assert out[-1].startswith(
        "\r  llmslo sim c2: measuring 30/100 (0 failed), level 25 s · test 1/5, level 2/3, "
        "~275 s left"
    )
    now[0] += 9.0
    line.close("100/100 requests ok in 20.0 s")
    assert out[-1].strip() == (
        "llmslo sim c2: 100/100 requests ok in 20.0 s; level 34.0 s · test 1/5, level 2/3, "
        "~266 s left"
    )
