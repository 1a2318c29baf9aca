"""Where the workers' key comes from: the environment, a named file, or the default file a
session makes (random, its user's alone) and its workers read; never printed."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from pytest_llmslo.errors import LoadError
from pytest_llmslo.load.remote import WorkerHub
from pytest_llmslo.load.workerkey import (
    KEY_ENV,
    KEY_FILE_ENV,
    default_key_path,
    session_key,
    worker_key,
)


@pytest.fixture(autouse=True)
def _own_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A config directory of each test's own: no default key file yet."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def test_a_session_makes_a_random_key_its_user_alone_reads_and_workers_find_it() -> None:
    path = default_key_path()
    assert not path.exists()
    made = session_key()
    assert made.path == str(path) and len(made.secret) == 64
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) & 0o077 == 0
    assert session_key().secret == made.secret  # kept, not made again
    assert worker_key().secret == made.secret
    assert made.secret.decode() not in repr(made)


def test_the_printed_worker_command_names_the_file_never_the_key() -> None:
    hub = WorkerHub("127.0.0.1:0", 1, wait_s=0.1)
    hub.open()
    try:
        assert hub.key is not None
        assert f"--key-file {hub.key.path}" in hub.worker_command
        assert hub.key.secret.decode() not in hub.worker_command
        with pytest.raises(LoadError) as err:
            hub.ensure()
        assert "--key-file" in str(err.value) and hub.key.secret.decode() not in str(err.value)
    finally:
        hub.close()


def test_the_environment_wins_and_a_short_key_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(KEY_ENV, "x" * 20)
    assert session_key().secret == b"x" * 20 and session_key().path is None
    assert "LLMSLO_WORKER_KEY" in session_key().worker_option
    monkeypatch.setenv(KEY_ENV, "short")
    with pytest.raises(LoadError, match="fewer than 16"):
        session_key()
    monkeypatch.delenv(KEY_ENV)
    named = tmp_path / "k"
    named.write_text("y" * 40 + "\n")
    named.chmod(0o600)
    monkeypatch.setenv(KEY_FILE_ENV, str(named))
    assert worker_key().secret == b"y" * 40


def test_a_key_file_others_may_read_is_refused(tmp_path: Path) -> None:
    named = tmp_path / "k"
    named.write_text("z" * 40)
    named.chmod(0o644)
    with pytest.raises(LoadError, match="chmod 600"):
        worker_key(str(named))


def test_a_worker_without_a_key_says_where_to_put_one() -> None:
    assert not default_key_path().exists()
    with pytest.raises(LoadError, match="--key-file"):
        worker_key()


def test_the_session_listens_with_the_key_file_named_on_its_command_line(
    tmp_path: Path,
) -> None:
    from pytest_llmslo import settings as S
    from pytest_llmslo.session.workers import RemoteWorkers

    named = tmp_path / "team.key"
    named.write_text("t" * 48)
    named.chmod(0o600)
    cli = {"worker_listen": "127.0.0.1:0", "worker_key_file": str(named)}
    said: list[str] = []
    workers = RemoteWorkers()
    workers.open(S.resolve_session(S.Sources(cli=cli)), said.append)
    try:
        assert workers.hub is not None and workers.hub.key.secret == b"t" * 48
        (line,) = said
        assert f"--key-file {named}" in line and "t" * 48 not in line
    finally:
        workers.close()
