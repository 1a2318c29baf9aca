"""One results document with a level of every outcome, rendered through every format: they
all print the level's judged figures and outcome (``judged``), figure by figure."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import re
from html import unescape
from html.parser import HTMLParser

import pytest
from sweep_helpers import make_point

from pytest_llmslo.document import Results
from pytest_llmslo.document.build import build_document
from pytest_llmslo.judged import (
    OUTCOME_WORDS,
    THIN_LEGEND,
    THIN_MARK,
    Outcome,
    fmt_judged,
    judged_stat,
    level_outcome,
    stat_count,
    weight_note,
)
from pytest_llmslo.report import csvexport, html, junit, markdown, svg, terminal
from pytest_llmslo.report.htmlcells import OUTCOME
from pytest_llmslo.sweep import SweepPoint, find_knee

# Outcome of each level of the sweep of test_chat, and of the level of test_free (no SLO).
EXPECTED = {
    "c1": "pass",
    "c2": "inconclusive",
    "c4": "fail",  # below the knee: the engine missed where a higher load held
    "c8": "pass",  # the knee
    "c16": "expected_miss",
    "c24": "cut",
    "c32": "interrupted",
}


def _cut(p: SweepPoint) -> SweepPoint:
    """``p`` as a level the harness's own time bound cut: its failed requests cancelled."""
    s = dataclasses.replace(
        p.summary, level_timeout="measuring", failures={"cancelled": p.summary.failed}
    )
    return dataclasses.replace(p, summary=s)


def _points() -> list[SweepPoint]:
    pts = [
        make_point(1, ttft_ms=50.0, requests=24),  # a P99 from 24 requests
        make_point(2, ttft_ms=60.0, valid=False),
        make_point(4, ttft_ms=600.0),
        make_point(8, ttft_ms=100.0),
        make_point(16, ttft_ms=900.0),
        _cut(make_point(24, ttft_ms=120.0, failed=2)),
        dataclasses.replace(make_point(32, ttft_ms=130.0), interrupted=True),
        make_point(8, ttft_ms=70.0, test="test_free", objectives=None),
        *_quality_points(),
    ]
    return pts


def _judged_quality(outcome: str, right: int, items: int) -> dict[str, object]:
    """A level's quality verdict as ``session.qualitygate`` keeps it."""
    row = {
        "objective": "accuracy>=0.95",
        "items": items,
        "right": right,
        "accuracy": right / items,
        "lower": 0.8,
        "upper": 0.99,
        "outcome": outcome,
    }
    verdict = {"task": "arithmetic", "confidence": 0.95, "outcome": outcome, "objectives": [row]}
    return {"verdict": verdict}


# Outcome of each level of test_quality (engine vllm): every latency objective held, but
# c1's 30 items cannot show 95 %, c2 missed it, c4 ran another workload than asked, c8's
# engine was not deterministic at temperature 0.
QUALITY = {"c1": "inconclusive", "c2": "fail", "c4": "inconclusive", "c8": "inconclusive"}
NOT_COMPARABLE = "not comparable: 30 of 30 completed requests returned short outputs"
NONDETERMINISTIC = "the engine is not deterministic at temperature 0: 1 of 2 eval items"


def _quality_points() -> list[SweepPoint]:
    def point(c: int, **kw: object) -> SweepPoint:
        return dataclasses.replace(
            make_point(c, ttft_ms=50.0, engine="vllm", test="test_quality"), **kw
        )

    return [
        point(1, quality=_judged_quality("inconclusive", 29, 30)),
        point(2, quality=_judged_quality("fail", 150, 200)),
        point(4, comparable=False, notes=(NOT_COMPARABLE,)),
        point(8, quality={"nondeterministic": NONDETERMINISTIC}),
    ]


@pytest.fixture(scope="module")
def results() -> Results:
    return Results.of(_points())


def _chat(results: Results) -> list[SweepPoint]:
    return [p for p in results.points if p.test == "test_chat"]


def test_the_document_has_one_level_of_every_outcome(results: Results) -> None:
    knee = find_knee(_chat(results))
    assert knee.level is not None and knee.level.label == "c8"
    got = {p.level.label: level_outcome(p, knee).outcome for p in _chat(results)}
    assert got == EXPECTED
    quality = {
        p.level.label: level_outcome(p).outcome for p in results.points if p.test == "test_quality"
    }
    assert quality == QUALITY
    free = next(p for p in results.points if p.test == "test_free")
    assert level_outcome(free).outcome == "no_slo"
    # The cut level's TTFT P99 is infinite (its cut requests), and says so everywhere.
    cut = next(p for p in results.points if p.level.label == "c24")
    assert judged_stat(cut, "ttft", 99) == float("inf")


def _expected(results: Results) -> dict[tuple[str, str], tuple[Outcome, str, int]]:
    """(test, level) -> (outcome, TTFT P99 as the tables write it, with ``THIN_MARK`` when
    it rests on fewer than the 100 samples a P99 needs, and its sample count)."""
    out: dict[tuple[str, str], tuple[Outcome, str, int]] = {}
    for s in results.sweeps():
        for p in s.points:
            count = stat_count(p, "ttft", 99)
            out[(p.test, p.level.label)] = (
                level_outcome(p, s.knee).outcome,
                fmt_judged(judged_stat(p, "ttft", 99)) + (THIN_MARK if count < 100 else ""),
                count,
            )
    return out


def test_terminal_agrees(results: Results) -> None:
    lines = terminal.render_summary(results, 160)
    want = _expected(results)
    seen = 0
    test = ""
    for line in lines:
        title = re.match(r"\S+ \| (test_\w+) \|", line)
        if title:
            test = title.group(1)
        fields = line[1:].split()
        if not (fields and re.fullmatch(r"c\d+", fields[0])):
            continue
        outcome, ttft99, count = want[(test, fields[0])]
        assert fields[1] == str(count) and fields[3] == ttft99, line
        verdict = line[line.index(fields[9], len(fields[0])) :]
        word = {"fail": "FAIL", "expected_miss": "exp. miss", "no_slo": "-"}.get(
            outcome,
            OUTCOME_WORDS[outcome],
        )
        assert word in verdict, line
        seen += 1
    assert seen == len(want)
    head = lines[0]
    # Red only for the level that failed where it was asked to hold.
    assert head.startswith("FAIL  sim | test_chat: 2/7 levels passed; c4 FAIL; c16 expected miss;")
    assert "c24 cut" in head and "c2 inconclusive" in head and "c32 interrupted" in head


def test_markdown_agrees(results: Results) -> None:
    text = markdown.render_report(results)
    want = _expected(results)
    seen = 0
    test = ""
    for line in text.splitlines():
        title = re.match(r"<details><summary>.*<code>(test_\w+)</code>", line)
        if title:
            test = title.group(1)
        cells = [c.strip().strip("*") for c in line.strip("|").split(" | ")]
        if len(cells) < 10 or not re.fullmatch(r"c\d+", cells[1]):
            continue
        outcome, ttft99, count = want[(test, cells[1])]
        assert cells[2] == str(count) and cells[4] == ttft99, line
        word = {"no_slo": "-"}.get(outcome, OUTCOME_WORDS[outcome])
        assert cells[-1].startswith(word), line
        seen += 1
    assert seen == len(want)
    assert THIN_LEGEND in text
    verdict = next(line for line in text.splitlines() if line.startswith("**Verdict: "))
    assert verdict.startswith(
        "**Verdict: ❌ 2 of 5 judged levels met their SLO, 2 failed, 1 missed above their "
        "sweep's knee, as expected, 1 cut by the level's time bound (inconclusive), 4 "
        "inconclusive (nothing shown about the engine), 1 interrupted, 1 without an SLO; "
        "no level passed on vllm `test_quality`.**"
    )


def test_csv_agrees(results: Results) -> None:
    rows = list(csv.DictReader(io.StringIO(csvexport.render_csv(results))))
    want = _expected(results)
    assert len(rows) == len(want)
    for row in rows:
        outcome, ttft99, count = want[(row["test"], row["label"])]
        assert row["outcome"] == outcome
        shown = "∞" if row["ttft_p99_ms"] == "inf" else f"{float(row['ttft_p99_ms']):.1f}"
        # A CSV cell stays a number: the count and the figures from too few samples have
        # columns of their own.
        assert int(row["ttft_n"]) == count
        thin = "ttft_p99_ms" in row["too_few"].split()
        assert shown + (THIN_MARK if thin else "") == ttft99, row["label"]


class _Table(HTMLParser):
    """The HTML sweep table's rows: the point's index, then the cells' texts."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._in_row = False
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        point = dict(attrs).get("data-point")
        if tag == "tr" and point is not None:
            self._in_row = True
            self.rows.append([point])
        elif tag == "td" and self._in_row:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr":
            self._in_row = False

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def test_html_agrees(results: Results) -> None:
    page = html.render_html(results)
    parser = _Table()
    parser.feed(page)
    heads = [h for h, _k, _d in html._COLUMNS]
    # index, engine, level, outcome, requests, failed, then the columns
    at = 6 + heads.index("TTFT P99 ms")
    want = _expected(results)
    assert len(parser.rows) == len(want)
    for row in parser.rows:
        p = results.points[int(row[0])]
        outcome, ttft99, count = want[(p.test, p.level.label)]
        assert row[3] == OUTCOME[outcome]
        assert row[at].replace(",", "") == ttft99, row
        assert f'data-n="{count}" title="from {count} samples' in page
    # The banner: red only for the failure below the knee.
    banner = re.search(r'<p class="verdict (\w+)"[^>]*>([^<]*)</p>', page)
    assert banner is not None
    assert banner.group(1) == "fail" and banner.group(2) == "2 of 12 levels missed their SLO"
    assert THIN_LEGEND in page


def test_html_banner_is_not_red_for_misses_above_the_knee() -> None:
    pts = [make_point(c, ttft_ms=50.0 * c) for c in (1, 4, 8, 16)]
    page = html.render_html(Results.of(pts))
    banner = re.search(r'<p class="verdict (\w+)"[^>]*>([^<]*)</p>', page)
    assert banner is not None
    assert banner.group(1) == "pass"
    assert banner.group(2) == "3 of 4 levels met their SLO; 1 above the knee missed, as expected"


def test_svg_agrees(results: Results) -> None:
    image = svg.render_svg(results)
    want = _expected(results)
    titles = re.findall(
        r"<title>sim (c\d+), [^<]*?TTFT P99 ([^ ]+) ms \((\d+) samples([^)]*)\), ([^<]*)</title>",
        image,
    )
    assert titles, "no point of the sweep was drawn"
    for label, shown, n, few, rest in titles:
        outcome, ttft99, count = want[("test_chat", label)]
        assert shown == ttft99 and int(n) == count
        assert (few == ", fewer than a P99 needs") is ttft99.endswith(THIN_MARK)
        assert OUTCOME_WORDS[outcome] in rest


def test_junit_and_json_agree(results: Results) -> None:
    doc = json.loads(json.dumps(build_document(results)))
    want = _expected(results)
    knees = {i: s.knee for s in results.sweeps() for i in s.indices}
    for i, p in enumerate(results.points):
        outcome, ttft99, count = want[(p.test, p.level.label)]
        ttft99, thin = ttft99.removesuffix(THIN_MARK), ttft99.endswith(THIN_MARK)
        judged = doc["points"][i]["judged"]
        assert judged["counts"]["ttft_p99_ms"] == count
        assert ("ttft_p99_ms" in judged["too_few"]) is thin
        assert judged["outcome"] == outcome
        if ttft99 == "∞":
            assert judged["figures"]["ttft_p99_ms"] is None
            assert "ttft_p99_ms" in judged["infinite"]
        else:
            assert fmt_judged(judged["figures"]["ttft_p99_ms"]) == ttft99
        # The session writes the JUnit file with the outcome against the sweep's knee
        # (``session.junit_outcomes``): the properties a test case gets at the end.
        props = dict(
            junit.testcase_properties(
                p.summary,
                p.verdict,
                engine=p.engine,
                test=p.test,
                interrupted=p.interrupted,
                knee=knees[i],
                point=p,
            )
        )
        shown = props.get("llmslo.ttft_p99_ms")
        assert ("∞" if shown == "inf" else f"{float(shown or 'nan'):.1f}") == ttft99
        assert props["llmslo.ttft_p99_n"] == str(count)
        assert props.get("llmslo.ttft_p99_too_few") == judged["too_few"].get("ttft_p99_ms")
        assert props["llmslo.outcome"] == outcome
        assert props["llmslo.outcome_reason"] == level_outcome(p, knees[i]).reason


def test_a_tail_percentile_from_too_few_samples_says_so(results: Results) -> None:
    c1 = next(p for p in results.points if p.level.label == "c1")
    note = weight_note(c1, "ttft", 99)
    assert note == (
        "ttft_p99 from 24 samples (a P99 needs 100): judged on the point estimate, which is "
        "the largest sample here"
    )
    doc = build_document(results)
    assert doc["points"][0]["judged"]["too_few"]["ttft_p99_ms"] == note
    assert doc["points"][0]["judged"]["counts"]["ttft_p99_ms"] == 24
    assert weight_note(c1, "ttft", 50) is None


def test_quality_and_asked_workload_reasons_show_in_every_format(results: Results) -> None:
    """A level judged by its quality objectives, or made inconclusive because the engine
    answered another workload than asked, says so with the same reason everywhere."""
    quality = {p.level.label: p for p in results.points if p.test == "test_quality"}
    reasons = {label: level_outcome(p).reason for label, p in quality.items()}
    assert reasons["c1"] == (
        "too few eval items to show accuracy>=0.95 (29/30 right, bound 0.800..0.990)"
    )
    assert reasons["c2"] == "missed accuracy>=0.95 (150/200 right, bound 0.800..0.990)"
    assert (
        NOT_COMPARABLE in reasons["c4"] and "another workload than the one asked" in reasons["c4"]
    )
    assert reasons["c8"] == NONDETERMINISTIC
    # A quality miss fails the sweep's knee as a latency miss does; the inconclusive levels
    # are left out of it.
    sweep = next(s for s in results.sweeps() if s.test == "test_quality")
    assert sweep.knee.level is None
    term = "\n".join(terminal.render_summary(results, 400))
    md = markdown.render_report(results)
    page = unescape(html.render_html(results))
    doc = build_document(results)
    for label, why in reasons.items():
        # The terminal and Markdown name a failed objective in the verdict cell (below),
        # the reasons of the others under the table.
        assert label == "c2" or why in term, label
        assert label == "c2" or why in md, label
        assert why in page, label
        i = results.points.index(quality[label])
        assert doc["points"][i]["judged"]["reason"] == why
    assert "FAIL accuracy>=0.95" in term
    assert "**FAIL** accuracy>=0.95" in md
