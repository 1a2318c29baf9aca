"""Markdown summaries: the run report (sweep tables, knee, Pareto) and the comparison."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from sweep_helpers import synthetic_run

from pytest_llmslo import metrics, regression
from pytest_llmslo.document import Results, build_document
from pytest_llmslo.records import LoadLevel
from pytest_llmslo.report import markdown
from pytest_llmslo.sweep import SweepPoint

CONSTANTS: dict[str, Any] = {
    "model": "llama-3.1-70b",
    "precision": "fp8",
    "hardware": {"gpu": "4xH100"},
    "workload": {"kind": "synthetic", "isl": 512, "osl": 16},
    "isl": 512,
    "osl": 16,
    "slo": ["ttft_p99 < 500 ms", "itl_p50 < 30 ms"],
}


def table_rows(text: str, heading: str) -> list[list[str]]:
    """The body rows of the first table after ``heading`` (a line, or the start of one),
    as cells."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    rows, seen = [], False
    for line in lines[start + 1 :]:
        if line.startswith("|"):
            seen = True
            rows.append([c.strip() for c in line.strip("|").split(" | ")])
        elif seen:
            break
    return rows[2:]  # header and alignment rows


def sweep_details(engine: str, test: str) -> str:
    """The start of the folded block of one sweep."""
    return f"<details><summary><b>{engine}</b> · <code>{test}</code> · concurrency sweep"


def test_report_has_constants_sweeps_knee_and_pareto(sweep_factory):
    points = sweep_factory("vllm") + sweep_factory("sglang", ttft=lambda c: 40.0 * c)
    results = Results.of(points, constants=CONSTANTS, engines={"vllm": {"version": "0.10.1"}})
    text = markdown.render_report(results)
    assert text.startswith("## pytest-llmslo sweep\n")
    assert "- **model**: llama-3.1-70b" in text
    assert "- **slo**: ttft_p99 < 500 ms, itl_p50 < 30 ms" in text
    assert "Engines: vllm 0.10.1" in text
    rows = table_rows(text, sweep_details("vllm", "test_chat"))
    assert [r[1].strip("*") for r in rows] == ["c1", "c4", "c8", "c16", "c32"]
    knee = results.sweeps()[0].knee.level
    assert knee is not None
    marked = [r for r in rows if r[0] == markdown.KNEE_MARK]
    assert len(marked) == 1
    assert marked[0][1] == f"**{knee.label}**"
    assert all(c.startswith("**") for c in marked[0][1:9])
    # The levels above the knee missed, as expected: named so, never FAIL.
    assert any(r[-1] == "expected miss ttft_p99 < 500 ms" for r in rows)
    assert not any("FAIL" in r[-1] for r in rows)
    assert f"◆ Knee: **{knee.label}**" in text
    pareto = table_rows(text, "### Pareto · `test_chat`")
    assert {r[0] for r in pareto} == {"vllm", "sglang"}
    assert [r[-1] for r in pareto].count("yes") >= 1
    assert "Over all points:" in text


def test_single_engine_has_no_pareto_section(sweep_factory):
    text = markdown.render_report(Results.of(sweep_factory("vllm"), constants=CONSTANTS))
    assert "### Pareto" not in text
    assert text.endswith("\n") and not text.endswith("\n\n")


def test_report_marks_partial_and_invalid_runs(point_factory):
    points = [
        point_factory(1, ttft_ms=50.0),
        point_factory(4, ttft_ms=80.0, valid=False),
    ]
    text = markdown.render_report(Results.of(points, constants=CONSTANTS, complete=False))
    assert "> **Partial results**" in text
    rows = table_rows(text, sweep_details("sim", "test_chat"))
    assert rows[1][0] == "!" and rows[1][-1] == "inconclusive"
    assert "inconclusive: the load generator" in text


def test_report_without_points():
    text = markdown.render_report(Results.of([], constants=CONSTANTS))
    assert "No load level was measured." in text


def test_cells_are_escaped(point_factory):
    points = [point_factory(1, ttft_ms=50.0, test="t[a|b]")]
    text = markdown.render_report(Results.of(points, constants=CONSTANTS))
    assert "`t[a\\|b]`" in text
    assert markdown.escape_cell("a|b\nc") == "a\\|b c"
    lines = markdown.table(("x", "y"), [["1", "2|3"]], {1})
    assert lines == ["| x | y |", "| :--- | ---: |", "| 1 | 2\\|3 |"]


def test_document_knees(sweep_factory):
    doc = build_document(Results.of(sweep_factory("vllm"), constants=CONSTANTS))
    knees = Results.from_document(doc).test_knees()
    assert set(knees) == {("vllm", "test_chat")}
    assert knees["vllm", "test_chat"].level is not None


def _doc(points, constants, engines=None, **kw):
    return build_document(Results.of(points, constants=constants, engines=engines, **kw))


def _docs(sweep_factory, scale: float, constants: dict[str, Any] | None = None):
    old = sweep_factory("vllm", samples=True)
    new = sweep_factory("vllm", samples=True, ttft=lambda c: 50.0 * c * scale)
    return (
        Results.of(old, constants=CONSTANTS, engines={"vllm": {"version": "0.9"}}),
        Results.of(new, constants=constants or CONSTANTS, engines={"vllm": {"version": "0.10"}}),
    )


def test_comparison_tables_regressions_first(sweep_factory):
    old, new = _docs(sweep_factory, 1.5)
    result = regression.compare_documents(old, new, "ttft_p50:10%,ttft_p99:10%,itl_p50:2ms")
    text = markdown.render_comparison(result)
    assert text.startswith("## pytest-llmslo comparison: baseline → new\n")
    assert "❌ **regressed**" in text
    assert "Tolerances: `ttft_p50` 10%, `ttft_p99` 10%, `itl_p50` 2 ms" in text
    assert "| metric | baseline | new | delta | delta % | tolerance | detectable | status |" in text
    assert "| **ttft_p50** |" in text and "**REGRESSED**" in text
    assert "engine 0.9 → 0.10" in text
    # 60 requests cannot show a P99 rise: a noise line explains why.
    assert "`ttft_p99` (noise)" in text and "samples a side" in text
    assert "<sub>rule:" in text


def test_comparison_unchanged(sweep_factory):
    old, new = _docs(sweep_factory, 1.0)
    text = markdown.render_comparison(regression.compare_documents(old, new))
    assert "✅ **unchanged**" in text
    assert "5 points compared: 5 unchanged" in text


def test_comparison_of_mismatched_constants(sweep_factory):
    old, new = _docs(sweep_factory, 1.0, {**CONSTANTS, "model": "llama-3.1-8b"})
    text = markdown.render_comparison(regression.compare_documents(old, new))
    assert "⚠️ **not comparable**" in text
    assert "Not compared: the pinned constants differ." in text
    assert '- model: "llama-3.1-70b" (baseline) != "llama-3.1-8b" (new)' in text
    assert "| metric |" not in text


def test_comparison_lists_unmatched_points(sweep_factory):
    old = Results.of(sweep_factory("vllm", levels=(1, 4)), constants=CONSTANTS)
    new = Results.of(sweep_factory("vllm", levels=(4, 8)), constants=CONSTANTS)
    text = markdown.render_comparison(regression.compare_documents(old, new))
    assert "Only in baseline: vllm \\| test_chat \\| c1" in text
    assert "Only in new: vllm \\| test_chat \\| c8" in text
    assert "1 point compared" in text


def test_report_shows_the_capacity_search(sweep_factory):
    from pytest_llmslo.capacity import CapacitySearch, CapacitySpec

    search = CapacitySearch(CapacitySpec("concurrency"))
    while (level := search.next_level()) is not None:
        search.record(level, level.value <= 4)
    capacities = {("vllm", "test_chat"): search.result}
    doc = _doc(sweep_factory("vllm"), CONSTANTS, capacities=capacities)
    text = markdown.render_report(Results.from_document(doc))
    assert (
        "Capacity: **c4** (c5 failed), 6 levels: bracketed to the resolution. "
        "Probes: c1 pass, c2 pass, c4 pass, c8 FAIL, c6 FAIL, c5 FAIL"
    ) in text
    assert Results.from_document(doc).capacities[("vllm", "test_chat")] == search.result


# --------------------------------------------------------------------------- for a PR

ABSOLUTE = re.compile(
    r"/tmp/|/root/|/home/|/work/|(?:^|[\s(`'\"=:,\[])/[\w.-]+/[\w.-]+|\b[A-Za-z]:[\\/]"
)
ENGINES6 = ("vllm", "sglang", "trtllm", "dynamo-vllm", "dynamo-sglang", "dynamo-trtllm")


def with_warmup(p: SweepPoint, n: int | None) -> SweepPoint:
    """``p`` as if its level had warmed up with ``n`` requests."""
    return dataclasses.replace(p, summary=dataclasses.replace(p.summary, warmup_requests=n))


def six_engines(sweep_factory) -> list[SweepPoint]:
    """The main example's shape: six engines on one test, three levels each, and four
    tests on one engine (one of them a single level)."""
    points = [
        with_warmup(p, int(p.level.value))
        for i, engine in enumerate(ENGINES6)
        for p in sweep_factory(engine, levels=(4, 8, 16), ttft=lambda c, i=i: (30 + 4 * i) * c)
    ]
    for test in ("test_rag", "test_long", "test_multi_turn"):
        points += sweep_factory("vllm", test=test, levels=(2, 8))
    points += sweep_factory("vllm", test="test_ci_gate", levels=(8,))
    return points


def test_the_first_40_lines_have_the_verdict_every_knee_and_the_pareto_table(sweep_factory):
    results = Results.of(six_engines(sweep_factory), constants=CONSTANTS)
    text = markdown.render_report(results)
    head = text.splitlines()[:40]
    verdict = [line for line in head if line.startswith("**Verdict: ")]
    assert len(verdict) == 1, head
    missed = sum(1 for p in results.points if p.outcome == "fail")
    assert f", {missed} missed above their sweep's knee, as expected" in verdict[0]
    assert "failed" not in verdict[0] and verdict[0].startswith("**Verdict: ✅")
    # Every sweep's row, with its knee.
    rows = table_rows("\n".join(head), "**Verdict: ")
    sweeps = results.sweeps()
    assert len(rows) == len(sweeps)
    for s, row in zip(sweeps, rows, strict=True):
        assert row[:3] == [s.engine, f"`{s.test}`", "concurrency"]
        assert s.knee.level is not None
        assert row[4].startswith(f"{markdown.KNEE_MARK} **{s.knee.level.label}**")
    # The Pareto table of the six engines, whole.
    assert "### Pareto · `test_chat`" in head
    pareto = table_rows("\n".join(head), "### Pareto · `test_chat`")
    assert {r[0] for r in pareto} == set(ENGINES6)
    assert any(line.startswith("Over all points:") for line in head)
    # Tests run on one engine get no Pareto table.
    assert "### Pareto · `test_rag`" not in text
    # Everything else is folded: no table outside a <details> block after the Pareto one.
    lines = text.splitlines()
    depth = 0
    for i, line in enumerate(lines):
        depth += line.count("<details>") - line.count("</details>")
        if i >= 40 and line.startswith("|"):
            assert depth == 1, f"line {i + 1} is not folded: {line}"
    assert depth == 0
    assert text.count("<details>") == len(sweeps) + 1  # each sweep, and the constants


def test_details_render_as_markdown_on_github(sweep_factory):
    text = markdown.render_report(Results.of(sweep_factory("vllm"), constants=CONSTANTS))
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("<details>"):
            # GitHub renders Markdown in a block only after a blank line.
            assert line.endswith("</summary>") and lines[i + 1] == ""
            assert "`" not in line and "**" not in line  # HTML, not Markdown, up there
        if line == "</details>":
            assert lines[i - 1] == ""


def test_no_absolute_path_anywhere(point_factory, sweep_factory, tmp_path):
    trace = "/work/ci/bench/traces/day.jsonl"
    log = "/tmp/llmslo-sim-x1/sim.log"
    constants = {
        **CONSTANTS,
        "workload": {"kind": "trace", "path": trace},
        "dataset": trace,
        "tests": {"test_chat": {"workload": {"kind": "trace", "path": trace}, "warmup": 1}},
    }
    engines = {
        "vllm": {"version": "0.10", "units": [{"log": log, "argv": ["/root/venv/bin/vllm"]}]}
    }
    bad = point_factory(8, ttft_ms=60.0, valid=False, engine="vllm")
    bad = dataclasses.replace(
        bad,
        summary=dataclasses.replace(
            bad.summary, invalid_reasons=(f"engine log {log} says C:\\runner\\x.log",)
        ),
        notes=(f"see {log}",),
    )
    points = [*sweep_factory("vllm", levels=(1, 4)), bad]
    doc = build_document(Results.of(points, constants=constants, engines=engines))
    source = "/work/ci/bench/.llmslo/results.json"
    text = markdown.render_report(Results.from_document(doc, source=source))
    assert not ABSOLUTE.search(text), ABSOLUTE.search(text)
    # Near the results file: relative to its directory; elsewhere: the file's name.
    assert "trace: ../traces/day.jsonl" in text
    assert "sim.log" in text and "x.log" in text
    # Without a results file (a session's own report): file names.
    text = markdown.render_report(Results.of(points, constants=constants, engines=engines))
    assert not ABSOLUTE.search(text) and "trace: day.jsonl" in text
    # A comparison's labels may be baseline files.
    old = Results.of(sweep_factory("vllm"), constants=CONSTANTS)
    result = regression.compare_documents(
        old, old, labels=("/root/.llmslo/baselines/main.json", "/tmp/new/results.json")
    )
    text = markdown.render_comparison(result)
    assert not ABSOLUTE.search(text) and "main.json → results.json" in text


WARMUP = re.compile(r"warm-up (\d+)(?:-(\d+) \(([^)]*)\))?")


def test_warmup_shown_is_what_each_level_ran(sweep_factory):
    points = [with_warmup(p, max(4, int(p.level.value))) for p in sweep_factory("vllm")]
    points += [with_warmup(p, 4) for p in sweep_factory("vllm", test="test_rate", rate=True)]
    doc = json.loads(json.dumps(build_document(Results.of(points, constants=CONSTANTS))))
    text = markdown.render_report(Results.from_document(doc))
    found = {}
    for line in text.splitlines():
        if line.startswith("<details><summary>") and "<code>" in line:
            test = line.split("<code>")[1].split("</code>")[0]
        m = WARMUP.search(line)
        if m and line.startswith("_"):
            found[test] = m
    assert set(found) == {"test_chat", "test_rate"}
    for test, m in found.items():
        ran = {
            LoadLevel.from_dict(p["level"]).label: p["summary"]["warmup_requests"]
            for p in doc["points"]
            if p["test"] == test
        }
        assert int(m.group(1)) == min(ran.values())
        if m.group(2) is None:
            assert set(ran.values()) == {int(m.group(1))}
        else:
            assert int(m.group(2)) == max(ran.values())
            each = dict(part.split() for part in m.group(3).split(", "))
            assert {k: int(v) for k, v in each.items()} == ran
    assert "warm-up 4-32 (c1 4, c4 4, c8 8, c16 16, c32 32)" in text
    assert re.search(r"warm-up 4[;_]", text)


def test_warmup_of_a_run_reaches_the_document():
    run = synthetic_run(LoadLevel.concurrency(16), ttft_ms=50.0, gap_ms=10.0)
    run = dataclasses.replace(run, warmup_requests=16)
    summary = metrics.summarize(run, ())
    assert summary.warmup_requests == 16
    assert type(summary).from_dict(summary.to_dict()).warmup_requests == 16
    assert (
        type(summary).from_dict({**summary.to_dict(), "warmup_requests": None}).warmup_requests
        is None
    )


def test_warmup_of_an_older_document_is_worked_out_from_the_setting(sweep_factory):
    constants = {**CONSTANTS, "tests": {"test_chat": {"warmup": 1}}}
    points = [with_warmup(p, None) for p in sweep_factory("vllm", levels=(16, 32, 48))]
    text = markdown.render_report(Results.of(points, constants=constants))
    assert "warm-up 16-48 (c16 16, c32 32, c48 48)" in text
    assert "warm-up 1;" not in text and "warm-up 1_" not in text


def test_the_heading_names_model_and_hardware(sweep_factory):
    engines = {
        "sim": {
            "version": "0.1",
            "simulated": {"model": "meta-llama/Llama-3.1-70B-Instruct", "precision": "FP8",
                          "hardware": "4x H100-SXM-80GB", "engine": "vllm"},
        }
    }  # fmt: skip
    text = markdown.render_report(Results.of(sweep_factory("sim"), engines=engines))
    assert "Llama-3.1-70B-Instruct FP8 on 4x H100-SXM-80GB (simulated)" in text.splitlines()[2]
