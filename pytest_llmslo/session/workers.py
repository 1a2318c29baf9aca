"""The session's remote load workers (``--worker-listen``): ``RemoteWorkers``, their
listener (``load.remote.WorkerHub``), opened while the engines start so that the workers
can join, and their Kubernetes Indexed Job (``--worker-image``); closed at session end."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pytest_llmslo import settings as S

if TYPE_CHECKING:
    from pytest_llmslo.load.remote import WorkerHub

__all__ = ["RemoteWorkers"]


class RemoteWorkers:
    """The listener of the session's remote load workers (``hub``, None: local processes
    only) and the Kubernetes Job that runs them (``job``, if any)."""

    def __init__(self) -> None:
        self.hub: WorkerHub | None = None
        self.job: Any = None

    def open(self, ss: S.SessionSettings, say: Callable[[str], None]) -> None:
        """Listen for the workers ``ss`` asks for (none: nothing), and start their Job when
        it names an image; ``ConfigError`` when the options do not go together."""
        from pytest_llmslo.errors import ConfigError, LoadError
        from pytest_llmslo.load.remote import WorkerHub
        from pytest_llmslo.load.workerkey import session_key

        if ss.worker_listen is None or self.hub is not None:
            return
        try:
            key = session_key(ss.worker_key_file)
            hub = WorkerHub(
                ss.worker_listen, ss.remote_workers, ss.worker_wait_s, key, _worker_tls(ss)
            )
            hub.open()
        except LoadError as exc:
            raise ConfigError(str(exc)) from None
        self.hub = hub
        say(
            f"listening for {ss.remote_workers} remote load worker(s) on {hub.address}"
            + (" (TLS)" if hub.tls is not None else "")
            + f", each proving it holds the key in {key.where}: start each with "
            f"`{hub.worker_command}`"
        )
        if ss.worker_image:
            try:
                self.job = _start_worker_job(ss, hub, say)
            except Exception:
                self.close()
                raise

    def close(self) -> None:
        """Release the workers (they exit), delete their Job, stop listening."""
        if self.hub is not None:
            self.hub.close()
            self.hub = None
        if self.job is not None:
            self.job.stop()
            self.job = None


def _worker_tls(ss: Any) -> Any:
    """The TLS context of the workers' link (``load.linktls``), None without a
    certificate; ``LoadError`` when the options do not go together."""
    from pytest_llmslo.errors import LoadError
    from pytest_llmslo.load.linktls import server_context

    if ss.worker_tls_cert is None:
        if ss.worker_tls_key is not None or ss.worker_tls_ca is not None:
            raise LoadError(
                "--slo-worker-tls-key/--slo-worker-tls-ca need --slo-worker-tls-cert (the "
                "session's certificate)"
            )
        return None
    if ss.worker_tls_key is None:
        raise LoadError("--slo-worker-tls-cert needs --slo-worker-tls-key (its key)")
    return server_context(ss.worker_tls_cert, ss.worker_tls_key, ss.worker_tls_ca)


def _start_worker_job(ss: S.SessionSettings, hub: WorkerHub, say: Callable[[str], None]) -> Any:
    """The workers as a Kubernetes Indexed Job (``engines.runtimes.k8s.workerjob``),
    connecting to ``--worker-advertise`` or, for a wildcard listen address, this host's."""
    import socket

    from pytest_llmslo.engines.runtimes.k8s.apply import reason_of
    from pytest_llmslo.engines.runtimes.k8s.kubeclient import cluster
    from pytest_llmslo.engines.runtimes.k8s.settings import KubeSettings
    from pytest_llmslo.engines.runtimes.k8s.workerjob import WorkerJob, WorkerJobSpec
    from pytest_llmslo.errors import ConfigError, EngineUnavailable

    host, port = hub.host, hub.port
    address = ss.worker_advertise
    if address is None:
        if host in ("", "0.0.0.0", "::"):
            host = socket.gethostbyname(socket.gethostname())
        address = f"{host}:{port}"
    key = os.environ.get("LLMSLO_WORKER_KEY_SECRET")  # "secret/key" of the shared key
    secret_name, slash, secret_key = (key or "").partition("/")
    secret = (secret_name, secret_key) if slash else None
    hub_key = hub.key
    try:
        where = cluster(KubeSettings())
        spec = WorkerJobSpec(
            workers=ss.remote_workers,
            image=ss.worker_image or "",
            address=address,
            namespace=where.namespace,
            key_secret=secret,
            # No Secret named: the launcher makes one of the session's key.
            key=hub_key.secret if secret is None and hub_key is not None else None,
        )
        job = WorkerJob(where, spec)
        job.start()
    except EngineUnavailable as exc:
        raise ConfigError(f"--worker-image: {exc}") from None
    except Exception as exc:
        raise ConfigError(
            f"--worker-image: cannot create the workers' Job: {reason_of(exc)}"
        ) from None
    say(
        f"started {spec.workers} load worker pod(s) (Job {spec.name} in {spec.namespace}), "
        f"connecting to {address}"
    )
    return job
