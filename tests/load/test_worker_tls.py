"""TLS on the remote workers' link, mutual when the session names a CA for its workers
(docs/security.md), with certificates the test makes (the ``openssl`` command)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pytest_llmslo.errors import LoadError
from pytest_llmslo.load import ClientSettings, LoadJob, WorkloadSpec, run_load_sync
from pytest_llmslo.load.handshake import join_session
from pytest_llmslo.load.linktls import client_context, server_context
from pytest_llmslo.load.protocol import ProtocolError
from pytest_llmslo.load.remote import WorkerHub, parse_address
from pytest_llmslo.load.remote_worker import _wrap
from pytest_llmslo.load.workerkey import KEY_ENV, WorkerKey
from pytest_llmslo.records import LoadLevel

from .conftest import fixed_server
from .remote_helpers import ROOT

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
KEY = WorkerKey(b"q" * 32)
SERVER = ("--ttft-ms", "20", "--itl-ms", "5", "--tokens", "10", "--loop", "asyncio")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(d: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
             "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={name}", cwd=d)  # fmt: skip


def _signed(d: Path, name: str, ca: str, san: str | None) -> None:
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
             f"{name}.csr", "-subj", f"/CN={name}", cwd=d)  # fmt: skip
    ext = d / f"{name}.ext"
    ext.write_text(f"subjectAltName={san}\n" if san else "basicConstraints=CA:FALSE\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", str(ext),
             cwd=d)  # fmt: skip


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("certs")
    _ca(d, "ca")
    _ca(d, "rogue")
    _signed(d, "session", "ca", "IP:127.0.0.1,DNS:localhost")
    _signed(d, "worker", "ca", None)
    return d


def _hub(certs: Path, n: int = 1, mutual: bool = True) -> WorkerHub:
    ctx = server_context(
        str(certs / "session.pem"), str(certs / "session.key"),
        str(certs / "ca.pem") if mutual else None,
    )  # fmt: skip
    hub = WorkerHub("127.0.0.1:0", n, wait_s=60, key=KEY, tls=ctx)
    hub.handshake_s = 2.0
    hub.open()
    return hub


def test_a_level_runs_over_mutual_tls(certs: Path) -> None:
    with fixed_server(*SERVER) as url:
        hub = _hub(certs)
        assert "--tls-ca" in hub.worker_command and "--tls-cert" in hub.worker_command
        cmd = [
            sys.executable, "-m", "pytest_llmslo.cli", "worker", "--connect", hub.address,
            "--name", "tls-w", "--connect-timeout", "30", "--tls-ca", str(certs / "ca.pem"),
            "--tls-cert", str(certs / "worker.pem"), "--tls-key", str(certs / "worker.key"),
        ]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(ROOT), KEY_ENV: KEY.secret.decode()}
        with subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True) as worker:
            try:
                (link,) = hub.ensure()
                assert link.conn.sock.version() in ("TLSv1.2", "TLSv1.3")  # type: ignore[attr-defined]
                run = run_load_sync(
                    LoadJob(
                        ClientSettings(url, "fixed"),
                        WorkloadSpec(isl=8, osl=10, calibrate=False, seed=3),
                        LoadLevel.concurrency(8),
                        requests=200,
                        warmup=8,
                        workers=hub,
                    )
                )
            finally:
                hub.close()
            _, err = worker.communicate(timeout=30)
        assert worker.returncode == 0, err
        assert sorted(r.index for r in run.records) == list(range(8, 208))
        assert all(r.ok for r in run.records) and not run.meta["remote"]["lost"]


def _try_join(hub: WorkerHub, tls: object | None) -> Exception | None:
    sock = socket.create_connection(parse_address(hub.address), timeout=10)
    try:
        if tls is not None:
            sock = _wrap(sock, tls, "127.0.0.1", 10)  # type: ignore[arg-type]
        join_session(sock, KEY.secret, "x")
    except (ProtocolError, LoadError) as exc:
        return exc
    finally:
        sock.close()
    return None


def test_a_worker_without_tls_or_without_its_certificate_is_turned_away(certs: Path) -> None:
    hub = _hub(certs)
    try:
        assert isinstance(_try_join(hub, None), ProtocolError)  # plain TCP
        bare = client_context(str(certs / "ca.pem"))  # no worker certificate
        assert _try_join(hub, bare) is not None
        threading.Event().wait(0.2)
        assert hub.turned_away >= 2 and not hub.links
    finally:
        hub.close()


def test_a_worker_refuses_a_session_its_ca_did_not_sign(certs: Path) -> None:
    hub = _hub(certs, mutual=False)
    try:
        rogue = client_context(str(certs / "rogue.pem"))
        err = _try_join(hub, rogue)
        assert isinstance(err, ProtocolError) and "TLS with the session" in str(err)
        ok = client_context(str(certs / "ca.pem"))
        assert _try_join(hub, ok) is None  # the right CA: joined
    finally:
        hub.close()


def test_unreadable_certificates_are_named() -> None:
    with pytest.raises(LoadError, match="cannot load the certificate"):
        server_context("/nonexistent.pem", "/nonexistent.key")
    with pytest.raises(LoadError, match="--tls-ca: cannot load the CA"):
        client_context("/nonexistent-ca.pem")


def test_the_session_options_turn_tls_on_and_must_go_together(certs: Path) -> None:
    from pytest_llmslo import settings as S
    from pytest_llmslo.errors import ConfigError
    from pytest_llmslo.session.workers import RemoteWorkers

    said: list[str] = []

    def opened(**cli: str) -> RemoteWorkers:
        workers = RemoteWorkers()
        src = S.Sources(cli={"worker_listen": "127.0.0.1:0", **cli})
        workers.open(S.resolve_session(src), said.append)
        return workers

    on = opened(
        worker_tls_cert=str(certs / "session.pem"), worker_tls_key=str(certs / "session.key")
    )
    try:
        assert on.hub is not None and on.hub.tls is not None
        assert "(TLS)" in said[0] and "--tls-ca" in said[0]
    finally:
        on.close()
    with pytest.raises(ConfigError, match="needs --slo-worker-tls-key"):
        opened(worker_tls_cert=str(certs / "session.pem"))
    with pytest.raises(ConfigError, match="need --slo-worker-tls-cert"):
        opened(worker_tls_ca=str(certs / "ca.pem"))


def test_a_peer_trickling_a_tls_hello_is_cut_at_the_handshakes_time(certs: Path) -> None:
    hub = _hub(certs)  # handshake_s = 2.0
    try:
        peer = socket.create_connection(parse_address(hub.address), timeout=10)
        with peer:
            peer.sendall(b"\x16\x03\x01\x02\x00")  # a TLS record of 512 bytes, announced
            start = time.monotonic()
            cut = False
            while time.monotonic() - start < 8:
                try:
                    peer.sendall(b"\x01")  # a byte every 0.3 s: no read ever times out
                except OSError:
                    cut = True
                    break
                time.sleep(0.3)
            assert cut, "the trickling peer was never cut"
            assert time.monotonic() - start < 5
        assert not hub.links
    finally:
        hub.close()
