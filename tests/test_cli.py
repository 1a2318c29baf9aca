"""The ``llmslo`` command: report and compare, exit statuses, outputs, user errors."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_llmslo import cli, metrics, regression, slo
from pytest_llmslo.document import (
    SCHEMA,
    Results,
    build_document,
    compact_samples,
    read_document,
    write_atomic,
)
from pytest_llmslo.records import LoadLevel, RequestRecord, Run
from pytest_llmslo.regression import baselines
from pytest_llmslo.report import terminal
from pytest_llmslo.sweep import SweepPoint

MS = 1_000_000
OBJECTIVES = (slo.Objective("ttft", 99, "<", 600.0), slo.Objective("itl", 50, "<", 30.0))
CONSTANTS: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "precision": "fp8",
    "hardware": {"machine": "x86_64", "sim_profile": "h100"},
    "workload": {"kind": "synthetic", "isl": 512, "osl": 8},
    "isl": 512,
    "osl": 8,
    "slo": [o.to_dict() for o in OBJECTIVES],
}


def sweep_point(engine: str, c: int, scale: float, seed: int, n: int = 300) -> SweepPoint:
    """``n`` requests at concurrency ``c`` whose TTFT is ~ 80 ms x c x scale (noisy)."""
    rng = np.random.default_rng(seed)
    ttfts = np.abs(rng.normal(80.0 * c * scale, 8.0 * c, n))
    records, t = [], 0.0
    for i, ttft in enumerate(ttfts):
        chunks = tuple(int((t + ttft + k * 10.0) * MS) for k in range(8))
        records.append(
            RequestRecord(
                index=i,
                scheduled_ns=int(t * MS),
                sent_ns=int(t * MS),
                end_ns=chunks[-1],
                chunk_ns=chunks,
                chunk_tokens=(1,) * 8,
                first_content_ns=chunks[0],
                prompt_tokens=512,
                completion_tokens=8,
                status=200,
            )
        )
        t += (ttft + 70.0) / c  # c requests in flight
    level = LoadLevel.concurrency(c)
    run = Run(level, tuple(records), records[0].sent_ns, max(r.end_ns for r in records))
    summary = metrics.summarize(run, OBJECTIVES)
    verdict = slo.evaluate(run, OBJECTIVES)
    return SweepPoint(engine, "test_chat", level, summary, verdict, compact_samples(run))


def write_doc(
    path: Path,
    engines: Sequence[str] = ("vllm",),
    *,
    scale: float = 1.0,
    seed: int = 0,
    constants: dict[str, Any] | None = None,
    version: str = "0.9",
) -> Path:
    points = [
        sweep_point(e, c, scale, seed + 10 * i + c)
        for i, e in enumerate(engines)
        for c in (1, 4, 8)
    ]
    engine_entries = {e: {"version": version} for e in engines}
    results = Results.of(points, constants=constants or CONSTANTS, engines=engine_entries)
    return write_atomic(path, build_document(results))


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("docs")
    return {
        "base": write_doc(d / "base.json", ("vllm", "sglang")),
        "same": write_doc(d / "same.json", ("vllm", "sglang"), seed=1000, version="0.10"),
        "slow": write_doc(d / "slow.json", ("vllm", "sglang"), scale=1.5, seed=2000),
        "other": write_doc(d / "other.json", ("vllm",), constants={**CONSTANTS, "osl": 16}),
    }


def run(argv: Sequence[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# --------------------------------------------------------------------------- report


def test_report_prints_the_terminal_tables(docs, capsys):
    code, out, err = run(["report", docs["base"], "--width", "100"], capsys)
    assert code == 0 and err == ""
    expected = terminal.render_summary(Results.from_document(read_document(docs["base"])), 100)
    assert out.splitlines() == expected
    assert any(line.startswith("vllm | test_chat") for line in expected)
    assert any(line.startswith("Pareto | test_chat") for line in expected)


def test_report_writes_markdown_and_svg(docs, tmp_path, capsys):
    md, svg = tmp_path / "out" / "summary.md", tmp_path / "chart.svg"
    code, out, _ = run(["report", docs["base"], "--markdown", md, "--svg", svg], capsys)
    assert code == 0 and "vllm | test_chat" in out
    text = md.read_text()
    assert text.startswith("## pytest-llmslo sweep")
    assert "<details><summary><b>vllm</b> · <code>test_chat</code> · concurrency sweep" in text
    assert "### Pareto · `test_chat`" in text
    root = ET.fromstring(svg.read_bytes())
    assert root.tag == "{http://www.w3.org/2000/svg}svg"


def test_report_markdown_to_stdout(docs, capsys):
    code, out, _ = run(["report", docs["base"], "--markdown", "-"], capsys)
    assert code == 0
    assert out.startswith("## pytest-llmslo sweep")
    assert "TTFT p99" in out and "vllm | test_chat" not in out


def test_markdown_appends_to_the_github_step_summary(docs, tmp_path, capsys, monkeypatch):
    summary = tmp_path / "step_summary.md"
    summary.write_text("# earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert run(["report", docs["base"], "--markdown", summary], capsys)[0] == 0
    assert run(["compare", docs["base"], docs["same"], "--markdown", summary], capsys)[0] == 0
    text = summary.read_text()
    assert text.startswith("# earlier step\n")
    assert "## pytest-llmslo sweep" in text and "## pytest-llmslo comparison" in text


def test_markdown_replaces_a_plain_file_unless_append(docs, tmp_path, capsys):
    md = tmp_path / "s.md"
    md.write_text("old content\n")
    run(["report", docs["base"], "--markdown", md], capsys)
    assert "old content" not in md.read_text()
    run(["report", docs["base"], "--markdown", md, "--append"], capsys)
    assert md.read_text().count("## pytest-llmslo sweep") == 2


def test_report_of_a_document_without_points(tmp_path, capsys):
    path = write_atomic(tmp_path / "empty.json", build_document(Results.of([])))
    code, out, _ = run(["report", path], capsys)
    assert code == 0 and "no load level was measured" in out


# --------------------------------------------------------------------------- compare


def test_compare_unchanged_exits_0(docs, capsys):
    code, out, err = run(["compare", docs["base"], docs["same"], "--fail", "ttft_p50:25%"], capsys)
    assert code == 0, out
    assert out.startswith("llmslo compare: base -> same: ")
    assert "vllm | test_chat | c4" in out and "sglang | test_chat | c8" in out
    assert "6 points compared" in out
    assert err == ""


def test_compare_regression_exits_1_with_old_and_new(docs, capsys):
    code, out, _ = run(
        ["compare", docs["base"], docs["slow"], "--fail", "ttft_p50:10%,goodput:5%"], capsys
    )
    assert code == 1
    assert "REGRESSED" in out
    assert "ttft_p50" in out and "base" in out and "slow" in out
    base = Results.from_document(read_document(docs["base"]))
    old = regression.find_point(base, "test_chat", "vllm", "c4")
    assert old is not None
    assert f"{regression.metric_value(old, 'ttft_p50'):.1f} ms" in out


def test_compare_regression_is_reported_in_markdown_and_svg(docs, tmp_path, capsys):
    md, svg = tmp_path / "cmp.md", tmp_path / "cmp.svg"
    code, _, _ = run(
        ["compare", docs["base"], docs["slow"], "--fail", "ttft_p50:10%", "--markdown", md,
         "--svg", svg],
        capsys,
    )  # fmt: skip
    assert code == 1
    text = md.read_text()
    assert "❌ **regressed**" in text
    assert "| metric | base | slow | delta | delta % | tolerance | detectable | status |" in text
    assert "**REGRESSED**" in text
    root = ET.fromstring(svg.read_bytes())
    classes = [g.get("class") for g in root.iter("{http://www.w3.org/2000/svg}g")]
    assert "series baseline" in classes


def test_compare_mismatched_constants_exits_2(docs, capsys):
    code, out, _ = run(["compare", docs["base"], docs["other"]], capsys)
    assert code == 2
    assert "NOT COMPARABLE" in out
    assert "osl: 8 (base) != 16 (other)" in out


def test_compare_by_baseline_name(docs, tmp_path, capsys):
    root = tmp_path / "baselines"
    baselines.save_baseline(read_document(docs["base"]), "vllm-0.9", root=root)
    code, out, _ = run(["compare", "vllm-0.9", docs["slow"], "--root", root], capsys)
    assert code == 1
    assert out.startswith("llmslo compare: vllm-0.9 -> slow")


def test_compare_pairs_engines_explicitly(tmp_path, capsys):
    a = write_doc(tmp_path / "a.json", ("vllm-0.9", "x"))
    b = write_doc(tmp_path / "b.json", ("vllm-0.10", "x"), seed=1000)
    code, out, _ = run(
        ["compare", a, b, "--engine", "vllm-0.9=vllm-0.10", "--fail", "ttft_p50:25%"], capsys
    )
    assert code == 0
    assert "vllm-0.10 | test_chat | c1" in out and "x | test_chat | c1" in out
    assert "only in" not in out


def test_compare_same_file_twice_is_unchanged(docs, capsys):
    code, out, _ = run(["compare", docs["base"], docs["base"]], capsys)
    assert code == 0
    assert "base (baseline) -> base (new): UNCHANGED" in out


# --------------------------------------------------------------------------- user errors


@pytest.mark.parametrize(
    "argv, message",
    [
        (["report", "missing.json"], "missing.json: no such file"),
        (["compare", "missing.json", "x.json"], "missing.json: no such file"),
        (["compare", "nightly", "x.json"], "no baseline named 'nightly'"),
    ],
)
def test_missing_files_exit_2_without_traceback(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(argv, capsys)
    assert code == 2 and out == ""
    assert err.startswith("llmslo: error: ") and message in err
    assert "Traceback" not in err


def test_malformed_documents_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "pytest-llmslo/run"')
    code, _, err = run(["report", bad], capsys)
    assert code == 2 and "not valid JSON" in err
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"hello": 1}))
    code, _, err = run(["report", wrong], capsys)
    assert code == 2 and "not a pytest-llmslo run document" in err
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({"schema": SCHEMA, "schema_version": 99}))
    code, _, err = run(["report", newer], capsys)
    assert code == 2 and "schema version 99" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "the following arguments are required: COMMAND"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["compare", "a.json"], "the following arguments are required: NEW"),
        (["compare", "a.json", "b.json", "--fail", "latency:5%"], "Unknown metric 'latency'"),
        (["compare", "a.json", "b.json", "--fail", ","], "Expected METRIC:VALUE"),
        (["compare", "a.json", "b.json", "--engine", "vllm"], "Expected OLD=NEW"),
        (["report", "a.json", "--width", "10"], "at least 40 columns"),
    ],
)
def test_usage_errors_exit_2(argv, message, capsys):
    code, _, err = run(argv, capsys)
    assert code == 2
    assert message in err


def test_help_and_version_exit_0(capsys):
    code, out, _ = run(["--help"], capsys)
    assert code == 0 and "report" in out and "compare" in out
    code, out, _ = run(["--version"], capsys)
    assert code == 0 and out.startswith("llmslo ")
    code, out, _ = run(["compare", "--help"], capsys)
    assert code == 0 and "--fail" in out and "goodput:5%" in out


def test_unwritable_output_exits_2(docs, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, _, err = run(["report", docs["base"], "--svg", blocker / "x.svg"], capsys)
    assert code == 2 and err.startswith("llmslo: error: cannot write")


# --------------------------------------------------------------------------- subprocess


def test_console_entry_point_in_a_subprocess(docs, tmp_path):
    argv = [sys.executable, "-m", "pytest_llmslo.cli", "compare", str(docs["base"])]
    slow = subprocess.run(
        [*argv, str(docs["slow"]), "--fail", "ttft_p50:10%"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert slow.returncode == 1, slow.stderr
    assert "REGRESSED" in slow.stdout
    missing = subprocess.run(
        [*argv, str(tmp_path / "nope.json")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert missing.returncode == 2
    assert "no such file" in missing.stderr and "Traceback" not in missing.stderr


# --------------------------------------------------------------------------- capacity


def capacity_doc(path: Path, capacity: int, *, complete: bool = True) -> Path:
    from pytest_llmslo.capacity import CapacitySearch, CapacitySpec

    search = CapacitySearch(CapacitySpec("concurrency", max_value=16))
    while (level := search.next_level()) is not None:
        search.record(level, level.value <= capacity)
    points = [sweep_point("vllm", c, 1.0, c) for c in (1, 4, 8)]
    results = Results.of(
        points,
        constants=CONSTANTS,
        engines={"vllm": {"version": "0.9"}},
        complete=complete,
        capacities={("vllm", "test_chat"): search.result},
    )
    return write_atomic(path, build_document(results))


def test_report_shows_the_capacity_search(tmp_path, capsys):
    path = capacity_doc(tmp_path / "cap.json", 6)
    code, out, _ = run(["report", path, "--width", "100"], capsys)
    assert code == 0
    assert "capacity: c6 (c7 failed), 6 levels: bracketed to the resolution" in out
    assert "probes: c1 pass, c2 pass, c4 pass, c8 FAIL, c6 pass, c7 FAIL" in out
    code, out, _ = run(["report", path, "--markdown", "-"], capsys)
    assert code == 0 and "Capacity: **c6** (c7 failed)" in out


def test_compare_fails_on_a_capacity_drop(tmp_path, capsys):
    old = capacity_doc(tmp_path / "old.json", 8)
    new = capacity_doc(tmp_path / "new.json", 6)
    code, out, _ = run(["compare", old, new, "--fail", "ttft_p50:1000%"], capsys)
    assert code == 1
    assert "capacity" in out and "REGRESSED" in out
    code, out, _ = run(["compare", old, old, "--fail", "ttft_p50:1000%"], capsys)
    assert code == 0


def test_compare_warns_about_an_incomplete_baseline(tmp_path, capsys):
    old = capacity_doc(tmp_path / "old.json", 8, complete=False)
    new = capacity_doc(tmp_path / "new.json", 8)
    code, out, _ = run(["compare", old, new, "--fail", "ttft_p50:1000%"], capsys)
    assert code == 0
    assert "warning: old is incomplete (its session was interrupted)" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--concurrency", "abc"],
        ["run", "--no-such-option"],
        ["run", "--slo-confidence"],
        ["report"],
    ],
)
def test_usage_errors_are_one_line(argv, capsys):
    code, out, err = run(argv, capsys)
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()  # not argparse's usage block (~40 lines for run)
    assert line.startswith("llmslo") and ": error: " in line and line.endswith("--help)")


# --------------------------------------------------------------------------- several runs


def test_report_shows_several_runs_side_by_side_in_html(docs, tmp_path, capsys):
    out = tmp_path / "runs.html"
    code, text, err = run(
        ["report", docs["base"], docs["same"], docs["slow"], "--html", out, "--width", "100"],
        capsys,
    )
    assert code == 0 and err == ""
    # The text is the first run's, as with one file.
    single = terminal.render_summary(Results.from_document(read_document(docs["base"])), 100)
    assert text.splitlines() == single
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "<h3>Runs side by side</h3>" in page
    assert 'data-compared="same"' in page and 'data-compared="slow"' in page
    # Each of base's six levels is compared with both other runs; against the slower run
    # base improved.
    assert page.count('<table class="compare">') == 2 * 6
    assert re.search(
        r'data-compared="slow">against slow: 6 levels compared, 0 regressed, [1-6] improved', page
    )


def test_report_one_run_in_html_has_no_comparison(docs, tmp_path, capsys):
    out = tmp_path / "one.html"
    code, _, _ = run(["report", docs["base"], "--html", out], capsys)
    assert code == 0
    page = out.read_text()
    assert 'data-chart="' in page and "Runs side by side" not in page


@pytest.mark.parametrize(
    ("formats", "message"),
    [
        (
            ["--markdown", "x.md"],
            "several run documents are shown only by --html, not by --markdown",
        ),
        (["--html", "x.html", "--csv", "x.csv"], "not by --csv"),
        ([], "several run documents are shown only by --html"),
    ],
)
def test_several_runs_in_a_format_that_shows_one_is_a_usage_error(
    docs, tmp_path, capsys, monkeypatch, formats, message
):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(["report", docs["base"], docs["same"], *formats], capsys)
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("llmslo: error: ") and message in line
    assert not list(tmp_path.iterdir())  # nothing written


def test_compare_writes_the_html_report_of_both_runs(docs, tmp_path, capsys):
    out = tmp_path / "cmp.html"
    code, _, _ = run(["compare", docs["base"], docs["slow"], "--html", out], capsys)
    assert code == 1  # a regression; the report is written all the same
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "<h3>Runs side by side</h3>" in page and 'data-compared="' in page


def test_compare_help_names_html(capsys):
    code, out, _ = run(["compare", "--help"], capsys)
    assert code == 0 and "--html PATH" in out
