"""Settings resolution without pytest: precedence, parsing, errors that name the source."""

from __future__ import annotations

import argparse
import dataclasses
import re

import pytest

from pytest_llmslo import settings as S
from pytest_llmslo.errors import ConfigError
from pytest_llmslo.records import LoadLevel


def resolve(cli=None, env=None, ini=None, marker=None):  # type: ignore[no-untyped-def]
    src = S.Sources(cli=cli or {}, env=env or {}, ini=ini or {})
    return S.resolve_test(src, S.split_marker((), marker or {}, "t.py::test"), "t.py::test")


def test_defaults() -> None:
    ts = resolve()
    assert [lv.label for lv in ts.levels] == ["c1", "c4", "c8", "c16", "c32", "c48", "c64"]
    assert (ts.isl, ts.osl, ts.warmup, ts.endpoint) == (512, 256, 200, "chat")
    assert ts.objectives == () and ts.strict is False and ts.confidence == 0.95


def test_warmup_covers_one_closed_loop_wave() -> None:
    ts = resolve(marker={"warmup": 4})
    assert ts.warmup_for(LoadLevel.concurrency(1)) == 4
    assert ts.warmup_for(LoadLevel.concurrency(32)) == 32  # the first burst is discarded
    assert ts.warmup_for(LoadLevel.rate(50.0)) == 4  # an open loop has no such burst
    assert resolve(marker={"warmup": 0}).warmup_for(LoadLevel.concurrency(32)) == 0
    assert resolve().warmup_for(LoadLevel.concurrency(64)) == 200


def test_precedence_cli_env_ini_marker_default() -> None:
    marker = {"isl": 100}
    assert resolve(marker=marker).isl == 100
    assert resolve(ini={"llmslo_isl": "200"}, marker=marker).isl == 200
    assert resolve(env={"LLMSLO_ISL": "300"}, ini={"llmslo_isl": "200"}, marker=marker).isl == 300
    ts = resolve(
        cli={"isl": 400}, env={"LLMSLO_ISL": "300"}, ini={"llmslo_isl": "200"}, marker=marker
    )
    assert ts.isl == 400
    assert ts.sources["isl"] == "--isl"


def test_load_is_one_setting_across_sources() -> None:
    # A rate on the command line replaces the marker's concurrency sweep.
    ts = resolve(cli={"rate": (1.0, 2.5)}, marker={"concurrency": [1, 2]})
    assert ts.levels == (LoadLevel.rate(1.0), LoadLevel.rate(2.5))
    assert S.level_ids(ts.levels) == ["r1", "r2.5"]
    ts = resolve(ini={"llmslo_concurrency": "2,3"}, marker={"rate": [5]})
    assert [lv.label for lv in ts.levels] == ["c2", "c3"]
    with pytest.raises(ConfigError, match="sets both concurrency and rate"):
        resolve(cli={"rate": (1.0,), "concurrency": (2,)})


def test_constant_arrival() -> None:
    ts = resolve(marker={"rate": [2], "arrival": "constant"})
    assert ts.levels == (LoadLevel.rate(2.0, "constant"),)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"env": {"LLMSLO_ISL": "x"}}, "LLMSLO_ISL: Could not parse value: 'x'"),
        ({"ini": {"llmslo_endpoint": "grpc"}}, "ini llmslo_endpoint: 'grpc' is not a valid"),
        ({"marker": {"osl": 0}}, r"@pytest.mark.slo\(osl=...\) on t.py::test"),
        ({"marker": {"concurrency": ["a"]}}, "'a' is not an integer"),
        ({"ini": {"llmslo_slo": "ttft_p99 << 5"}}, "ini llmslo_slo"),
        ({"env": {"LLMSLO_SLO_CONFIDENCE": "2"}}, r"confidence in \[0.5, 1\)"),
    ],
)
def test_errors_name_the_source(kwargs, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match=message):
        resolve(**kwargs)


def test_unknown_marker_argument_lists_valid_ones() -> None:
    with pytest.raises(
        ConfigError, match=r"'conc' is not a known argument\. Valid: api_key_env, arrival"
    ):
        S.split_marker((), {"conc": 1}, "t.py::test")


def test_marker_objectives_positional_and_text() -> None:
    from pytest_llmslo import itl_p50, ttft_p99

    m = S.split_marker((ttft_p99 < 500,), {"objectives": "itl_p50<30"}, "t")
    ts = S.resolve_test(S.Sources(), m, "t")
    assert [o.label for o in ts.objectives] == [
        (ttft_p99 < 500).label,
        (itl_p50 < 30).label,
    ]


def test_engine_names_checked() -> None:
    S.check_engine_names(["sim", "mine"], ["mine"], "--engine")
    with pytest.raises(
        ConfigError,
        match=r"--engine: 'sglng' is not a known engine \(did you mean 'sglang'\?\). Known: mine",
    ):
        S.check_engine_names(["sglng"], ["mine"], "--engine")


def test_session_engines_flattened_and_deduplicated() -> None:
    cli = {"engine": [("sim", "vllm"), ("sim",)]}
    assert S.resolve_session(S.Sources(cli=cli)).engines == ("sim", "vllm")
    env = {"LLMSLO_ENGINE": "vllm,sglang"}
    assert S.resolve_session(S.Sources(env=env)).engines == ("vllm", "sglang")


def test_cli_type_gives_argparse_errors() -> None:
    parse = S.cli_type(S.SPEC_BY_NAME["concurrency"])
    assert parse("1, 4,8") == (1, 4, 8)
    with pytest.raises(argparse.ArgumentTypeError, match="Could not parse value: '1,x'"):
        parse("1,x")


def test_bool_and_duration_parsers() -> None:
    assert S.parse_bool("yes") is True and S.parse_bool("0") is False
    assert S.parse_optional_duration("30s") == 30.0
    assert S.parse_optional_duration("0") is None
    assert S.parse_fraction("90%") == 0.9


def test_dataset_kind_and_workload_fields() -> None:
    ts = resolve(marker={"dataset": "data/chat.jsonl"})
    assert ts.dataset_kind() == ("jsonl", "data/chat.jsonl")
    ts = resolve(marker={"dataset": "sharegpt:x.json", "isl_stddev": 10})
    f = ts.workload_fields()
    assert (f["kind"], f["path"], f["distribution"]) == ("sharegpt", "x.json", "normal")


def test_level_ids_unique() -> None:
    levels = [LoadLevel.concurrency(4), LoadLevel.concurrency(4)]
    assert S.level_ids(levels) == ["c4", "c4_1"]


def test_describe_is_one_line() -> None:
    line = S.describe(S.SessionSettings(), resolve(marker={"objectives": "ttft_p99<500"}))
    assert "\n" not in line
    assert "engines=sim" in line and "slo=ttft_p99 < 500 ms" in line


def test_settings_and_the_load_generator_take_their_choices_from_one_module() -> None:
    # One definition each (pytest_llmslo.choices), not copies kept equal: the options offer
    # exactly what ClientSettings and WorkloadSpec accept.
    import typing

    from pytest_llmslo import choices
    from pytest_llmslo.load import client, traces, workload

    assert S.ENDPOINTS is choices.ENDPOINTS == typing.get_args(client.Endpoint)
    assert S.TRANSPORTS is choices.TRANSPORTS == typing.get_args(client.TransportName)
    assert S.RECEIVE_STAMPS is choices.RECEIVE_STAMPS == typing.get_args(client.ReceiveStamps)
    assert S.TRACE_FORMATS is choices.TRACE_FORMATS is traces.TRACE_FORMATS
    assert S.WORKLOADS is choices.WORKLOAD_KINDS is workload.WORKLOAD_KINDS
    assert S.THINK_DISTRIBUTIONS is choices.THINK_DISTRIBUTIONS is workload.THINK_DISTRIBUTIONS
    assert S.DISTRIBUTIONS is choices.DISTRIBUTIONS == typing.get_args(workload.LengthDistribution)
    by_choices = {s.name: s.choices for s in S.SPECS if s.choices}
    assert by_choices["endpoint"] is choices.ENDPOINTS
    assert by_choices["slo_early_stop"] is choices.EARLY_STOP_MODES
    assert by_choices["reset_cache"] is choices.RESET_CACHE_MODES
    with pytest.raises(ConfigError, match="Valid transports: auto, fast, httpx"):
        client.ClientSettings(base_url="http://h:1", model="m", transport="h2")  # type: ignore[arg-type]


def test_reading_the_settings_never_imports_the_load_generator() -> None:
    import subprocess
    import sys

    code = (
        "import sys; import pytest_llmslo.settings; "
        "print(sorted(m for m in sys.modules if m.startswith('pytest_llmslo.load')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_cli_value_that_parses_to_none_overrides_the_ini() -> None:
    # --duration=0 and --requests=none lift what an ini file set (examples/pytest.ini
    # documents --duration=0 for numbers worth trusting).
    ts = resolve(cli={"duration": None}, ini={"llmslo_duration": "12", "llmslo_requests": "64"})
    assert ts.duration_s is None and ts.sources["duration"] == "--duration"
    ts = resolve(cli={"requests": None, "duration": 5.0}, ini={"llmslo_requests": "64"})
    assert ts.requests is None and ts.duration_s == 5.0


def test_every_option_is_in_the_options_page() -> None:
    from pathlib import Path

    page = (Path(__file__).parents[2] / "docs" / "options.md").read_text()
    missing = [sp.option for sp in S.SPECS if sp.cli and f"### `{sp.option}" not in page]
    assert not missing, f"options not in docs/options.md: {missing}"


def test_receive_stamps_reach_the_client() -> None:
    assert resolve().receive_stamps == "auto"
    assert resolve(cli={"receive_stamps": "read"}).receive_stamps == "read"
    with pytest.raises(ConfigError, match="receive_stamps"):
        resolve(marker={"receive_stamps": "kernel"})


@pytest.mark.parametrize(
    ("spec", "text", "message"),
    [
        ("concurrency", "1,,2", "An item is empty"),
        ("concurrency", "1,2,", "An item is empty"),
        ("rate", "1,,2", "An item is empty"),
        ("engine", "sim,,vllm", "An item is empty"),
        ("max_concurrency", "0", "A cap of 0 lets no request start"),
        ("engine_url", "localhost:8000", "starts with http:// or https://, e.g. http://localhost"),
        ("engine_url", "127.0.0.1:8000/v1", "e.g. http://127.0.0.1:8000/v1"),
        ("engine_url", "http://", "names no host"),
        ("engine_url", "http://host:port", "Not a URL"),
        ("dcgm_url", "dcgm:9400/metrics", "starts with http://"),
        ("prompt_salt", "two words", "without spaces"),
    ],
)
def test_typos_are_refused_at_parse_time(spec: str, text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        S.SPEC_BY_NAME[spec].parse(text)


def test_lists_urls_caps_and_salts_that_are_right_still_parse() -> None:
    assert S.parse_int_list("1, 4 ,8") == (1, 4, 8)
    assert S.parse_optional_request_cap("none") is None
    assert S.parse_optional_request_cap("16") == 16
    assert S.parse_optional_url("https://user:pw@host:8443/v1") == "https://user:pw@host:8443/v1"
    assert S.parse_optional_url("") is None
    assert [S.parse_prompt_salt(t) for t in ("AUTO", "none", "run-7")] == ["auto", "none", "run-7"]


def test_a_url_password_is_masked_where_it_is_shown() -> None:
    assert S.shown_url("http://bob:s3cret@host:8000/v1") == "http://bob:***@host:8000/v1"
    assert S.shown_url("http://host:8000") == "http://host:8000"


def test_a_mistyped_environment_variable_names_the_setting() -> None:
    with pytest.raises(ConfigError, match=r"LLMSLO_CONCURENCY .*did you mean LLMSLO_CONCURRENCY"):
        S.resolve_session(S.Sources(env={"LLMSLO_CONCURENCY": "4"}))
    # Unknown and not near any setting: a warning; the engine suites' own variables and the
    # API key variable are known.
    env = {"LLMSLO_NOTHING_LIKE_IT": "1", "LLMSLO_REQUIRE_ENGINES": "1", "LLMSLO_MY_KEY": "k"}
    settings = S.resolve_session(S.Sources(env={**env, "LLMSLO_API_KEY_ENV": "LLMSLO_MY_KEY"}))
    assert settings.warnings == (
        "LLMSLO_NOTHING_LIKE_IT is set, but no pytest-llmslo setting reads it; it is ignored",
    )


def test_an_engine_url_alone_means_the_external_engine() -> None:
    settings = S.resolve_session(S.Sources(cli={"engine_url": "http://127.0.0.1:9"}))
    assert settings.engines == ("external",)
    assert settings.sources["engine"] == "--engine-url"
    env = {"LLMSLO_ENGINE_URL": "http://127.0.0.1:9", "LLMSLO_ENGINE": "sim"}
    assert S.resolve_session(S.Sources(env=env)).engines == ("sim",)  # the session checks it


def test_every_option_has_a_topic() -> None:
    assert all(spec.topic in S.TOPICS for spec in S.SPECS if spec.cli), [
        spec.name for spec in S.SPECS if spec.cli and spec.topic not in S.TOPICS
    ]


def test_help_shows_the_default_that_applies() -> None:
    from pytest_llmslo import slo
    from pytest_llmslo.engines.sim import DEFAULT_PROFILE
    from pytest_llmslo.load import HealthThresholds

    shown = {spec.name: S.default_text(spec) for spec in S.SPECS if spec.cli}
    assert "None" not in shown.values()
    assert shown["min_attainment"] == f"{slo.DEFAULT_MIN_ATTAINMENT:g}"
    assert shown["client_max_lag"] == f"{HealthThresholds().max_schedule_lag_p99_ms:g} ms"
    assert shown["client_max_cpu"] == f"{HealthThresholds().max_cpu_util:g}"
    assert shown["sim_profile"] == DEFAULT_PROFILE
    assert shown["level_timeout"] == "auto"
    assert shown["concurrency"] == "1,4,8,16,32,48,64"
    assert (shown["slo_strict"], shown["pin_output"]) == ("off", "true")
    # llmslo run's own defaults, where it has them.
    assert S.default_text(S.SPEC_BY_NAME["duration"], S.RUN_DEFAULTS) == "30"
    assert S.default_text(S.SPEC_BY_NAME["warmup"], S.RUN_DEFAULTS) == "20"


def test_run_defaults_sit_below_every_source() -> None:
    src = S.Sources(defaults=S.RUN_DEFAULTS)
    ts = S.resolve_test(src, {}, "")
    assert (ts.duration_s, ts.warmup, ts.requests) == (30.0, 20, 500)
    ts = S.resolve_test(S.Sources(env={"LLMSLO_WARMUP": "5"}, defaults=S.RUN_DEFAULTS), {}, "")
    assert ts.warmup == 5 and ts.sources["warmup"] == "LLMSLO_WARMUP"


# ----------------------------------------------------------------- fields and groups


def test_every_spec_names_the_field_it_fills() -> None:
    test_fields = {f.name for f in dataclasses.fields(S.TestSettings)}
    session_fields = {f.name for f in dataclasses.fields(S.SessionSettings)}
    filled: dict[str, list[str]] = {}
    for spec in S.SPECS:
        if spec.field is None:
            assert spec.name in S.LEVEL_SPECS, f"{spec.name} fills no field"
            continue
        fields = test_fields if spec.scope == "test" else session_fields
        assert spec.field in fields, f"{spec.name}: no field {spec.field!r}"
        filled.setdefault(f"{spec.scope}.{spec.field}", []).append(spec.name)
    assert all(len(names) == 1 for names in filled.values()), filled
    # Every field is some spec's, but for what resolution itself makes.
    assert {k for k in filled if k.startswith("test.")} == {
        f"test.{f}" for f in test_fields - {"levels", "engines", "sources"}
    }
    assert {k for k in filled if k.startswith("session.")} == {
        f"session.{f}" for f in session_fields - {"sources", "warnings", "outputs"}
    }


def test_each_value_reaches_its_field_through_the_one_loop() -> None:
    # Sources.defaults stand in for any source: a token per setting comes out in the field
    # the spec names. The settings the levels and the request check read get real values.
    read = {
        "seed": 7,
        "burstiness": 0.5,
        "max_concurrency": 4,
        "arrival": "gamma",
        "requests": 3,
        "duration": 2.0,
        "trace": None,
        "engine": ("sim",),
        "engine_url": None,
    }
    tokens = {s.name: object() for s in S.SPECS if s.field and s.name not in read}
    src = S.Sources(env={"LLMSLO_RATE": "2"}, defaults={**tokens, **read})
    ts = S.resolve_test(src, {}, "t")
    session = S.resolve_session(src)
    for spec in S.SPECS:
        if spec.field is None:
            continue
        got = getattr(ts if spec.scope == "test" else session, spec.field)
        if spec.name in tokens:
            assert got is tokens[spec.name], spec.name
        else:
            assert got == read[spec.name], spec.name
    assert ts.levels == (LoadLevel.rate(2.0, "gamma", 7, max_concurrency=4, burstiness=0.5),)


def test_test_settings_are_made_of_the_groups_the_components_take() -> None:
    ts = resolve(marker={"isl": 100, "objectives": "ttft_p99<500"})
    for group in S.GROUPS:
        assert isinstance(ts, group)
        for f in dataclasses.fields(group):
            if f.name not in ("isl", "objectives"):
                assert getattr(ts, f.name) == getattr(group(), f.name), f.name
    # Flat attributes, dataclasses.replace (slo_load's overrides) and fields() as before.
    assert (ts.isl, ts.osl, ts.slo_text) == (100, 256, "ttft_p99 < 500 ms")
    assert dataclasses.replace(ts, isl=64, requests=None).isl == 64
    names = [f.name for f in dataclasses.fields(S.TestSettings)]
    assert names[:2] == ["levels", "warmup"] and names[-1] == "sources"
    assert len(names) == len(set(names))


def test_client_options_become_the_load_generators_client_settings() -> None:
    from pytest_llmslo.load import ClientSettings

    env = {
        "LLMSLO_ENDPOINT": "completions",
        "LLMSLO_REQUEST_TIMEOUT": "30",
        "LLMSLO_CONNECT_TIMEOUT": "3",
        "LLMSLO_FIRST_BYTE_TIMEOUT": "20",
        "LLMSLO_IDLE_TIMEOUT": "7",
        "LLMSLO_PIN_OUTPUT": "false",
        "LLMSLO_TRANSPORT": "httpx",
        "LLMSLO_RECEIVE_STAMPS": "read",
        "LLMSLO_INSECURE": "1",
        "LLMSLO_CA_BUNDLE": "ca.pem",
        "LLMSLO_HEADER": "X-Tenant: a",
        "LLMSLO_MODELS": "base:2,lora",
        "LLMSLO_SESSION_HEADER": "X-Session",
        "LLMSLO_EXTRA_BODY": '{"top_k": 20}',
    }
    ts = resolve(env=env, marker={"api_key_env": ""})
    got = ts.client_settings("http://127.0.0.1:9", "served")
    assert got == ClientSettings(
        base_url="http://127.0.0.1:9",
        model="served",
        endpoint="completions",
        timeout_s=30.0,
        connect_timeout_s=3.0,
        first_byte_timeout_s=20.0,
        idle_timeout_s=7.0,
        ignore_eos=False,
        transport="httpx",
        receive_stamps="read",
        api_key_env=None,  # empty: no key
        verify_tls=False,
        ca_bundle="ca.pem",
        headers={"X-Tenant": "a"},
        models=(("base", 2.0), ("lora", 1.0)),
        session_header="X-Session",
        extra_body={"top_k": 20},
    )
    # A group alone hands over the same: the defaults are the client's.
    assert S.ClientOptions().client_settings("http://h:1", "m") == ClientSettings("http://h:1", "m")


def test_health_options_become_the_health_thresholds() -> None:
    from pytest_llmslo.load import HealthThresholds

    assert resolve().health_thresholds() == HealthThresholds()
    env = {
        "LLMSLO_CLIENT_MAX_LAG": "25",
        "LLMSLO_CLIENT_MAX_CPU": "0.5",
        "LLMSLO_CLIENT_MAX_STALLED": "1%",
        "LLMSLO_CLIENT_MIN_LOAD": "0",
    }
    assert resolve(env=env).health_thresholds() == HealthThresholds(
        max_schedule_lag_p99_ms=25.0,
        max_loop_lag_p99_ms=25.0,
        max_cpu_util=0.5,
        max_stalled_tokens=0.01,
        min_load_share=0.0,
    )
    lag_only = resolve(env={"LLMSLO_CLIENT_MAX_LAG": "40"}).health_thresholds()
    assert lag_only.max_cpu_util == HealthThresholds().max_cpu_util


def test_workload_and_gate_options_hand_over_whole() -> None:
    from pytest_llmslo import slo
    from pytest_llmslo.load import WorkloadSpec

    ts = resolve(marker={"workload": "shared_prefix", "num_prefixes": 2, "prefix_len": 64})
    spec = ts.workload_spec("salt-1")
    assert spec == WorkloadSpec(**ts.workload_fields(), salt="salt-1")
    assert (spec.kind, spec.num_prefixes, spec.salt) == ("shared_prefix", 2, "salt-1")
    assert resolve().gate_kwargs() == {
        "strict": False,
        "confidence": 0.95,
        "min_attainment": slo.DEFAULT_MIN_ATTAINMENT,
        "min_goodput_tok_s": None,
        "max_error_rate": 0.01,
    }
    gate = resolve(cli={"slo_strict": True, "min_attainment": 0.8}).gate_kwargs()
    assert (gate["strict"], gate["min_attainment"]) == (True, 0.8)


def test_pytest_help_groups_the_options_by_topic_with_the_defaults_that_apply(
    pytester: pytest.Pytester,
) -> None:
    # What a user reads in `pytest --help`, not only what default_text returns.
    result = pytester.runpytest_subprocess("--help")
    out = result.stdout.str()
    groups = [line for line in out.splitlines() if line.startswith("pytest-llmslo ")]
    # The options most runs need, then one group per topic.
    assert len(groups) == 1 + len({spec.topic for spec in S.SPECS if spec.cli}), groups
    assert "pytest-llmslo engines (what is measured):" in groups
    assert "Default: None" not in out
    assert re.search(r"--slo-concurrency=\S+\s.*?Default:\s+1,4,8,16,32,48,64", out, re.S)


def test_the_tokenizer_reaches_the_workload_from_every_surface() -> None:
    assert resolve().workload_fields()["tokenizer"] is None
    ts = resolve(marker={"tokenizer": "models/llama"})
    assert ts.workload_fields()["tokenizer"] == "models/llama"
    ts = resolve(cli={"tokenizer": "a/tokenizer.json"}, marker={"tokenizer": "models/llama"})
    assert ts.workload_fields()["tokenizer"] == "a/tokenizer.json"
    assert ts.sources["tokenizer"] == "--tokenizer"
    ts = resolve(env={"LLMSLO_TOKENIZER": "b"}, ini={"llmslo_tokenizer": "c"})
    assert ts.tokenizer == "b"


def test_the_eval_scorer_reaches_the_workload_from_the_marker_and_the_cli() -> None:
    ts = resolve(marker={"eval": "evals.jsonl", "eval_scorer": "mypkg.scoring:judge"})
    assert ts.workload_fields()["eval_scorer"] == "mypkg.scoring:judge"
    ts = resolve(cli={"eval_scorer": "other:judge"}, marker={"eval": "evals.jsonl"})
    assert ts.workload_fields()["eval_scorer"] == "other:judge"
    assert resolve(marker={"eval_scorer": "a:b"}).workload_fields()["eval_scorer"] is None
    with pytest.raises(ConfigError, match="module:function"):
        resolve(marker={"eval": "evals.jsonl", "eval_scorer": "judge"})


def test_a_hugging_face_eval_and_how_it_is_read_reach_the_workload() -> None:
    from pytest_llmslo.evals import HfReading, parse_hf_reading

    ts = resolve(
        marker={"eval": "hf:openai/gsm8k:20%", "eval_hf": {"config": "main", "split": "test"}}
    )
    fields = ts.workload_fields()
    assert (fields["eval_task"], fields["eval_path"], fields["eval_share"]) == (
        "hf",
        "openai/gsm8k",
        0.2,
    )
    assert fields["eval_hf"] == HfReading(config="main", split="test")
    ts = resolve(
        cli={"eval_hf": parse_hf_reading("prompt=question,reference=answer")},
        env={"LLMSLO_EVAL": "hf:data/x"},
    )
    assert ts.workload_fields()["eval_hf"] == HfReading(prompt="question", reference="answer")
    assert ts.sources["eval_hf"] == "--slo-eval-hf"
    # Beside another eval it reads nothing.
    ts = resolve(marker={"eval": "arithmetic", "eval_hf": "split=test"})
    assert ts.workload_fields()["eval_hf"] is None
    with pytest.raises(ConfigError, match="unknown key"):
        resolve(marker={"eval": "hf:x", "eval_hf": "colour=red"})


def test_quality_objectives_ride_in_the_slo_with_the_latency_ones() -> None:
    from pytest_llmslo.slo import accuracy, ttft_p99

    ts = resolve(env={"LLMSLO_SLO": "ttft_p99<500,accuracy>=0.95"})
    assert [o.metric for o in ts.objectives] == ["ttft"]
    assert [(q.metric, q.threshold) for q in ts.quality] == [("accuracy", 0.95)]
    # The marker's positional objectives, and --slo-quality beside them, once each.
    ts = resolve(
        env={"LLMSLO_QUALITY": "accuracy>=0.95"},
        marker={"objectives": [ttft_p99 < 500, accuracy >= 0.9]},
    )
    assert [o.metric for o in ts.objectives] == ["ttft"]
    assert sorted(q.threshold for q in ts.quality) == [0.9, 0.95]
    ts = resolve(marker={"objectives": "accuracy>=95%", "quality": "accuracy>=0.95"})
    assert ts.objectives == () and len(ts.quality) == 1
    with pytest.raises(ConfigError, match=r"write accuracy>=0\.95"):
        resolve(env={"LLMSLO_SLO": "ttft_p99<500,accuracy<0.9"})
