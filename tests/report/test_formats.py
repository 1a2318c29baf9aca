"""The report formats' registry: one entry gives a format's option, its writer and its
``llmslo report`` flag, and a format registered there is written by a session and by
``llmslo report`` with nothing else to change."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pytest_llmslo import cli
from pytest_llmslo import session as core
from pytest_llmslo import settings as S
from pytest_llmslo.document import Results, build_document, write_atomic
from pytest_llmslo.errors import ConfigError
from pytest_llmslo.report import formats
from pytest_llmslo.report.formats import FORMATS, Format
from pytest_llmslo.sweep import SweepPoint


def _tsv(results: Results) -> str:
    rows = [
        "engine\ttest\tlevel",
        *(f"{p.engine}\t{p.test}\t{p.level.label}" for p in results.points),
    ]
    return "\n".join(rows) + "\n"


def _bin(results: Results) -> bytes:
    return bytes([len(results.points), 0, 255])


@pytest.fixture
def throwaway() -> Iterator[tuple[Format, Format]]:
    """Two formats that exist only for the test: a text one and a binary one."""
    tsv = formats.register(Format("tsv", "TSV", _tsv, "also write a TSV table to PATH"))
    binary = formats.register(Format("bin", "binary", _bin, "also write bytes to PATH"))
    try:
        yield tsv, binary
    finally:
        formats.unregister("tsv")
        formats.unregister("bin")


def _session(tmp_path: Path, outputs: dict[str, str]) -> core.Session:
    """A session asked for ``outputs`` (setting name -> path), as an option of a format's
    own would ask for it."""
    settings = S.resolve_session(S.Sources())
    settings = dataclasses.replace(settings, outputs={**settings.outputs, **outputs})
    return core.Session(settings, S.Sources(), rootpath=tmp_path, invocation_dir=tmp_path)


def test_each_format_names_its_option_in_the_settings_table() -> None:
    assert list(FORMATS) == ["markdown", "svg", "csv", "html"]
    for fmt in FORMATS.values():
        spec = fmt.spec
        assert (spec.topic, spec.scope, spec.cli) == ("outputs", "session", fmt.flag)
    # Every output option but the results document's is a format's: a report option
    # without a writer (or a writer without its option) fails here.
    outputs = {s.name for s in S.SPECS if s.topic == "outputs"}
    assert outputs - {"slo_json"} == {f.option for f in FORMATS.values()}
    assert core.output_flags() == {
        "slo_json": "--slo-json",
        "slo_markdown": "--slo-markdown",
        "slo_svg": "--slo-svg",
        "slo_csv": "--slo-csv",
        "slo_html": "--slo-html",
    }
    markdown = FORMATS["markdown"]
    assert (markdown.option, markdown.report_flag, markdown.summary) == (
        "slo_markdown",
        "--markdown",
        True,
    )
    with pytest.raises(ValueError, match="registered already"):
        formats.register(markdown)


@pytest.mark.usefixtures("throwaway")
def test_a_registered_format_is_written_by_a_session(
    tmp_path: Path, sweep_factory: Callable[..., list[SweepPoint]]
) -> None:
    assert core.output_flags()["slo_tsv"] == "--slo-tsv"
    state = _session(tmp_path, {"slo_tsv": "out/run.tsv", "slo_bin": "run.bin"})
    points = sweep_factory("sim", levels=(1, 4))
    state.points.extend(points)
    core.write_reports(state, complete=True)
    assert state.write_errors == []
    assert (tmp_path / "out" / "run.tsv").read_text() == _tsv(state.results())
    assert (tmp_path / "run.bin").read_bytes() == bytes([2, 0, 255])
    assert f"TSV report written to {tmp_path / 'out' / 'run.tsv'}" in state.notes
    assert f"binary report written to {tmp_path / 'run.bin'}" in state.notes
    # Its path is checked with the others', before anything runs, under its flag.
    (tmp_path / "file").write_text("")
    bad = _session(tmp_path, {"slo_tsv": str(tmp_path / "file" / "x.tsv")})
    with pytest.raises(ConfigError, match="--slo-tsv"):
        core.check_inputs(bad)


@pytest.mark.usefixtures("throwaway")
def test_a_registered_format_is_made_by_llmslo_report(
    tmp_path: Path,
    sweep_factory: Callable[..., list[SweepPoint]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    results = Results.of(sweep_factory("sim", levels=(1, 4, 8)))
    run = write_atomic(tmp_path / "run.json", build_document(results))
    assert cli.main(["report", "--help"]) == 0
    help_text = capsys.readouterr().out
    assert "--tsv PATH" in help_text and "also write a TSV table to PATH" in help_text
    out = tmp_path / "r.tsv"
    code = cli.main(["report", str(run), "--tsv", str(out), "--bin", str(tmp_path / "r.bin")])
    assert code == 0
    assert out.read_text() == _tsv(Results.from_document(build_document(results)))
    assert (tmp_path / "r.bin").read_bytes() == bytes([3, 0, 255])
    assert "sim | test_chat" in capsys.readouterr().out  # the tables, as without it
