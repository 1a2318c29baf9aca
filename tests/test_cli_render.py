"""``llmslo render``: the manifests of an engine with runtime = "kubernetes", as YAML."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_llmslo.cli import EXIT_OK, EXIT_USAGE, main
from pytest_llmslo.sim.admintoken import TOKEN_ENV, session_token

yaml = pytest.importorskip("yaml")

ENGINES = """
[engines.sim-k8s]
kind = "sim"
runtime = "kubernetes"
env = { LOG_LEVEL = "info" }
kubernetes = { namespace = "bench", secret_env = { HF_TOKEN = "hf-token/token" } }

[engines.sim-local]
kind = "sim"
"""


def test_render_prints_one_document_per_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "engines.toml"
    path.write_text(ENGINES)
    assert main(["render", "--engine", "sim-k8s", "--engines-file", str(path)]) == EXIT_OK
    text = capsys.readouterr().out
    docs = list(yaml.safe_load_all(text))
    assert [d["kind"] for d in docs] == ["ConfigMap", "Secret", "Deployment", "Service"]
    assert all(d["metadata"]["namespace"] == "bench" for d in docs)
    # A secret is a reference, never a value.
    env = docs[2]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}},
    } in env
    # The sim's admin token, which the harness made, is read from the Secret the runtime
    # makes for the unit; the printed Secret masks it.
    secret = docs[1]
    assert {
        "name": TOKEN_ENV,
        "valueFrom": {"secretKeyRef": {"name": secret["metadata"]["name"], "key": TOKEN_ENV}},
    } in env
    assert secret["stringData"] == {TOKEN_ENV: "***"} and "data" not in secret
    assert session_token() not in text
    assert "&id" not in text  # no YAML anchors: each document stands alone


def test_render_refuses_an_engine_of_another_runtime(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "engines.toml"
    path.write_text(ENGINES)
    assert main(["render", "--engine", "sim-local", "--engines-file", str(path)]) == EXIT_USAGE
    assert "runtime='process'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("table", "kinds"),
    [
        ('kind = "dynamo"\nmodel = "m"\noptions = { mode = "disagg", router_mode = "kv" }',
         ["ConfigMap", "DynamoGraphDeployment"]),
        ('kind = "sglang"\nmodel = "m"\nkubernetes = { nodes = 2 }',
         ["ConfigMap", "LeaderWorkerSet", "Service"]),
        ('kind = "trtllm"\nmodel = "m"\nkubernetes = { nodes = 2, ssh_secret = "llmslo-ssh" }',
         ["ConfigMap", "LeaderWorkerSet", "Service"]),
    ],
    ids=["dynamo", "multi-node", "trtllm-multi-node"],
)  # fmt: skip
def test_render_prints_the_custom_resources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], table: str, kinds: list[str]
) -> None:
    path = tmp_path / "engines.toml"
    path.write_text(f'[engines.e]\nruntime = "kubernetes"\n{table}\n')
    assert main(["render", "--engine", "e", "--engines-file", str(path)]) == EXIT_OK
    text = capsys.readouterr().out
    assert [d["kind"] for d in yaml.safe_load_all(text)] == kinds
    assert "&id" not in text


def test_render_of_trtllm_across_nodes_names_the_ssh_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "engines.toml"
    table = 'kind = "trtllm"\nmodel = "m"\nkubernetes = { nodes = 2, ssh_secret = "llmslo-ssh" }'
    path.write_text(f'[engines.e]\nruntime = "kubernetes"\n{table}\n')
    assert main(["render", "--engine", "e", "--engines-file", str(path)]) == EXIT_OK
    lws = list(yaml.safe_load_all(capsys.readouterr().out))[1]
    tmpl = lws["spec"]["leaderWorkerTemplate"]
    leader = tmpl["leaderTemplate"]["spec"]
    assert "mpirun" in leader["containers"][0]["args"][0]
    assert "sshd" in tmpl["workerTemplate"]["spec"]["containers"][0]["args"][0]
    secrets = [v["secret"]["secretName"] for v in leader["volumes"] if "secret" in v]
    assert secrets == ["llmslo-ssh"]


def test_render_of_trtllm_across_nodes_without_a_secret_says_how_to_make_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "engines.toml"
    table = 'kind = "trtllm"\nmodel = "m"\nkubernetes = { nodes = 2 }'
    path.write_text(f'[engines.e]\nruntime = "kubernetes"\n{table}\n')
    assert main(["render", "--engine", "e", "--engines-file", str(path)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "needs kubernetes.ssh_secret" in err and "kubectl -n NAMESPACE create secret" in err
