"""TensorRT-LLM across nodes as a LeaderWorkerSet under MPI: the object checked against
the vendored LWS schema and Kubernetes' own, the SSH Secret as a reference, and the
leader's and workers' scripts run by ``sh`` with ``ssh``, ``mpirun`` and ``sshd``
standing in (what ``mpirun`` is given: ranks, hosts, the serve command)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pytest_llmslo.engines import load_engine_configs, plan_engine
from pytest_llmslo.engines.runtimes.k8s.deployments import names_for
from pytest_llmslo.engines.runtimes.k8s.lws_mpi import SSH_MOUNT, SSH_PORT
from pytest_llmslo.engines.runtimes.k8s.objects import layout_of
from pytest_llmslo.engines.runtimes.k8s.settings import settings_of
from pytest_llmslo.errors import ConfigError

pytest.importorskip("kubernetes_validate")
pytest.importorskip("yaml")

from crd_schema import errors

LWS = "leaderworkerset.x-k8s.io_leaderworkersets_v1.yaml"
MODEL = "meta-llama/Llama-3.1-405B-Instruct"
KUBE = {"namespace": "bench", "secret_env": {"HF_TOKEN": "hf-token/token"},
        "cache_pvc": "hf-cache", "ssh_secret": "llmslo-ssh"}  # fmt: skip
#: A leader address as LWS gives it: group 0 of LWS ``trt`` in namespace ``bench``.
LEADER = "trt-0.trt.bench"
needs_sh = pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX shell")


def layout(nodes: int = 2, tp: int = 8, kube: dict[str, Any] | None = None, **more: Any) -> Any:
    table = {"kind": "trtllm", "runtime": "kubernetes", "model": MODEL,
             "tensor_parallel_size": tp, "kubernetes": {**KUBE, "nodes": nodes, **(kube or {})},
             **more}  # fmt: skip
    plan = plan_engine(load_engine_configs({"trt": table})["trt"])
    return layout_of(plan, settings_of(plan.config), names_for(plan.config), "bench")


def pods(lay: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    lws = next(o for o in lay.objects if o["kind"] == "LeaderWorkerSet")
    tmpl = lws["spec"]["leaderWorkerTemplate"]
    return tmpl["leaderTemplate"]["spec"], tmpl["workerTemplate"]["spec"]


def test_trtllm_across_nodes_is_a_valid_leader_worker_set() -> None:
    import kubernetes_validate

    lay = layout()
    lws = next(o for o in lay.objects if o["kind"] == "LeaderWorkerSet")
    assert errors(lws, LWS) == []
    for obj in lay.objects:
        if obj["kind"] != "LeaderWorkerSet":
            kubernetes_validate.validate(obj, "1.37.0", strict=True)
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    leader, worker = pods(lay)
    lead, work = leader["containers"][0], worker["containers"][0]
    # Probes and the HTTP port only on the leader; the workers listen for SSH.
    assert "readinessProbe" in lead and "startupProbe" in lead
    assert not {"readinessProbe", "startupProbe", "livenessProbe"} & set(work)
    assert work["ports"] == [{"containerPort": SSH_PORT, "name": "ssh"}]
    svc = next(o for o in lay.objects if o["kind"] == "Service")
    assert svc["spec"]["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
    assert "leaderworkerset.sigs.k8s.io/worker-index=0" in lay.api_selector.split(",")
    for spec in (leader, worker):
        c = spec["containers"][0]
        assert c["resources"]["limits"]["nvidia.com/gpu"] == "8"
        assert c["command"] == ["sh", "-c"] and len(c["args"]) == 1
        # The keypair is the named Secret's, mounted read-only; never in the object.
        volume = next(v for v in spec["volumes"] if v.get("secret"))
        assert volume["secret"]["secretName"] == "llmslo-ssh"
        assert {"name": volume["name"], "mountPath": SSH_MOUNT, "readOnly": True} in c[
            "volumeMounts"
        ]
        env = {e["name"]: e for e in c["env"]}
        assert env["OMPI_MCA_orte_keep_fqdn_hostnames"]["value"] == "1"
        assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "hf-token"
    assert "PRIVATE KEY" not in str(lay.objects)


def test_a_missing_ssh_secret_says_how_to_make_one() -> None:
    table = {k: v for k, v in KUBE.items() if k != "ssh_secret"}
    with pytest.raises(ConfigError) as info:
        load_engine_configs({"trt": {"kind": "trtllm", "runtime": "kubernetes", "model": MODEL,
                                     "kubernetes": {**table, "nodes": 2}}})  # fmt: skip
    text = str(info.value)
    assert "kind 'trtllm' with kubernetes.nodes=2 needs kubernetes.ssh_secret" in text
    assert "ssh-keygen -t ed25519" in text
    assert "kubectl -n NAMESPACE create secret generic NAME" in text
    assert "--from-file=private.key=" in text and "--from-file=private.key.pub=" in text


def test_one_node_needs_no_secret() -> None:
    table = {"kind": "trtllm", "runtime": "kubernetes", "model": MODEL,
             "kubernetes": {"namespace": "bench"}}  # fmt: skip
    plan = plan_engine(load_engine_configs({"trt": table})["trt"])
    lay = layout_of(plan, settings_of(plan.config), names_for(plan.config), "bench")
    assert "Deployment" in [o["kind"] for o in lay.objects]
    assert "LeaderWorkerSet" not in [o["kind"] for o in lay.objects]


def test_a_pipeline_size_that_does_not_divide_the_gpus_is_refused() -> None:
    with pytest.raises(
        ConfigError, match=r"engine 'trt': --pp_size '5' does not divide the 16 GPUs"
    ):
        layout(extra_args=["--pp_size", "5"])


def stubs(tmp_path: Path) -> dict[str, str]:
    """``ssh``, ``mpirun``, ``sshd`` and ``ssh-keygen`` that record their arguments, and
    the environment of a pod of group 0 (``HOME``, ``LWS_LEADER_ADDRESS``)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("ssh", "mpirun", "sshd", "ssh-keygen"):
        tool = bin_dir / name
        record = f'"{tmp_path}/{name}.args"'
        tool.write_text(
            f'#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done >> {record}\n'
            f"echo --- >> {record}\n"
        )
        tool.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(home),
            "LWS_LEADER_ADDRESS": LEADER}  # fmt: skip


def run_script(spec: dict[str, Any], tmp_path: Path) -> None:
    keys = tmp_path / "ssh-pk"
    keys.mkdir()
    (keys / "private.key").write_text("private\n")
    (keys / "private.key.pub").write_text("ssh-ed25519 AAAA test\n")
    script = spec["containers"][0]["args"][0].replace(SSH_MOUNT, str(keys))
    subprocess.run(["sh", "-c", script], env=stubs(tmp_path), check=True, timeout=30)


def calls(tmp_path: Path, name: str) -> list[list[str]]:
    text = (tmp_path / f"{name}.args").read_text()
    return [c.strip("\n").split("\n") for c in text.split("---\n") if c.strip()]


@needs_sh
@pytest.mark.parametrize(
    ("nodes", "tp", "extra", "sizes"),
    [(2, 8, [], (16, 1)), (4, 4, ["--pp_size", "2"], (8, 2)), (3, 2, ["--tp_size=1"], (6, 1))],
    ids=["tp16", "tp8-pp2", "tp-flag-replaced"],
)  # fmt: skip
def test_the_leader_reaches_every_worker_then_runs_mpirun(
    tmp_path: Path, nodes: int, tp: int, extra: list[str], sizes: tuple[int, int]
) -> None:
    leader, _ = pods(layout(nodes=nodes, tp=tp, extra_args=extra))
    run_script(leader, tmp_path)
    workers = [f"trt-0-{i}.trt.bench" for i in range(1, nodes)]
    # Every worker answered over SSH before the launch.
    assert [c[-2] for c in calls(tmp_path, "ssh")] == workers
    (argv,) = calls(tmp_path, "mpirun")
    ranks = sizes[0] * sizes[1]
    assert ranks == tp * nodes
    assert argv[argv.index("-np") + 1] == str(ranks)
    hosts = argv[argv.index("-H") + 1].split(",")
    assert hosts == [f"{h}:{tp}" for h in [LEADER, *workers]]
    assert argv[argv.index("plm_rsh_args") + 1].startswith(f"-p {SSH_PORT} -F ")
    assert "--allow-run-as-root" in argv or os.getuid() != 0
    forwarded = {argv[i + 1] for i, a in enumerate(argv) if a == "-x"}
    assert {"HF_TOKEN", "HF_HOME", "PATH", "LD_LIBRARY_PATH"} <= forwarded
    serve = argv[argv.index("trtllm-llmapi-launch") + 1 :]
    assert serve[:2] == ["trtllm-serve", MODEL]
    assert serve[serve.index("--host") + 1] == "0.0.0.0"
    assert serve[serve.index("--port") + 1] == "8000"
    assert serve[serve.index("--tp_size") + 1] == str(sizes[0])
    assert serve[serve.index("--pp_size") + 1] == str(sizes[1])
    assert "--tensor_parallel_size" not in serve
    assert serve.count("--tp_size") == 1 and serve.count("--pp_size") == 1
    config = (Path(tmp_path / "home/.ssh/config")).read_text()
    assert f"Port {SSH_PORT}" in config and "id_llmslo" in config
    assert (tmp_path / "home/.ssh/id_llmslo").read_text() == "private\n"


@needs_sh
def test_the_worker_runs_sshd_with_the_secrets_public_key(tmp_path: Path) -> None:
    _, worker = pods(layout())
    run_script(worker, tmp_path)
    (argv,) = calls(tmp_path, "sshd")
    home = tmp_path / "home"
    assert argv == ["-D", "-e", "-f", f"{home}/.ssh/sshd_config"]
    config = (home / ".ssh/sshd_config").read_text()
    assert f"Port {SSH_PORT}\n" in config
    assert f"AuthorizedKeysFile {home}/.ssh/authorized_keys\n" in config
    assert "PasswordAuthentication no\n" in config and "PermitUserEnvironment yes\n" in config
    assert (home / ".ssh/authorized_keys").read_text() == "ssh-ed25519 AAAA test\n"
    # The MPI daemon's SSH session gets the container's PATH.
    assert "PATH=" in (home / ".ssh/environment").read_text()
    (keygen,) = calls(tmp_path, "ssh-keygen")
    assert keygen[-1] == f"{home}/.ssh/host_keys/ssh_host_ed25519_key"
