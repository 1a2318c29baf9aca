"""TensorRT-LLM across the pods of a LeaderWorkerSet group, under MPI.

TensorRT-LLM runs one rank per GPU; across nodes ``mpirun`` starts them, and
``trtllm-llmapi-launch`` makes rank 0 the ``trtllm-serve`` API server and the others its
MPI workers (TensorRT-LLM 1.x ``docs/source/commands/trtllm-serve/trtllm-serve.rst``,
"multi-node": ``mpirun -np 16 ... trtllm-llmapi-launch trtllm-serve MODEL --tp_size 16``).
As the Dynamo operator does it on a LeaderWorkerSet (ai-dynamo/dynamo
``deploy/operator/internal/dynamo/backend_trtllm.go`` and ``lws.go``, 1.x):

- every pod mounts the SSH keypair of a Secret (``kubernetes.ssh_secret``, keys
  ``private.key`` and ``private.key.pub``, Dynamo's names) at ``/ssh-pk``; the key is
  never written into the objects;
- the workers run ``sshd`` on port 2222 (Dynamo's ``MpiRunSshPort``) with a host key
  made at start and the public key as ``authorized_keys``; ``sshd`` gives a session none
  of the container's variables, so the worker writes its ``PATH`` and library paths to
  ``~/.ssh/environment`` (``PermitUserEnvironment``) for the MPI daemon;
- the leader waits (bounded by ``startup_timeout_s``) until it can reach every worker
  over SSH, then runs ``mpirun -np <GPUs per pod x nodes> -H <host>:<GPUs>,...``
  (called by its absolute path: Open MPI then finds its daemon at the same prefix on
  the workers) with the engine's variables forwarded (``-x``);
- the hosts are the group's pods by their DNS names under the LeaderWorkerSet's headless
  Service: the leader ``$LWS_LEADER_ADDRESS`` (``<lws>-<group>.<lws>.<namespace>``),
  worker ``i`` the same with ``-i`` before the first dot (``<lws>-<group>-<i>.<lws>...``),
  as Dynamo's ``LWSMultinodeDeployer.GetHostNames`` derives them;
  ``OMPI_MCA_orte_keep_fqdn_hostnames=1`` keeps them whole.

The ranks are split into ``--tp_size`` x ``--pp_size`` (the spellings trtllm-serve
documents from 0.18 to 1.x): pipeline parallel as ``--pp_size P`` in ``extra_args``
asks (1 by default), tensor parallel over the rest.
"""

from __future__ import annotations

import math
import shlex
from typing import Any

from ....errors import ConfigError
from ...launchplan import LaunchPlan
from .deployments import gpu_count
from .settings import KubeSettings, missing_secret

SSH_PORT = 2222
SSH_MOUNT = "/ssh-pk"
SSH_VOLUME = "mpi-ssh"
PRIVATE_KEY = "private.key"
PUBLIC_KEY = "private.key.pub"
#: Seconds between two tries to reach a worker over SSH.
SSH_RETRY_S = 5
#: Variables every rank gets from the leader when set there (Dynamo's common TRT-LLM
#: list, less the ones a pod sets for itself), besides the engine's own ``env``.
FORWARDED_ENV: tuple[str, ...] = (
    "HF_HOME", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT", "LD_LIBRARY_PATH",
    "PATH", "PYTHONPATH", "TOKENIZERS_PARALLELISM", "NCCL_DEBUG", "NCCL_IB_DISABLE",
    "NCCL_P2P_DISABLE", "TENSORRT_LLM_CACHE_DIR", "TRTLLM_USE_UCX_KVCACHE",
)  # fmt: skip
#: What a worker's SSH sessions (the MPI daemon) get of its container's environment.
SESSION_ENV = ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "OPAL_PREFIX", "CUDA_HOME")
TP_FLAGS = ("--tp_size", "--tensor_parallel_size")
PP_FLAGS = ("--pp_size", "--pipeline_parallel_size")


def _flag_values(args: list[str], flags: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """``args`` without ``flags`` (``--f V`` and ``--f=V``), and the values they had."""
    out: list[str] = []
    values: list[str] = []
    it = iter(args)
    for a in it:
        name, eq, value = a.partition("=")
        if name in flags:
            values.append(value if eq else next(it, ""))
        else:
            out.append(a)
    return out, values


def parallel_sizes(args: list[str], ranks: int, where: str = "") -> tuple[list[str], int, int]:
    """``args`` without their tp/pp flags, and the ``(tp, pp)`` of ``ranks`` GPUs."""
    args, _ = _flag_values(args, TP_FLAGS)
    args, pps = _flag_values(args, PP_FLAGS)
    pp = 1
    if pps:
        if not pps[-1].isdigit() or int(pps[-1]) < 1 or ranks % int(pps[-1]):
            raise ConfigError(
                f"{where}--pp_size {pps[-1]!r} does not divide the {ranks} GPUs of the group "
                "(GPUs per pod x kubernetes.nodes): give a divisor of it"
            )
        pp = int(pps[-1])
    return args, ranks // pp, pp


def worker_hosts(nodes: int) -> list[str]:
    """Shell expressions of the DNS names of the group's pods, the leader first."""
    return ['"$LWS_LEADER_ADDRESS"'] + [
        f'"$(echo "$LWS_LEADER_ADDRESS" | sed \'s/\\./-{i}./\')"' for i in range(1, nodes)
    ]


def _ssh_client() -> list[str]:
    return [
        'mkdir -p "$HOME/.ssh"',
        f'cp {SSH_MOUNT}/{PRIVATE_KEY} "$HOME/.ssh/id_llmslo"',
        'chmod 600 "$HOME/.ssh/id_llmslo"',
        f"printf 'Host *\\n  IdentityFile %s/.ssh/id_llmslo\\n  Port {SSH_PORT}\\n"
        "  StrictHostKeyChecking no\\n  UserKnownHostsFile /dev/null\\n  LogLevel ERROR\\n' "
        '"$HOME" > "$HOME/.ssh/config"',
    ]


def leader_script(
    serve: list[str], nodes: int, gpus: int, env_names: list[str], wait_s: float
) -> str:
    """The leader's shell script: reach every worker over SSH, then ``mpirun``."""
    hosts = worker_hosts(nodes)
    lines = ["set -e", *_ssh_client()]
    lines += [f"H{i}={h}" for i, h in enumerate(hosts)]
    tries = max(1, math.ceil(wait_s / SSH_RETRY_S))
    if nodes > 1:
        workers = " ".join(f'"$H{i}"' for i in range(1, nodes))
        lines.append(
            f"for h in {workers}; do n=0; "
            'until ssh -o ConnectTimeout=5 "$h" true; do n=$((n+1)); '
            f'if [ "$n" -ge {tries} ]; then echo "llmslo: worker $h does not answer SSH on '
            f'port {SSH_PORT} (is sshd in the image, and the Secret the same on every pod?)" '
            f">&2; exit 1; fi; sleep {SSH_RETRY_S}; done; done"
        )
    host_list = ",".join(f"$H{i}:{gpus}" for i in range(nodes))
    forward = " ".join(f"-x {name}" for name in sorted(set(env_names) | set(FORWARDED_ENV)))
    lines.append(
        'MPIRUN="$(command -v mpirun)"; ROOT=""; '
        'if [ "$(id -u)" = 0 ]; then ROOT=--allow-run-as-root; fi'
    )
    lines.append(
        f'exec "$MPIRUN" $ROOT -np {gpus * nodes} -H "{host_list}" --mca pml ob1 '
        f'--mca plm_rsh_args "-p {SSH_PORT} -F $HOME/.ssh/config" '
        f"{forward} trtllm-llmapi-launch {shlex.join(serve)}"
    )
    return "\n".join(lines)


def worker_script() -> str:
    """A worker's shell script: ``sshd`` in the foreground, reachable with the key."""
    keys = "$HOME/.ssh/host_keys"
    session = "|".join(SESSION_ENV)
    config = (
        f"Port {SSH_PORT}\\nHostKey %s/.ssh/host_keys/ssh_host_ed25519_key\\n"
        "PidFile %s/.ssh/sshd.pid\\nPermitRootLogin yes\\nPasswordAuthentication no\\n"
        "PubkeyAuthentication yes\\nStrictModes no\\nPermitUserEnvironment yes\\n"
        "AuthorizedKeysFile %s/.ssh/authorized_keys\\n"
    )
    return "\n".join([
        "set -e",
        'SSHD="$(command -v sshd || echo /usr/sbin/sshd)"',
        'if [ ! -x "$SSHD" ]; then echo "llmslo: this image has no sshd, which TRT-LLM '
        'across nodes needs on its workers (mpirun reaches them over SSH)" >&2; exit 1; fi',
        *_ssh_client(),
        f'mkdir -p "{keys}"',
        "mkdir -p /run/sshd 2>/dev/null || true",
        f'cp {SSH_MOUNT}/{PUBLIC_KEY} "$HOME/.ssh/authorized_keys"',
        'chmod 600 "$HOME/.ssh/authorized_keys"',
        f'ssh-keygen -q -t ed25519 -N "" -f "{keys}/ssh_host_ed25519_key"',
        f"printenv | grep -E '^({session})=' > \"$HOME/.ssh/environment\" || true",
        f"printf '{config}' \"$HOME\" \"$HOME\" \"$HOME\" > \"$HOME/.ssh/sshd_config\"",
        'exec "$SSHD" -D -e -f "$HOME/.ssh/sshd_config"',
    ])  # fmt: skip


def _ssh_parts(spec: dict[str, Any], secret: str) -> None:
    spec["volumes"].append(
        {"name": SSH_VOLUME, "secret": {"secretName": secret, "defaultMode": 0o400}}
    )
    main = spec["containers"][0]
    main["volumeMounts"].append({"name": SSH_VOLUME, "mountPath": SSH_MOUNT, "readOnly": True})
    main["env"].append({"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "1"})


def trtllm_templates(
    plan: LaunchPlan, settings: KubeSettings, leader: dict[str, Any], worker: dict[str, Any]
) -> None:
    """Make the leader's and the worker's pod specs (copies of the unit's) run TRT-LLM
    over MPI across the group."""
    config = plan.config
    if not settings.ssh_secret:
        raise ConfigError(f"engine {config.display_name!r}: {missing_secret(settings.nodes)}")
    gpus = gpu_count(plan.images[0].gpus, config.tensor_parallel_size)
    if gpus < 1:
        raise ConfigError(
            f"engine {config.display_name!r}: TRT-LLM across nodes needs GPUs on every pod "
            "(gpus = 'none' leaves none)"
        )
    main = leader["containers"][0]
    command = [*main.get("command", []), *main["args"]]
    where = f"engine {config.display_name!r}: "
    args, tp, pp = parallel_sizes(command[1:], gpus * settings.nodes, where)
    serve = [command[0], *args, "--tp_size", str(tp), "--pp_size", str(pp)]
    for spec in (leader, worker):
        _ssh_parts(spec, settings.ssh_secret)
    env_names = [e["name"] for e in main["env"] if not e["name"].startswith("OMPI_")]
    script = leader_script(serve, settings.nodes, gpus, env_names, config.startup_timeout_s)
    main["command"], main["args"] = ["sh", "-c"], [script]
    other = worker["containers"][0]
    other["command"], other["args"] = ["sh", "-c"], [worker_script()]
    other["ports"] = [{"containerPort": SSH_PORT, "name": "ssh"}]
