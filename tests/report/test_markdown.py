"""Markdown summaries: the run report (sweep tables, knee, Pareto) and the comparison."""

from __future__ import annotations

from typing import Any

from pytest_llmslo import regression
from pytest_llmslo.document import Results, build_document
from pytest_llmslo.report import markdown

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
    """The body rows of the first table after ``heading``, as cells."""
    lines = text.splitlines()
    start = lines.index(heading)
    rows, seen = [], False
    for line in lines[start + 1 :]:
        if line.startswith("|"):
            seen = True
            rows.append([c.strip() for c in line.strip("|").split(" | ")])
        elif seen:
            break
    return rows[2:]  # header and alignment rows


def test_report_has_constants_sweeps_knee_and_pareto(sweep_factory):
    points = sweep_factory("vllm") + sweep_factory("sglang", ttft=lambda c: 40.0 * c)
    results = Results.of(points, constants=CONSTANTS, engines={"vllm": {"version": "0.10.1"}})
    text = markdown.render_report(results)
    assert text.startswith("## pytest-llmslo sweep\n")
    assert "- **model**: llama-3.1-70b" in text
    assert "- **slo**: ttft_p99 < 500 ms, itl_p50 < 30 ms" in text
    assert "Engines: vllm 0.10.1" in text
    rows = table_rows(text, "### vllm · `test_chat` · concurrency sweep")
    assert [r[1].strip("*") for r in rows] == ["c1", "c4", "c8", "c16", "c32"]
    knee = results.sweeps()[0].knee.level
    assert knee is not None
    marked = [r for r in rows if r[0] == markdown.KNEE_MARK]
    assert len(marked) == 1
    assert marked[0][1] == f"**{knee.label}**"
    assert all(c.startswith("**") for c in marked[0][1:9])
    assert any("**FAIL** ttft_p99 < 500 ms" in r[-1] for r in rows)
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
    rows = table_rows(text, "### sim · `test_chat` · concurrency sweep")
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
    assert "| metric | baseline | new | delta | delta % | tolerance | status |" in text
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
