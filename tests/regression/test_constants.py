"""The pinned constants: what must match for two runs to be compared, per test and per
engine."""

from __future__ import annotations

import pytest
from regression_helpers import (
    A100,
    CONSTANTS,
    H100,
    OBJECTIVES,
    gpu_meta,
    json_text,
    per_engine_constants,
)

from pytest_llmslo.document import constants


def test_identical_constants_match():
    assert constants.constants_mismatch(CONSTANTS, dict(CONSTANTS)) == []


@pytest.mark.parametrize(
    "key, value, expected",
    [
        ("model", "llama-3.1-70b", 'model: "llama-3.1-8b" (baseline) != "llama-3.1-70b" (new)'),
        ("precision", "bf16", 'precision: "fp8" (baseline) != "bf16" (new)'),
        ("isl", 1024, "isl: 512 (baseline) != 1024 (new)"),
        ("osl", 32, "osl: 16 (baseline) != 32 (new)"),
        ("dataset", "sharegpt.json", 'dataset: null (baseline) != "sharegpt.json" (new)'),
    ],
)
def test_each_pinned_constant_is_named(key, value, expected):
    assert constants.constants_mismatch(CONSTANTS, {**CONSTANTS, key: value}) == [expected]


def test_nested_constants_name_the_leaf():
    new = {**CONSTANTS, "workload": {**CONSTANTS["workload"], "isl": 1024}}
    new["hardware"] = {**CONSTANTS["hardware"], "sim_profile": "a100"}
    assert constants.constants_mismatch(CONSTANTS, new) == [
        'hardware.sim_profile: "h100" (baseline) != "a100" (new)',
        "workload.isl: 512 (baseline) != 1024 (new)",
    ]


def test_constants_ignore_machine_local_details():
    new = {**CONSTANTS, "workload": {**CONSTANTS["workload"], "tokenizer": "/elsewhere"}}
    new["hardware"] = {**CONSTANTS["hardware"], "python": "3.12.1"}
    new["warmup"] = 200  # not a pinned constant
    assert constants.constants_mismatch(CONSTANTS, new) == []


def test_dataset_paths_compare_by_file_name():
    a = {**CONSTANTS, "dataset": "/home/a/sharegpt.json"}
    a["workload"] = {**CONSTANTS["workload"], "path": "/home/a/sharegpt.json"}
    b = {**CONSTANTS, "dataset": "/ci/data/sharegpt.json"}
    b["workload"] = {**CONSTANTS["workload"], "path": "/ci/data/sharegpt.json"}
    assert constants.constants_mismatch(a, b) == []
    c = {**b, "dataset": "/ci/data/other.json"}
    assert constants.constants_mismatch(a, c)[0].startswith("dataset: ")


def test_slo_compared_by_objectives_in_any_spelling():
    texts = {**CONSTANTS, "slo": "itl_p50<30, ttft_p99 < 1000"}
    labels = {**CONSTANTS, "slo": [o.label for o in reversed(OBJECTIVES)]}
    assert constants.constants_mismatch(CONSTANTS, texts) == []
    assert constants.constants_mismatch(texts, labels) == []
    other = {**CONSTANTS, "slo": "ttft_p99<500,itl_p50<30"}
    (diff,) = constants.constants_mismatch(CONSTANTS, other)
    assert diff.startswith("slo: ") and "500" in diff


def test_constant_recorded_on_one_side_differs():
    new = {k: v for k, v in CONSTANTS.items() if k != "precision"}
    assert constants.constants_mismatch(CONSTANTS, new) == [
        'precision: "fp8" (baseline) != (not recorded) (new)'
    ]


def test_constants_for_test_applies_per_test_settings():
    consts = {**CONSTANTS, "tests": {"test_long": {"isl": 4096, "levels": ["c1"]}}}
    merged = constants.constants_for_test(consts, "test_long")
    assert merged["isl"] == 4096 and "tests" not in merged and "levels" not in merged
    assert constants.constants_for_test(consts, "test_other")["isl"] == 512


def test_engine_gpus_from_metadata():
    h100 = "NVIDIA H100 80GB HBM3, 81559 MiB"
    a100 = "NVIDIA A100-SXM4-40GB, 40960 MiB"
    # The driver version is left out; the list is sorted.
    assert constants.engine_gpus(gpu_meta()) == [a100, h100, h100]
    assert constants.engine_gpus(gpu_meta(gpus="all")) == [a100, h100, h100]
    assert constants.engine_gpus(gpu_meta(gpus="2")) == [h100, h100]
    assert constants.engine_gpus(gpu_meta(gpus="device=2")) == [a100]
    assert constants.engine_gpus(gpu_meta(gpus="0,2")) == [a100, h100]
    assert constants.engine_gpus(gpu_meta(gpus="none")) == []
    assert constants.engine_gpus({"kind": "vllm"}) is None
    # An external engine on another host: this machine's GPUs are not its.
    remote = gpu_meta("external", url="http://10.0.0.5:8000")
    assert constants.engine_gpus(remote) is None
    local = gpu_meta("external", url="http://127.0.0.1:8000")
    assert constants.engine_gpus(local) == [a100, h100, h100]


def test_engine_constants():
    c = constants.engine_constants(gpu_meta(gpus="2", quantization="fp8"))
    assert c == {
        "model": "m",
        "precision": "fp8",
        "hardware": {"gpus": ["NVIDIA H100 80GB HBM3, 81559 MiB"] * 2},
    }
    sim = {"kind": "sim", "model": "llmslo-sim", "units": [{"argv": ["py", "--profile", "p1"]}]}
    assert constants.engine_constants(sim)["hardware"] == {"sim_profile": "p1"}
    assert constants.engine_constants(sim, sim_profile="p2")["hardware"] == {"sim_profile": "p2"}
    assert constants.engine_constants(sim, model="M", precision="bf16")["model"] == "M"
    # The client machine is no part of it.
    assert "cpus" not in json_text(c)


def test_constants_for_test_takes_the_engines_own():
    consts = per_engine_constants(vllm=H100, sglang=A100)
    assert constants.constants_for_test(consts, "t", "sglang")["precision"] == "bf16"
    assert constants.constants_for_test(consts, "t", "vllm")["hardware"] == H100["hardware"]
    shared = constants.constants_for_test(consts, "t")
    assert not set(constants.ENGINE_CONSTANTS) & set(shared)
    assert "client" not in shared and "per_engine" not in shared
