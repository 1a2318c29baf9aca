"""The docker runtime: an engine's image units run as docker containers (the ``docker``
SDK).

A unit's container is derived from its neutral description (:func:`container_spec`).
Containers use host networking (the engine binds the configured host and port, loopback
by default), ``--ipc=host`` (PyTorch's shared-memory tensors between workers), GPUs through
device requests, and the Hugging Face cache mounted so weights are downloaded once. Every
container carries ``io.llmslo.*`` labels naming the session and the owning pid, so that
:func:`reap_stale_containers` can remove what a crashed session left behind. A third stop
signal, which ends the process at once, removes this session's containers first
(``dockerkill.py``: bounded, through a client of its own).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import EngineStartError, EngineUnavailable
from ...redact import redact_argv, redact_env, redact_text, secret_values
from .. import lifecycle
from .._common import host_gpu_reason, image_tag
from ..base import EngineConfig
from ..launchplan import LaunchPlan
from ..units import ImageUnit
from .dockerkill import HARD_REMOVE_S, remove_now
from .runtime import HostNetwork, MarksPhases, Started, StartedUnit

LABEL_PREFIX = "io.llmslo"
LABEL_SESSION = f"{LABEL_PREFIX}.session"
LABEL_PID = f"{LABEL_PREFIX}.pid"
LABEL_PID_START = f"{LABEL_PREFIX}.pid-start"
LABEL_HOST = f"{LABEL_PREFIX}.host"
LABEL_ENGINE = f"{LABEL_PREFIX}.engine"
LABEL_KIND = f"{LABEL_PREFIX}.kind"
LABEL_ROLE = f"{LABEL_PREFIX}.role"

# One id per harness process: containers of this session are never reaped by it.
SESSION_ID = uuid.uuid4().hex
log = logging.getLogger(__name__)
CONTAINER_HF_CACHE = "/root/.cache/huggingface"

_counter_lock = threading.Lock()
_counter = 0


def host_hf_cache() -> str:
    """The Hugging Face cache of this machine (``HF_HOME`` or ``~/.cache/huggingface``)."""
    return os.environ.get("HF_HOME") or str(Path.home() / ".cache" / "huggingface")


def device_requests_for(gpus: str | None) -> list[dict[str, Any]]:
    """Docker device requests for a ``--gpus`` style value: ``all`` (default), a count
    (``2``), or device ids (``0,1`` / ``device=0,1``); ``none`` means no GPU."""
    value = (gpus or "all").strip()
    if value.lower() == "none":
        return []
    if value.lower() == "all":
        return [{"Driver": "", "Count": -1, "DeviceIDs": None, "Capabilities": [["gpu"]]}]
    if value.isdigit():
        return [{"Driver": "", "Count": int(value), "DeviceIDs": None, "Capabilities": [["gpu"]]}]
    ids = value.removeprefix("device=").split(",")
    ids = [i.strip() for i in ids if i.strip()]
    return [{"Driver": "", "Count": 0, "DeviceIDs": ids, "Capabilities": [["gpu"]]}]


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    """Everything one ``docker run`` needs, as plain data (tests compare it exactly)."""

    image: str
    command: tuple[str, ...]
    name: str
    env: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    # host path -> container path; the host paths in read_only are mounted read-only
    mounts: Mapping[str, str] = field(default_factory=dict)
    read_only: tuple[str, ...] = ()
    device_requests: tuple[Mapping[str, Any], ...] = ()
    entrypoint: tuple[str, ...] | None = None
    network_mode: str = "host"
    ipc_mode: str = "host"
    shm_size: str | None = None
    # tini as PID 1: it forwards SIGTERM to the engine (a bare PID 1 ignores it, so every
    # stop would wait out the grace period) and reaps the engine's zombie children.
    init: bool = True
    role: str = "engine"
    pull: bool = True
    # Shown when the image is missing and cannot be pulled.
    hint: str = ""

    @property
    def needs_gpu(self) -> bool:
        return bool(self.device_requests)

    def run_kwargs(self) -> dict[str, Any]:
        """The keyword arguments for ``client.containers.create`` (exactly what runs)."""
        from docker.types import DeviceRequest

        kw: dict[str, Any] = {
            "image": self.image,
            "command": list(self.command),
            "name": self.name,
            "environment": dict(self.env),
            "labels": dict(self.labels),
            "network_mode": self.network_mode,
            "ipc_mode": self.ipc_mode,
            "volumes": {
                h: {"bind": c, "mode": "ro" if h in self.read_only else "rw"}
                for h, c in self.mounts.items()
            },
            "device_requests": [
                DeviceRequest(
                    driver=d.get("Driver", ""),
                    count=d.get("Count", 0),
                    device_ids=d.get("DeviceIDs"),
                    capabilities=d.get("Capabilities"),
                )
                for d in self.device_requests
            ],
            "init": self.init,
            "detach": True,
        }
        if self.entrypoint is not None:
            kw["entrypoint"] = list(self.entrypoint)
        if self.shm_size:
            kw["shm_size"] = self.shm_size
        return kw

    def describe(self) -> dict[str, Any]:
        secrets = secret_values(self.env, self.command)
        return {
            "role": self.role,
            "name": self.name,
            "image": self.image,
            "entrypoint": list(self.entrypoint) if self.entrypoint is not None else None,
            "command": redact_argv(self.command, secrets),
            "env": redact_env(self.env),
            "mounts": dict(self.mounts),
            "read_only": list(self.read_only),
            "gpus": [dict(d) for d in self.device_requests],
            "network_mode": self.network_mode,
            "ipc_mode": self.ipc_mode,
        }


def session_labels(config: EngineConfig, role: str) -> dict[str, str]:
    pid = os.getpid()
    return {
        LABEL_SESSION: SESSION_ID,
        LABEL_PID: str(pid),
        LABEL_PID_START: lifecycle.process_start_time(pid) or "",
        LABEL_HOST: socket.gethostname(),
        LABEL_ENGINE: config.display_name,
        LABEL_KIND: config.kind,
        LABEL_ROLE: role,
    }


def _container_name(config: EngineConfig, role: str) -> str:
    global _counter
    with _counter_lock:
        _counter += 1
        n = _counter
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in config.display_name)
    return f"llmslo-{safe}-{role}-{SESSION_ID[:8]}-{n}"


def container_spec(config: EngineConfig, unit: ImageUnit) -> ContainerSpec:
    """The container of one image unit: its env, the session labels, its mounts, the HF
    cache (``HF_HOME`` inside points at it) when the unit keeps one, and device requests
    for its ``gpus`` (none when it uses no GPU)."""
    # The harness's own secrets (the sim's admin token) as the container's environment:
    # the container runs on this host, like a process would.
    env = {**unit.secret_env, **unit.env}
    # A local model directory is seen at the same path inside, read-only: the engine runs
    # as root in there and has no business writing the weights.
    mounts: dict[str, str] = {path: path for path in unit.read_only}
    if unit.hf_cache:
        mounts[host_hf_cache()] = CONTAINER_HF_CACHE
        env.setdefault("HF_HOME", CONTAINER_HF_CACHE)
    mounts.update(unit.mounts)
    gpus = device_requests_for(unit.gpus) if unit.gpus is not None else []
    return ContainerSpec(
        image=unit.image,
        command=tuple(unit.command),
        name=_container_name(config, unit.role),
        env=env,
        labels=session_labels(config, unit.role),
        mounts=mounts,
        read_only=unit.read_only,
        device_requests=tuple(gpus),
        entrypoint=unit.entrypoint,
        role=unit.role,
        pull=unit.pull,
        hint=unit.hint,
        shm_size=unit.shm,
    )


def container_specs(plan: LaunchPlan) -> tuple[ContainerSpec, ...]:
    """The containers of ``plan.images``, in order (each with a name of its own)."""
    return tuple(container_spec(plan.config, unit) for unit in plan.images)


def docker_client() -> Any:
    """A connected docker client, or ``EngineUnavailable`` saying why there is none."""
    try:
        from docker.errors import DockerException

        import docker
    except ImportError:
        raise EngineUnavailable("the docker Python package is not installed") from None
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except DockerException as exc:
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise EngineUnavailable(
            f"docker daemon not reachable at {host} ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0][:200] if str(exc) else ''}); start dockerd or set "
            'runtime = "process"'
        ) from None
    global _api_version
    _api_version = getattr(getattr(client, "api", None), "api_version", None)
    return client


_api_version: str | None = None  # the daemon's, once a client talked to it


def _connect_for_kill() -> Any:
    """A client of its own for a hard exit, with a short timeout and the API version known
    (no probe of the daemon first)."""
    import docker

    return docker.from_env(timeout=int(HARD_REMOVE_S) + 1, version=_api_version or "auto")


def kill_session_containers() -> None:
    """Remove this session's containers now, within ``dockerkill.HARD_REMOVE_S``: the fast
    kill a third stop signal runs before the process ends (``lifecycle.kill_all_now``)."""
    remove_now(f"{LABEL_SESSION}={SESSION_ID}", _connect_for_kill)


def gpu_unavailable_reason(info: Mapping[str, Any]) -> str | None:
    """Why GPU containers cannot run here, or None when they can."""
    host = host_gpu_reason()
    if host:
        return host
    runtimes = info.get("Runtimes") or {}
    cdi = any(Path(d).exists() for d in ("/etc/cdi/nvidia.yaml", "/var/run/cdi/nvidia.yaml"))
    if "nvidia" not in runtimes and not cdi and shutil.which("nvidia-container-cli") is None:
        return "docker has no NVIDIA runtime (install nvidia-container-toolkit)"
    return None


def _ensure_image(client: Any, spec: ContainerSpec) -> None:
    from docker.errors import DockerException, ImageNotFound

    try:
        client.images.get(spec.image)
        return
    except ImageNotFound:
        pass
    if not spec.pull:
        raise EngineUnavailable(
            f"docker image {spec.image} is not present locally"
            + (f"; {spec.hint}" if spec.hint else "")
        )
    repo, _, tag = spec.image.rpartition(":")
    if not repo or "/" in tag:
        repo, tag = spec.image, "latest"
    try:
        client.images.pull(repo, tag=tag)
    except DockerException as exc:
        raise EngineUnavailable(
            f"docker image {spec.image} is not present locally and could not be pulled: "
            f"{str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}"
        ) from None


class ManagedContainer:
    """A started container; ``stop()`` stops and removes it (idempotent)."""

    def __init__(self, client: Any, spec: ContainerSpec, *, grace_s: int = 15) -> None:
        from docker.errors import APIError

        self.spec = spec
        self.grace_s = grace_s
        self._client = client
        self._secrets = secret_values(spec.env, spec.command)
        self._stopped = False
        self._lock = threading.Lock()
        self._last_logs = ""
        self.container: Any = None
        # Registered before the container exists, and found by its name until create
        # returns: a Ctrl-C or SIGTERM between the two leaves nothing behind.
        self._token = lifecycle.register(self.stop, kill=kill_session_containers)
        #: When its image was on the host, the container created and started
        #: (``time.monotonic()``): the marks of its cold start (``coldstart.py``).
        self.image_ready_at: float | None = None
        self._marks: dict[str, float] = {}
        try:
            self.container = client.containers.create(**spec.run_kwargs())
            self._marks["container_created_s"] = time.monotonic()
        except APIError as exc:
            self.stop()
            raise EngineStartError(
                f"cannot create container {spec.name} from {spec.image}: {self._clean(exc)}"
            ) from None
        except BaseException:
            self.stop()
            raise
        try:
            self.container.start()
            self._marks["container_started_s"] = time.monotonic()
        except APIError as exc:
            tail = self.log_tail(60)
            self.stop()
            raise EngineStartError(
                f"cannot start container {spec.name} ({spec.image}): {self._clean(exc)}", tail
            ) from None
        self.id = self.container.id

    def _clean(self, exc: BaseException) -> str:
        return redact_text(str(exc), self._secrets)[:500]

    def alive(self) -> bool:
        if self._stopped:
            return False
        try:
            self.container.reload()
        except Exception:
            return False
        return self.container.status in ("created", "running", "restarting")

    def returncode(self) -> int | None:
        try:
            self.container.reload()
            state = self.container.attrs.get("State", {})
        except Exception:
            return None
        return None if state.get("Running") else state.get("ExitCode")

    def log_tail(self, lines: int = 40) -> str:
        if not self._stopped:
            try:
                raw = self.container.logs(tail=lines)
                self._last_logs = raw.decode("utf-8", errors="replace")
            except Exception:
                pass
        return redact_text("\n".join(self._last_logs.splitlines()[-lines:]), self._secrets)

    def describe(self) -> dict[str, Any]:
        d = self.spec.describe()
        d["id"] = getattr(self, "id", None) and self.id[:12]
        return d

    def marks(self) -> dict[str, float]:
        """The phases of its start this unit saw (``coldstart.py``)."""
        out = dict(self._marks)
        if self.image_ready_at is not None:
            out["image_pulled_s"] = self.image_ready_at
        return out

    def stop(self) -> None:
        from docker.errors import NotFound

        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            container = self.container
            if container is None:
                # Interrupted while being created: the daemon may have made it anyway.
                try:
                    container = self._client.containers.get(self.spec.name)
                except Exception:
                    container = None
            # Keep the last logs: after removal they are gone, and a failure report needs them.
            if container is not None:
                with contextlib.suppress(Exception):
                    self._last_logs = container.logs(tail=200).decode("utf-8", errors="replace")
        try:
            if container is not None:
                with contextlib.suppress(NotFound):
                    container.stop(timeout=self.grace_s)
        except Exception:
            pass
        finally:
            if container is not None:
                with contextlib.suppress(NotFound, Exception):
                    container.remove(force=True)
            lifecycle.unregister(self._token)


def start_containers(specs: Sequence[ContainerSpec]) -> list[ManagedContainer]:
    """Check docker (and GPUs where needed), make sure the images are there, start each
    spec in order; on a failure stop those already started. The first call of a process
    also removes the containers that crashed sessions left (:func:`reap_stale_containers`)."""
    client = docker_client()
    reap_once(client)
    if any(s.needs_gpu for s in specs):
        reason = gpu_unavailable_reason(client.info())
        if reason:
            raise EngineUnavailable(reason)
    for spec in specs:
        _ensure_image(client, spec)
    images_ready = time.monotonic()
    started: list[ManagedContainer] = []
    try:
        for spec in specs:
            started.append(ManagedContainer(client, spec))
            started[-1].image_ready_at = images_ready
    except BaseException:
        for c in reversed(started):
            c.stop()
        raise
    return started


def is_stale(labels: Mapping[str, str], hostname: str | None = None) -> bool:
    """True when the session that labelled a container is gone: its pid is dead or now
    belongs to another process. Containers of this session and of other hosts are kept."""
    if labels.get(LABEL_SESSION) == SESSION_ID:
        return False
    if labels.get(LABEL_HOST, "") not in ("", hostname or socket.gethostname()):
        return False
    try:
        pid = int(labels.get(LABEL_PID, ""))
    except ValueError:
        return True
    if not lifecycle.pid_alive(pid):
        return True
    started = labels.get(LABEL_PID_START)
    now = lifecycle.process_start_time(pid)
    return bool(started and now and started != now)


def reap_stale_containers(client: Any = None) -> list[str]:
    """Remove containers left by dead sessions (:func:`is_stale`: the owning pid on this
    host is gone or belongs to another process); ``[]`` when docker is not available."""
    if client is None:
        try:
            client = docker_client()
        except EngineUnavailable:
            return []
    removed: list[str] = []
    try:
        found = client.containers.list(all=True, filters={"label": LABEL_SESSION})
    except Exception as exc:
        log.warning("cannot list containers to reap: %s", exc)
        return []
    for c in found:
        if is_stale(c.labels or {}):
            with contextlib.suppress(Exception):
                c.remove(force=True)
                removed.append(c.name)
    if removed:
        log.warning(
            "removed %d container(s) left by sessions that are gone: %s",
            len(removed),
            ", ".join(removed),
        )
    return removed


_reap_lock = threading.Lock()
_reaped = False


def reap_once(client: Any) -> list[str]:
    """:func:`reap_stale_containers` the first time a process starts containers; later
    calls do nothing (``[]``). A failure to reap never stops an engine from starting."""
    global _reaped
    with _reap_lock:
        if _reaped:
            return []
        _reaped = True
    try:
        return reap_stale_containers(client)
    except Exception as exc:  # best effort
        log.warning("reaping stale containers failed: %s", exc)
        return []


# A container marks the phases of its start it saw (mypy checks it).
_MARKS: type[MarksPhases] = ManagedContainer


class DockerRuntime(HostNetwork):
    """Runs ``plan.images`` as docker containers on this machine's network."""

    name = "docker"

    def units(self, plan: LaunchPlan) -> Sequence[ImageUnit]:
        return plan.images

    def check(self, plan: LaunchPlan) -> None:
        """Docker, its GPUs and the images are checked by :meth:`start`, in that order."""

    def start(self, plan: LaunchPlan) -> Started:
        if not plan.images:
            return Started()
        return Started(list(start_containers(container_specs(plan))))

    def known_version(self, plan: LaunchPlan) -> str | None:
        return image_tag(plan.images[0].image) if plan.images else None

    def fallback_version(self, plan: LaunchPlan) -> str | None:
        return None

    def reap(self) -> list[str]:
        return reap_stale_containers()

    # Faults (docker SDK 7: Container.kill, .start, .pause, .unpause).

    def kill(self, unit: StartedUnit) -> dict[str, Any]:
        """``docker kill`` (SIGKILL): the container exits; it stays, stopped, until the
        engine stops (and is removed with it)."""
        container = _container(unit)
        container.kill(signal="SIGKILL")
        return {"container": container.id[:12], "signal": "SIGKILL",
                "killed_unix": round(time.time(), 3)}  # fmt: skip

    def restart(self, unit: StartedUnit) -> dict[str, Any]:
        """``docker kill`` then ``docker start``: the same container, its engine started
        again from its entrypoint."""
        done = self.kill(unit)
        container = _container(unit)
        container.wait(timeout=30)
        container.start()
        return {**done, "started_unix": round(time.time(), 3)}

    def stall(self, unit: StartedUnit, for_s: float) -> dict[str, Any]:
        """``docker pause`` (the cgroup freezer), ``docker unpause`` ``for_s`` later."""
        container = _container(unit)
        container.pause()
        timer = threading.Timer(for_s, _unpause, (container,))
        timer.daemon = True
        timer.start()
        return {"container": container.id[:12], "paused_unix": round(time.time(), 3),
                "for_s": for_s}  # fmt: skip


def _container(unit: StartedUnit) -> Any:
    container = getattr(unit, "container", None)
    if not isinstance(unit, ManagedContainer) or container is None:
        raise TypeError(
            f"the docker runtime runs ManagedContainer units, not {type(unit).__name__}"
        )
    return container


def _unpause(container: Any) -> None:
    with contextlib.suppress(Exception):  # stopped and removed meanwhile
        container.unpause()
