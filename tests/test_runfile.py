"""Run files (``settings/runfile.py``): a sweep written down once in TOML or YAML, the same
settings as its command line, errors that name the file, the line and the key."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from pytest_llmslo import cli
from pytest_llmslo import settings as S
from pytest_llmslo.errors import ConfigError

ARGV = [
    "run", "--engine", "sim", "--concurrency", "1,4", "--duration", "1m", "--warmup", "10",
    "--isl", "1Ki", "--osl", "64", "--slo", "ttft_p99<500,itl_p50<30", "--slo-strict",
    "--header", "X-Team: infra", "--slo-html", "report.html", "--arrival", "gamma",
]  # fmt: skip

TOML = """\
# The nightly sweep, reviewed like code.
engine = "sim"
slo = ["ttft_p99 < 500", "itl_p50 < 30"]
slo_strict = true
slo-html = "report.html"
header = ["X-Team: infra"]

[load]
concurrency = [1, 4]
duration = "1m"
warmup = 10
arrival = "gamma"

[workload]
isl = "1Ki"
osl = 64
"""

YAML = """\
engine: sim
slo: ttft_p99<500, itl_p50<30
slo_strict: true
slo_html: report.html
header: ["X-Team: infra"]
load:
  concurrency: [1, 4]
  duration: 1m
  warmup: 10
  arrival: gamma
workload: {isl: 1Ki, osl: 64}
"""


def _resolved(sources: S.Sources) -> tuple[Any, Any]:
    session = S.resolve_session(sources)
    test = S.resolve_test(sources, S.split_marker((), {}, "t"), "t")
    return (
        dataclasses.replace(session, sources={}, warnings=()),
        dataclasses.replace(test, sources={}),
    )


def _cli_sources(argv: list[str]) -> S.Sources:
    args = cli.build_parser().parse_args(argv)
    return S.Sources(cli=S.given_cli(lambda d: getattr(args, d, S.UNSET)), env={})


@pytest.mark.parametrize(("name", "text"), [("slo.toml", TOML), ("slo.yaml", YAML)])
def test_a_run_file_reproduces_the_command_line_sweep(tmp_path: Path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    from_file = S.Sources(env={}, file=S.read_run_file(path))
    assert _resolved(from_file) == _resolved(_cli_sources(ARGV))
    _session, test = _resolved(from_file)
    assert [lv.label for lv in test.levels] == ["c1", "c4"]
    assert test.duration_s == 60.0 and test.isl == 1024 and test.strict is True


def test_the_command_line_overrides_the_file_and_the_source_is_named(tmp_path: Path):
    path = tmp_path / "slo.toml"
    path.write_text(TOML)
    sources = _cli_sources(["run", "--osl", "32", "-f", str(path)])
    sources = dataclasses.replace(sources, file=S.read_run_file(path))
    test = S.resolve_test(sources, S.split_marker((), {}, "t"), "t")
    assert test.osl == 32 and test.isl == 1024
    assert test.sources["osl"] == "--osl"
    assert test.sources["isl"] == f"run file {path}:15 isl"
    # The environment is above the file too.
    sources = dataclasses.replace(sources, env={"LLMSLO_ISL": "16"})
    assert S.resolve_test(sources, S.split_marker((), {}, "t"), "t").isl == 16


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("a.toml", "engine = 'sim'\nconcurency = [1]\n",
         r"a.toml:2: unknown key 'concurency' \(did you mean 'concurrency'\?\)"),
        ("a.yaml", "load:\n  concurrency: [1]\n  duration: 5x\n",
         r"a.yaml:3: duration: Could not parse duration: '5x'"),
        ("a.toml", "[load]\nconcurrency = [1, 0]\n",
         r"a.toml:2: concurrency: .*Levels must be > 0"),
        ("a.yaml", "engine: !!python/object/apply:os.system ['true']\n", r"a.yaml: could not"),
        ("a.yaml", "- 1\n- 2\n", "expected a table of settings"),
        ("a.toml", "engine = \n", r"a.toml: .*line 1"),
        ("a.json", "{}", "give a .toml, .yaml or .yml file"),
        ("a.yaml", "engines:\n  x: {kind: sim}\n", "read from TOML only"),
    ],
)  # fmt: skip
def test_errors_name_the_file_line_and_key(tmp_path: Path, name: str, text: str, message: str):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        S.read_run_file(path)


def test_a_huge_or_missing_file_is_refused(tmp_path: Path):
    big = tmp_path / "big.toml"
    big.write_text("# " + "x" * (2 * 1024 * 1024))
    with pytest.raises(ConfigError, match="larger than"):
        S.read_run_file(big)
    with pytest.raises(ConfigError, match="cannot be read"):
        S.read_run_file(tmp_path / "none.toml")


def test_engine_tables_make_the_file_the_engine_config(tmp_path: Path):
    path = tmp_path / "slo.toml"
    path.write_text('engine = "mine"\n[engines.mine]\nkind = "sim"\n')
    file = S.read_run_file(path)
    assert file.values["engine_config"] == str(path)
    session = S.resolve_session(S.Sources(env={}, file=file))
    assert session.engines == ("mine",)


def test_pyproject_tool_llmslo_is_a_run_file(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.llmslo]\nconcurrency = [2]\n[tool.llmslo.engines.x]\nkind = "sim"\n'
    )
    file = S.pyproject_run_file(tmp_path)
    assert file is not None and file.values == {"concurrency": (2,)}
    (tmp_path / "pyproject.toml").write_text('[tool.llmslo.engines.x]\nkind = "sim"\n')
    assert S.pyproject_run_file(tmp_path) is None


def test_llmslo_config_prints_each_setting_with_its_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    path = tmp_path / "slo.toml"
    path.write_text(TOML)
    monkeypatch.setenv("LLMSLO_SEED", "7")
    assert cli.main(["config", "-f", str(path), "--osl", "32"]) == cli.EXIT_OK
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert lines["--concurrency"].endswith(f"1,4  (run file {path}:9 concurrency)")
    assert lines["--osl"].split()[1:] == ["32", "(--osl)"]
    assert lines["--seed"].split()[1:] == ["7", "(LLMSLO_SEED)"]
    assert lines["--request-timeout"].endswith("600  (default)")
    bad = tmp_path / "bad.toml"
    bad.write_text("requests = 'lots'\n")
    assert cli.main(["config", "-f", str(bad)]) == cli.EXIT_USAGE
    assert "run file" in capsys.readouterr().err


def test_a_marker_load_beats_the_default_and_the_file_beats_the_marker(tmp_path: Path):
    def levels(file: S.RunFile | None) -> list[str]:
        sources = S.Sources(env={}, file=file)
        test = S.resolve_test(sources, S.split_marker((), {"rate": [2]}, "t"), "t")
        return [lv.label for lv in test.levels]

    assert levels(None) == ["r2"]
    path = tmp_path / "slo.toml"
    path.write_text("concurrency = [3]\n")
    assert levels(S.read_run_file(path)) == ["c3"]
