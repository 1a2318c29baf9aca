"""Options, ini keys, markers and the UsageErrors for bad values (pytester, subprocess)."""

from __future__ import annotations

import pytest

INI = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"

CHAT = """
import pytest
from pytest_llmslo import assert_goodput, ttft_p99

@pytest.mark.slo(concurrency=[1, 4, 8])
def test_chat(slo_run):
    assert_goodput(ttft_p99 < 500)

def test_plain():
    pass
"""


def test_help_lists_the_common_options_first_then_each_topic(
    slo_pytester: pytest.Pytester,
) -> None:
    result = slo_pytester.runpytest_subprocess("--help")
    result.stdout.fnmatch_lines(
        [
            "pytest-llmslo the options most runs need (every option in full: "
            "pytest --slo-help-all):",
            "*--slo-help-all*",
            "*--slo-engine=NAME*",
            "*--slo-concurrency=N*",
            "pytest-llmslo engines (what is measured):",
            "*--slo-sim-profile=NAME*",
            "*Default: llama3-70b-fp8-4xh100-vllm.",
            "pytest-llmslo load (levels, arrivals, request counts):",
            "*--slo-warmup=N*Default: 200.",
            "pytest-llmslo client health (when the load generator was the bottleneck):",
            "*--slo-client-max-lag=MS*",
            "pytest-llmslo regression (baselines):",
            "*--slo-compare-fail=SPEC*",
        ]
    )
    out = result.stdout.str()
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("pytest-llmslo "))
    last = max(i for i, line in enumerate(lines) if "--slo" in line or "pytest-llmslo" in line)
    # The plugin's part of pytest --help: the groups and their options, no ini key.
    assert last - first < 200, lines[first : last + 1]
    assert "llmslo_concurrency (string)" not in out
    text = " ".join(out.split())
    assert "Default: None" not in text
    # Every option is under the one prefix (--slo itself is the objectives').
    flags = {w.split("=")[0] for w in text.split() if w.startswith("--") and "slo" in w}
    assert all(f == "--slo" or f.startswith("--slo-") for f in flags), flags
    assert "--duration=" not in text and "--engine=" not in text


def test_help_all_prints_every_option_with_its_names(slo_pytester: pytest.Pytester) -> None:
    from pytest_llmslo import settings as S

    result = slo_pytester.runpytest_subprocess("--slo-help-all")
    assert result.ret == 0
    text = " ".join(result.stdout.str().split())
    for spec in S.SPECS:
        if spec.cli:
            assert f"{spec.option} " in text and f"ini {spec.ini};" in text, spec.name
    assert "ini llmslo_min_attainment; env LLMSLO_MIN_ATTAINMENT; marker min_attainment=; " in text
    assert "old spelling --duration (deprecated); default none." in text


@pytest.mark.slow
def test_an_old_spelling_works_and_warns_with_the_new_one(slo_pytester: pytest.Pytester) -> None:
    slo_pytester.makepyfile(test_ids=CHAT)
    result = slo_pytester.runpytest_subprocess(
        "--collect-only", "-q", "--engine=sim", "--slo-engine=vllm", "--concurrency=2",
        "--slo-osl=16", "--osl=9",
    )  # fmt: skip
    # Either spelling, the last one given wins, as with one spelling.
    assert " osl=9 " in result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "test_ids.py::test_chat[[]sim-c2]",
            "test_ids.py::test_chat[[]vllm-c2]",
            "*PytestDeprecationWarning: --engine is deprecated: use --slo-engine*",
            "*PytestDeprecationWarning: --concurrency is deprecated: use --slo-concurrency*",
        ]
    )
    new = slo_pytester.runpytest_subprocess("--collect-only", "-q", "--slo-concurrency=2")
    new.stdout.fnmatch_lines(["test_ids.py::test_chat[[]sim-c2]"])
    assert "deprecated" not in new.stdout.str()


def test_ids_are_engine_and_level(slo_pytester: pytest.Pytester) -> None:
    slo_pytester.makepyfile(test_ids=CHAT)
    result = slo_pytester.runpytest_subprocess("--collect-only", "-q", "--engine=sim,vllm")
    result.stdout.fnmatch_lines(
        [
            "test_ids.py::test_chat[[]sim-c1]",
            "test_ids.py::test_chat[[]sim-c4]",
            "test_ids.py::test_chat[[]sim-c8]",
            "test_ids.py::test_chat[[]vllm-c1]",
            "test_ids.py::test_chat[[]vllm-c4]",
            "test_ids.py::test_chat[[]vllm-c8]",
            "test_ids.py::test_plain",
        ]
    )


def test_repeated_engine_and_rate_ids(slo_pytester: pytest.Pytester) -> None:
    slo_pytester.makepyfile(test_ids=CHAT)
    result = slo_pytester.runpytest_subprocess(
        "--collect-only", "-q", "--engine=sim", "--engine=trtllm", "--rate=0.5,2"
    )
    result.stdout.fnmatch_lines(
        [
            "test_ids.py::test_chat[[]sim-r0.5]",
            "test_ids.py::test_chat[[]sim-r2]",
            "test_ids.py::test_chat[[]trtllm-r0.5]",
            "test_ids.py::test_chat[[]trtllm-r2]",
        ]
    )


def test_other_parametrization_is_kept(slo_pytester: pytest.Pytester) -> None:
    slo_pytester.makepyfile(
        test_p="""
        import pytest

        @pytest.mark.parametrize("prompt", ["short", "long"])
        @pytest.mark.slo(concurrency=[2])
        def test_chat(slo_level, prompt):
            pass
        """
    )
    result = slo_pytester.runpytest_subprocess("--collect-only", "-q")
    result.stdout.fnmatch_lines(["*test_chat[[]*sim-c2*short*]", "*test_chat[[]*sim-c2*long*]"])


def test_marker_selects_slo_tests(slo_pytester: pytest.Pytester) -> None:
    slo_pytester.makepyfile(
        test_m="""
        def test_uses_fixture(slo_level):
            pass

        def test_plain():
            pass
        """
    )
    result = slo_pytester.runpytest_subprocess("--collect-only", "-q", "-m", "slo")
    result.stdout.fnmatch_lines(["*test_uses_fixture[[]sim-c1]", "*7/8 tests collected*"])


def test_ini_and_env_and_cli_precedence(slo_pytester: pytest.Pytester) -> None:
    slo_pytester.makefile(".ini", pytest=INI + "llmslo_concurrency = 3,5\nllmslo_isl = 64\n")
    slo_pytester.makepyfile(
        test_p="""
        import pytest

        @pytest.mark.slo(concurrency=[1], isl=32, osl=16)
        def test_settings(slo_settings):
            print("LEVELS", [lv.label for lv in slo_settings.levels])
            print("ISL", slo_settings.isl, slo_settings.sources["isl"])
            print("OSL", slo_settings.osl, slo_settings.sources["osl"])
        """
    )
    # ini over marker
    result = slo_pytester.runpytest_subprocess("-s", "-q", "--collect-only")
    result.stdout.fnmatch_lines(["*test_settings[[]sim-c3]*", "*test_settings[[]sim-c5]*"])
    result = slo_pytester.runpytest_subprocess("-s", "-q", "-k", "c3")
    result.stdout.fnmatch_lines(["ISL 64 ini llmslo_isl", "OSL 16 @pytest.mark.slo(osl=...)*"])
    # env over ini, CLI over env
    slo_pytester._monkeypatch.setenv("LLMSLO_ISL", "128")
    result = slo_pytester.runpytest_subprocess("-s", "-q", "-k", "c3")
    result.stdout.fnmatch_lines(["ISL 128 LLMSLO_ISL"])
    result = slo_pytester.runpytest_subprocess("-s", "-q", "--isl=256", "--concurrency=7")
    result.stdout.fnmatch_lines(["LEVELS ['c7']", "ISL 256 --isl"])


@pytest.mark.slow
def test_client_settings_reach_the_load_generator(slo_pytester: pytest.Pytester) -> None:
    # pin_output, transport and api_key_env from the marker and the command line end up in
    # the requests the load generator sends (its client settings are in the run's meta).
    slo_pytester.makepyfile(
        test_c="""
        import pytest

        @pytest.mark.slo(concurrency=[1], pin_output=False, api_key_env="MY_KEY")
        def test_client(slo_run):
            c = slo_run.meta["client"]
            print("CLIENT", c["ignore_eos"], c["transport"], c["api_key_env"])
            assert all(r.ok for r in slo_run.records)
        """
    )
    args = ("-s", "-q", "-p", "no:cacheprovider", "--warmup=0", "--requests=3", "--osl=8")
    result = slo_pytester.runpytest_subprocess(*args, "--transport=httpx")
    result.stdout.fnmatch_lines(["CLIENT False httpx MY_KEY"])
    result.assert_outcomes(passed=1)
    result = slo_pytester.runpytest_subprocess(*args, "--pin-output=true", "--api-key-env=")
    result.stdout.fnmatch_lines(["CLIENT True fast None"])  # auto: the fast client


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (
            ["--engine=sglng"],
            {},
            "ERROR: --engine: 'sglng' is not a known engine (did you mean 'sglang'?). Known: sim, "
            "vllm, sglang, trtllm,*",
        ),
        ([], {"LLMSLO_ENGINE": "nope"}, "ERROR: LLMSLO_ENGINE: 'nope' is not a known engine.*"),
        (["--concurrency=1,x"], {}, "*--concurrency: Could not parse value: '1,x'*"),
        (["--endpoint=grpc"], {}, "*'grpc' is not a valid endpoint. Valid: chat, completions*"),
        (["--transport=h2"], {}, "*'h2' is not a valid transport. Valid: auto, fast, httpx*"),
        (["--pin-output=maybe"], {}, "*--pin-output*'maybe' is not a boolean*"),
        (["--slo=ttft_p99 <<< 5"], {}, "*--slo*"),
        (["--concurrency=2", "--rate=1"], {}, "ERROR: --concurrency and --rate*"),
        (["--engine=external"], {}, "ERROR: --engine: engine 'external' is external and needs*"),
        (["--engine-opt=vllm.port=1"], {}, "ERROR: --engine-opt*is not an engine of this*"),
        ([], {"LLMSLO_WARMUP": "-1"}, "ERROR: LLMSLO_WARMUP: Could not parse value*"),
        (["--concurrency=1,,2"], {}, "*--concurrency: Could not parse value: '1,,2'. An item*"),
        (["--rate=1", "--max-concurrency=0"], {}, "*A cap of 0 lets no request start*"),
        (["--engine-url=localhost:8000"], {}, "*e.g. http://localhost:8000*"),
        (["--sim-profile=llama-9000"], {}, "ERROR: --sim-profile: 'llama-9000' is not a sim*"),
        (["--slo-json=/proc/x.json"], {}, "ERROR: --slo-json: /proc/x.json cannot be written*"),
        ([], {"LLMSLO_CONCURENCY": "4"}, "ERROR: LLMSLO_CONCURENCY is set*LLMSLO_CONCURRENCY?*"),
    ],
)
def test_bad_values_are_usage_errors(
    slo_pytester: pytest.Pytester, args: list[str], env: dict[str, str], message: str
) -> None:
    slo_pytester.makepyfile(test_x=CHAT)
    for k, v in env.items():
        slo_pytester._monkeypatch.setenv(k, v)
    result = slo_pytester.runpytest_subprocess("--collect-only", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_bad_ini_value_names_the_key(slo_pytester: pytest.Pytester) -> None:
    slo_pytester.makefile(".ini", pytest=INI + "llmslo_osl = lots\n")
    slo_pytester.makepyfile(test_x=CHAT)
    result = slo_pytester.runpytest_subprocess("--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: ini llmslo_osl: Could not parse value: 'lots'*"])


def test_bad_marker_argument_is_a_usage_error(slo_pytester: pytest.Pytester) -> None:
    slo_pytester.makepyfile(
        test_x="""
        import pytest

        @pytest.mark.slo(concurency=[1])
        def test_a(slo_level):
            pass

        @pytest.mark.slo(isl="many")
        def test_b(slo_level):
            pass
        """
    )
    result = slo_pytester.runpytest_subprocess("--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: @pytest.mark.slo on test_x.py::test_a: 'concurency' is not a known argument*",
            "@pytest.mark.slo(isl=...) on test_x.py::test_b: Could not parse value: 'many'*",
        ]
    )


def test_report_header_has_the_settings(slo_pytester: pytest.Pytester) -> None:
    slo_pytester.makepyfile(test_x=CHAT)
    result = slo_pytester.runpytest_subprocess(
        "--collect-only", "--concurrency=2,4", "--slo=ttft_p99<500", "--requests=50"
    )
    result.stdout.fnmatch_lines(
        [
            "llmslo: engines=sim (built-in sim, llama3-70b-fp8-4xh100-vllm) levels=c2,c4 "
            "workload=synthetic*requests=50*slo=ttft_p99 < 500 ms*"
        ]
    )


def test_engine_config_file_and_overrides(slo_pytester: pytest.Pytester) -> None:
    slo_pytester.makefile(
        ".toml",
        engines="""
        [engines.big]
        kind = "sim"
        model = "m"
        """,
    )
    slo_pytester.makepyfile(
        test_x="""
        import pytest

        @pytest.mark.slo(concurrency=[1])
        def test_cfg(slo_engine_factory):
            cfg = slo_engine_factory.config("big")
            print("CFG", cfg.kind, cfg.model, dict(cfg.options))
        """
    )
    result = slo_pytester.runpytest_subprocess(
        "-s",
        "--engine-config=engines.toml",
        "--engine=big",
        "--engine-opt=big.options.profile=llama3-8b-fp8-1xh100-vllm",
        "--collect-only",
        "-q",
    )
    result.stdout.fnmatch_lines(["*test_cfg[[]big-c1]*"])


def test_duration_zero_on_the_command_line_lifts_the_ini_duration(
    slo_pytester: pytest.Pytester,
) -> None:
    ini = "[pytest]\nasyncio_default_fixture_loop_scope = function\nllmslo_duration = 12\n"
    slo_pytester.makefile(".ini", pytest=ini)
    slo_pytester.makepyfile(test_a="def test_a(slo_run):\n    pass\n")
    result = slo_pytester.runpytest_subprocess("--collect-only")
    result.stdout.fnmatch_lines(["llmslo: *duration=12s*"])
    result = slo_pytester.runpytest_subprocess("--collect-only", "--duration=0")
    result.stdout.fnmatch_lines(["llmslo: engines=sim*"])
    result.stdout.no_fnmatch_line("*duration=*")


def test_a_misspelt_option_names_the_closest(slo_pytester: pytest.Pytester) -> None:
    result = slo_pytester.runpytest_subprocess("--slo-concurency=2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "unknown option --slo-concurency (did you mean '--slo-concurrency'?)" in (
        result.stderr.str()
    )


def test_a_run_file_gives_the_session_its_settings(slo_pytester: pytest.Pytester) -> None:
    slo_pytester.makepyfile(test_ids=CHAT)
    slo_pytester.makefile(".toml", slo='engine = "sim"\n[load]\nconcurrency = [2, 3]\n')
    result = slo_pytester.runpytest_subprocess("--collect-only", "-q", "--slo-config=slo.toml")
    result.stdout.fnmatch_lines(
        ["test_ids.py::test_chat[[]sim-c2]", "test_ids.py::test_chat[[]sim-c3]"]
    )
    # The command line overrides the file; a misspelt key is a usage error naming the line.
    result = slo_pytester.runpytest_subprocess(
        "--collect-only", "-q", "--slo-config=slo.toml", "--slo-concurrency=5"
    )
    result.stdout.fnmatch_lines(["test_ids.py::test_chat[[]sim-c5]"])
    slo_pytester.makefile(".toml", bad="[load]\nconcurency = [2]\n")
    result = slo_pytester.runpytest_subprocess("--collect-only", "--slo-config=bad.toml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "bad.toml:2: unknown key 'concurency' (did you mean 'concurrency'?)" in (
        result.stderr.str()
    )
