"""Engine configs from TOML, pyproject and dicts; ``key=value`` overrides; errors that name
the valid keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_llmslo.engines import (
    CONFIG_KEYS,
    EngineConfig,
    apply_overrides,
    load_engine_configs,
    resolve_engine,
)
from pytest_llmslo.errors import ConfigError

CONFIG_TOML = """
[engines.vllm-tp2]
kind = "vllm"
model = "meta-llama/Llama-3.1-8B-Instruct"
tensor_parallel_size = 2
dtype = "bfloat16"
max_model_len = 8192
gpu_memory_utilization = 0.9
extra_args = ["--enable-prefix-caching"]
env = { HF_TOKEN = "hf_x" }
runtime = "docker"

[engines.sim]
options = { profile = "llama3-70b-fp8-4xh100-vllm" }
"""


def test_load_from_toml_file(tmp_path: Path) -> None:
    p = tmp_path / "engines.toml"
    p.write_text(CONFIG_TOML)
    configs = load_engine_configs(p)
    assert set(configs) == {"vllm-tp2", "sim"}
    v = configs["vllm-tp2"]
    assert v == EngineConfig(
        kind="vllm",
        name="vllm-tp2",
        model="meta-llama/Llama-3.1-8B-Instruct",
        tensor_parallel_size=2,
        dtype="bfloat16",
        max_model_len=8192,
        gpu_memory_utilization=0.9,
        extra_args=("--enable-prefix-caching",),
        env={"HF_TOKEN": "hf_x"},
        runtime="docker",
    )
    assert configs["sim"].kind == "sim"  # the name is a kind
    assert configs["sim"].options == {"profile": "llama3-70b-fp8-4xh100-vllm"}


def test_load_from_pyproject(tmp_path: Path) -> None:
    p = tmp_path / "pyproject.toml"
    p.write_text(
        '[project]\nname = "x"\n\n'
        '[tool.llmslo.engines.ext]\nkind = "external"\nurl = "http://127.0.0.1:9"\n'
    )
    configs = load_engine_configs(p)
    assert configs["ext"].url == "http://127.0.0.1:9"


def test_load_from_dict_both_shapes() -> None:
    a = load_engine_configs({"sim": {"port": 8123}})
    b = load_engine_configs({"tool": {"llmslo": {"engines": {"sim": {"port": 8123}}}}})
    assert a == b
    assert a["sim"].port == 8123


@pytest.mark.parametrize(
    ("table", "match"),
    [
        ({"sim": {"tensor_paralel_size": 2}}, "unknown key.*tensor_paralel_size.*Valid keys:"),
        ({"x": {"model": "m"}}, "no kind given.*Valid kinds:"),
        ({"x": {"kind": "vllmm"}}, "Valid kinds:.*vllm"),
        ({"sim": {"port": "eighty"}}, "port='eighty'.*integer"),
        ({"sim": {"port": 70000}}, "1..65535"),
        ({"sim": {"gpu_memory_utilization": 1.5}}, r"\(0, 1\]"),
        ({"sim": {"runtime": "podman"}}, "Valid runtimes: docker, kubernetes, process"),
        ({"sim": {"env": "HF_TOKEN=x"}}, "table of strings"),
        ({"sim": {"options": {"profil": "x"}}}, "unknown option.*profil.*Valid options:.*profile"),
        ({"sim": {"tensor_parallel_size": 0}}, ">= 1"),
    ],
)
def test_bad_values_name_the_valid_ones(table: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_engine_configs(table)


def test_bad_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_engine_configs(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[engines\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_engine_configs(bad)


def test_overrides() -> None:
    base = EngineConfig(kind="vllm", name="v", env={"A": "1"})
    new = apply_overrides(
        base,
        [
            "tensor_parallel_size=2",
            "env.HF_TOKEN=hf_abc=def",
            "gpu_memory_utilization=0.85",
            "extra_args=--enforce-eager --max-num-seqs 8",
            "served_model_name=llama",
            "port=none",
            "runtime=docker",
            "model=org/model",
        ],
    )
    assert new.tensor_parallel_size == 2
    assert new.env == {"A": "1", "HF_TOKEN": "hf_abc=def"}
    assert new.gpu_memory_utilization == 0.85
    assert new.extra_args == ("--enforce-eager", "--max-num-seqs", "8")
    assert new.served_model_name == "llama"
    assert new.port is None
    assert new.runtime == "docker"
    assert new.model == "org/model"
    assert base.tensor_parallel_size == 1  # the original is untouched


def test_option_overrides_parse_toml_scalars() -> None:
    new = apply_overrides(EngineConfig(kind="sim"), ["options.profile=p1", "port=8001"])
    assert new.options == {"profile": "p1"}
    assert new.port == 8001


@pytest.mark.parametrize(
    ("item", "match"),
    [
        ("tp=2", "unknown key 'tp'. Valid keys:.*tensor_parallel_size"),
        ("tensor_parallel_size=two", "integer"),
        ("tensor_parallel_size", "not key=value"),
        ("foo.bar=1", "Only env.NAME, options.NAME and kubernetes.NAME"),
        ("options.nope=1", "unknown option.*nope"),
        ("runtime=vm", "Valid runtimes"),
    ],
)
def test_bad_overrides(item: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        apply_overrides(EngineConfig(kind="sim"), [item], where="--engine-opt")


def test_resolve_engine() -> None:
    configs = load_engine_configs({"mine": {"kind": "sim", "port": 9001}})
    assert resolve_engine("mine", configs).port == 9001
    assert resolve_engine("vllm", configs) == EngineConfig(kind="vllm", name="vllm")
    with pytest.raises(ConfigError, match="Configured engines: mine"):
        resolve_engine("nope", configs)


def test_config_keys_cover_every_field() -> None:
    assert "tensor_parallel_size" in CONFIG_KEYS and "name" not in CONFIG_KEYS


def test_home_is_expanded_in_paths() -> None:
    import os

    cfg = load_engine_configs({"v": {"kind": "vllm", "model": "~/m", "python": "~/v/bin/python"}})
    assert cfg["v"].model == os.path.expanduser("~/m")
    assert cfg["v"].python == os.path.expanduser("~/v/bin/python")
    assert load_engine_configs({"v": {"kind": "vllm", "model": "org/m"}})["v"].model == "org/m"


def test_docs_cpu_examples_load(tmp_path: Path) -> None:
    """The TOML examples in docs/engines.md are valid configs."""
    import re

    doc = (Path(__file__).parents[2] / "docs" / "engines.md").read_text()
    blocks = re.findall(r"```toml\n(.*?)```", doc, re.S)
    assert len(blocks) >= 2
    for block in blocks:
        p = tmp_path / "x.toml"
        p.write_text(block)
        assert load_engine_configs(p)
