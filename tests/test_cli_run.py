"""``llmslo run``: a sweep without a test file, through the same session core as the
plugin, against the fixed-timing server (TTFT 20 ms, 2 ms per token) on loopback."""

from __future__ import annotations

import csv
import io
import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_llmslo import cli
from pytest_llmslo.document import validate_document
from pytest_llmslo.report import csvexport


def _run(url: str, *extra: str) -> list[str]:
    return [
        "run", "--engine", "external", "--engine-url", url,
        "--concurrency", "1,2", "--requests", "8", "--warmup", "1", "--isl", "16", "--osl", "8",
        "--client-max-lag", "2000", "--client-max-cpu", "1.5",
        *extra,
    ]  # fmt: skip


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_run_meets_the_slo_and_writes_json_csv_markdown(fixed_server, in_tmp, capsys) -> None:
    code = cli.main(
        _run(
            fixed_server,
            "--slo",
            "ttft_p99<500,itl_p50<30",
            "--slo-json",
            "out/run.json",
            "--slo-csv",
            "out/run.csv",
            "--slo-markdown",
            "out/run.md",
        )
    )
    out, err = capsys.readouterr()
    assert code == cli.EXIT_OK, err
    # The plugin's sweep table and knee.
    assert "external | llmslo-run | concurrency sweep, 2 levels" in out
    assert "* knee: c2" in out
    assert "results written to" in out

    doc = json.loads((in_tmp / "out" / "run.json").read_text())
    validate_document(doc)
    assert [p["level"]["value"] for p in doc["points"]] == [1.0, 2.0]
    assert all(p["outcome"] == "pass" for p in doc["points"])
    assert doc["constants"]["tests"]["llmslo-run"]["isl"] == 16
    assert doc["reports"][0]["results_at_knee"]["concurrency"] == 2

    rows = list(csv.DictReader(io.StringIO((in_tmp / "out" / "run.csv").read_text())))
    assert [r["label"] for r in rows] == ["c1", "c2"]
    assert [r["knee"] for r in rows] == ["0", "1"]
    assert rows[1]["outcome"] == "pass" and rows[1]["engine"] == "external"
    assert 15.0 < float(rows[1]["ttft_p50_ms"]) < 200.0
    assert float(rows[1]["output_tok_s"]) > 0 and float(rows[1]["goodput_tok_s"]) > 0
    assert list(rows[0]) == list(csvexport.COLUMNS)

    md = (in_tmp / "out" / "run.md").read_text()
    assert "llmslo-run" in md and "knee" in md.lower()


def test_run_exits_1_when_a_level_misses_the_slo(fixed_server, in_tmp, capsys) -> None:
    code = cli.main(_run(fixed_server, "--slo", "ttft_p99<1"))
    out, err = capsys.readouterr()
    assert code == cli.EXIT_FAILED
    assert "FAIL" in out
    assert "FAILED external c1: SLO not met: ttft_p99 < 1 ms" in err
    assert "no SLO was asserted" not in out


def test_run_judges_quality_objectives_on_the_eval_answers(fixed_server, in_tmp, capsys) -> None:
    # The fixed server answers filler words: every arithmetic item is wrong, and 8 items
    # are enough to show that accuracy misses 50 %.
    argv = _run(fixed_server, "--slo-eval", "arithmetic", "--slo-quality", "accuracy>=0.5")
    code = cli.main([*argv, "--slo-json", "r.json"])
    _, err = capsys.readouterr()
    assert code == cli.EXIT_FAILED
    assert "quality objectives missed on the arithmetic eval: accuracy >= 0.5: 0/8 right" in err
    quality = json.loads((in_tmp / "r.json").read_text())["points"][0]["quality"]
    assert quality["verdict"]["outcome"] == "fail" and quality["items"] == 8


def test_run_without_objectives_is_gated_by_errors(misbehaving, in_tmp, capsys) -> None:
    # Every request fails: no level passes the error gate, whatever the objectives.
    url = misbehaving("reset")
    code = cli.main(_run(url, "--concurrency", "1", "--requests", "4"))
    _out, err = capsys.readouterr()
    assert code == cli.EXIT_FAILED
    assert "FAILED external c1" in err


def test_run_compares_two_engines_with_a_pareto_summary(fixed_server, in_tmp, capsys) -> None:
    (in_tmp / "engines.toml").write_text(
        f'[engines.a]\nkind = "external"\nurl = "{fixed_server}"\n'
        f'[engines.b]\nkind = "external"\nurl = "{fixed_server}"\n'
    )
    code = cli.main(
        _run(
            fixed_server,
            "--engine-config",
            "engines.toml",
            "--engine",
            "a,b",
            "--slo",
            "ttft_p99<500",
        )
    )
    out, _err = capsys.readouterr()
    assert code == cli.EXIT_OK
    assert "a | llmslo-run" in out and "b | llmslo-run" in out
    assert "Pareto | llmslo-run" in out


def test_run_with_an_engine_that_does_not_start_exits_1(in_tmp, capsys) -> None:
    # Port 9 (discard) on loopback: nothing answers there.
    code = cli.main(["run", "--engine", "external", "--engine-url", "http://127.0.0.1:9"])
    _out, err = capsys.readouterr()
    assert code == cli.EXIT_FAILED
    assert "FAILED engine 'external' did not start: external: nothing answers at" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "--engine", "nope"], "'nope' is not a known engine"),
        (["run", "--concurrency", "abc"], "--concurrency"),
        (["run", "--engine", "external"], "needs a URL"),
        (["run", "--slo-capacity"], "has no objectives to search the capacity for"),
        (["run", "--dataset", "missing.json"], "missing.json"),
    ],
)
def test_run_usage_errors_exit_2(argv, message, in_tmp, capsys) -> None:
    assert cli.main(argv) == cli.EXIT_USAGE
    _out, err = capsys.readouterr()
    assert message in err
    assert "Traceback" not in err


def test_run_and_the_plugin_share_every_option() -> None:
    from pytest_llmslo import settings as S

    parser = cli.build_parser()
    run = next(a for a in parser._subparsers._group_actions[0].choices.items() if a[0] == "run")[1]
    flags = {opt for action in run._actions for opt in action.option_strings}
    for spec in S.SPECS:
        if spec.cli:
            assert spec.cli in flags, spec.cli


def test_run_with_an_engine_url_alone_measures_that_url(fixed_server, in_tmp, capsys) -> None:
    argv = [a for a in _run(fixed_server) if a not in ("--engine", "external")]
    assert "--engine" not in argv
    code = cli.main([*argv, "--slo-json", "run.json"])
    out, err = capsys.readouterr()
    assert code == cli.EXIT_OK, err
    assert f"llmslo: llmslo-run: external ({fixed_server}) x c1,c2;" in err
    assert "external | llmslo-run | concurrency sweep, 2 levels" in out
    # Measured, judged by no SLO: it says so, and how to add one.
    assert "llmslo: no SLO was asserted: the levels were measured and judged by their" in out
    assert "--slo 'ttft_p99<500,itl_p50<30'" in out
    assert "measuring the built-in simulator" not in err
    doc = json.loads((in_tmp / "run.json").read_text())
    assert doc["engines"]["external"]["metadata"]["base_url"] == fixed_server


def test_run_prints_the_plan_and_then_the_estimate(fixed_server, in_tmp, capsys) -> None:
    assert cli.main(_run(fixed_server)) == cli.EXIT_OK
    _out, err = capsys.readouterr()
    plan = err.index("llmslo: plan: 2 levels (1 test, 1 engine); each level 1 warm-up")
    first = err.index("llmslo external c1: 8/8 requests ok")
    estimate = err.index("llmslo: estimate: c1 took ")
    second = err.index("llmslo external c2: 8/8 requests ok")
    assert plan < first < estimate < second
    assert "the 1 level left take about" in err


def test_run_defaults_bound_each_level_in_time(in_tmp, capsys) -> None:
    # The plugin's 200 + 500 requests per level made the README's example a 40-minute run.
    code = cli.main(["run", "--engine", "external", "--engine-url", "http://127.0.0.1:9"])
    _out, err = capsys.readouterr()
    assert code == cli.EXIT_FAILED
    assert (
        "llmslo: plan: 7 levels (1 test, 1 engine); each level 20 warm-up requests (at least "
        "one wave of a closed loop), then up to 500 measured requests or 30 s;" in err
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "--engine", "sim", "--engine-url", "http://127.0.0.1:9"], "none of them external"),
        (["run", "--engine-url", "localhost:8000"], "e.g. http://localhost:8000"),
        (["run", "--concurrency", "1,,2"], "An item is empty"),
        (["run", "--rate", "1", "--max-concurrency", "0"], "A cap of 0 lets no request start"),
        (["run", "--sim-profile", "llama-9000"], "'llama-9000' is not a sim profile. Profiles: "),
        (["run", "--slo-json", "/proc/llmslo-run.json"], "/proc/llmslo-run.json cannot be written"),
        (["run", "--slo-markdown", "/proc/x/run.md"], "/proc/x/run.md cannot be written"),
        (["run", "--tokenizer", "/nonexistent/tok"], "--tokenizer: tokenizer file not found"),
    ],
)
def test_run_refuses_a_typo_before_anything_starts(argv, message, in_tmp, capsys) -> None:
    assert cli.main(argv) == cli.EXIT_USAGE
    out, err = capsys.readouterr()
    assert message in err
    assert len(err.strip().splitlines()) == 1, err  # one line, no usage block or traceback
    assert "starting engine" not in out + err


def test_run_names_the_setting_a_mistyped_variable_meant(in_tmp, capsys, monkeypatch) -> None:
    monkeypatch.setenv("LLMSLO_CONCURENCY", "4")
    assert cli.main(["run"]) == cli.EXIT_USAGE
    _out, err = capsys.readouterr()
    assert (
        "LLMSLO_CONCURENCY is set, but no setting reads it: did you mean LLMSLO_CONCURRENCY?" in err
    )


def test_run_help_shows_the_common_options_then_each_topic_by_name(capsys) -> None:
    assert cli.main(["run", "--help"]) == cli.EXIT_OK
    out, _err = capsys.readouterr()
    from pytest_llmslo import settings as S

    assert len(out.splitlines()) <= 120
    assert "Default: None" not in out
    assert "llmslo_" not in out and "Ini:" not in out  # run reads no ini file
    assert "Without --engine it measures the built-in" in out
    flat = " ".join(out.split())
    assert "--duration DURATION The window in which each level's requests are sent (90s, 5m" in flat
    assert "Env: LLMSLO_DURATION. Default: 30." in flat
    # Every other option is named under its topic.
    for _topic, title, specs in S.help_sections("run"):
        if _topic != "common":
            assert title in flat
            assert all(f" {spec.cli}" in flat for spec in specs), title
    assert "llmslo run --help-all" in flat


def test_run_help_all_shows_every_option_in_full(capsys) -> None:
    assert cli.main(["run", "--help-all"]) == cli.EXIT_OK
    out, _err = capsys.readouterr()
    flat = " ".join(out.split())
    assert "env LLMSLO_WARMUP; also --slo-warmup; default 20." in flat
    assert "env LLMSLO_MIN_ATTAINMENT; default 0.9." in flat
    assert "env LLMSLO_CLIENT_MAX_LAG; also --slo-client-max-lag; default 10 ms." in flat


def test_run_takes_the_plugins_spelling_too() -> None:
    from pytest_llmslo import settings as S

    args = cli.build_parser().parse_args(
        ["run", "--slo-duration", "1m", "--slo-engine", "a", "--engine", "b"]
    )
    given = S.given_cli(lambda d: getattr(args, d, S.UNSET))
    assert given["duration"] == 60.0
    assert [name for names in given["engine"] for name in names] == ["a", "b"]


def test_run_refuses_a_baseline_that_cannot_be_saved(in_tmp, capsys) -> None:
    # The baselines' folder is a file: the baseline could only fail at the end of the run.
    (in_tmp / ".llmslo").write_text("")
    assert cli.main(["run", "--slo-save", "nightly"]) == cli.EXIT_USAGE
    _out, err = capsys.readouterr()
    assert "--slo-save: " in err and "nightly.json cannot be created" in err


def test_two_runs_leave_two_entries_in_the_history(fixed_server, in_tmp, capsys) -> None:
    for _ in range(2):
        assert cli.main(_run(fixed_server, "--concurrency", "1")) == cli.EXIT_OK
    out, _err = capsys.readouterr()
    assert out.count("kept in the run history (") == 2
    assert cli.main(["history"]) == cli.EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["run", "time"]
    assert len(lines) == 3 and all("external" in line for line in lines[1:])
    assert cli.main(["compare", "latest~1", "latest"]) in (cli.EXIT_OK, cli.EXIT_REGRESSED)
    out = capsys.readouterr().out
    assert "llmslo compare: latest~1 -> latest" in out
    assert "external | llmslo-run | c1" in out
    assert len(list((in_tmp / ".llmslo" / "runs").glob("*.json"))) == 2


def _after_first_level(monkeypatch: pytest.MonkeyPatch, then: Callable[[], None]) -> None:
    """``then()`` once the sweep's first level is measured and judged."""
    from pytest_llmslo import session as core

    load_test = core.load_test
    calls: list[int] = []

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            then()
        return load_test(*args, **kwargs)

    monkeypatch.setattr(core, "load_test", wrapped)


def test_a_signal_between_levels_stops_the_sweep_with_the_first_level_kept(
    fixed_server, in_tmp, capsys, monkeypatch
) -> None:
    _after_first_level(monkeypatch, lambda: signal.raise_signal(signal.SIGTERM))
    code = cli.main(_run(fixed_server, "--slo-json", "run.json"))
    _out, err = capsys.readouterr()
    assert code == cli.EXIT_INTERRUPTED, err
    assert "interrupted (SIGTERM)" in err and "Traceback" not in err
    doc = json.loads((in_tmp / "run.json").read_text())
    assert doc["complete"] is False
    (point,) = doc["points"]  # the second level's load was cut before it sent anything
    assert point["level"]["value"] == 1.0 and point["interrupted"] is False


def test_a_crash_in_the_sweep_still_writes_what_was_measured(
    fixed_server, in_tmp, capsys, monkeypatch
) -> None:
    def crash() -> None:
        raise RuntimeError("a bug in the harness")

    _after_first_level(monkeypatch, crash)
    with pytest.raises(RuntimeError, match="a bug in the harness"):
        cli.main(_run(fixed_server, "--slo-json", "run.json"))
    doc = json.loads((in_tmp / "run.json").read_text())
    assert doc["complete"] is False
    assert [p["level"]["value"] for p in doc["points"]] == [1.0]


def test_a_misspelt_option_or_engine_names_the_closest(capsys) -> None:
    assert cli.main(["run", "--concurency", "2"]) == cli.EXIT_USAGE
    _out, err = capsys.readouterr()
    assert "unrecognized arguments: --concurency 2 (did you mean --concurrency?)" in err
    assert cli.main(["run", "--engine", "vlm", "--concurrency", "1"]) == cli.EXIT_USAGE
    _out, err = capsys.readouterr()
    assert "'vlm' is not a known engine (did you mean 'vllm'?)" in err


def test_run_without_an_engine_says_it_measures_the_sim(in_tmp, capsys) -> None:
    argv = ["run", "--concurrency", "1", "--requests", "1", "--warmup", "0", "--osl", "1"]
    cli.main([*argv, "--isl", "8", "--client-max-lag", "5000", "--client-min-load", "0"])
    _out, err = capsys.readouterr()
    assert "llmslo: no --engine given: measuring the built-in simulator (sim, no GPU)" in err
