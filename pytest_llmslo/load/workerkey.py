"""The key a session and its remote load workers share: where it comes from, and the file
a session makes when it is given none.

A session that listens for workers always requires a key (``handshake.py``). It takes,
in order: ``LLMSLO_WORKER_KEY`` (the key itself), the file ``--slo-worker-key-file``
or ``LLMSLO_WORKER_KEY_FILE`` names, or the default file
(``$XDG_CONFIG_HOME/llmslo/worker.key``, ``~/.config/llmslo/worker.key``), which it
creates when it does not exist: 32 random bytes (``secrets``), hex, in a file only its
user can read (0600, in a 0700 directory). A worker looks in the same places, but never
creates a key: without one it says where to put the session's.

A key file is read bounded (``MAX_KEY_FILE`` bytes) and refused, as ssh refuses a private
key, when others than its owner may read it; the key is never printed, only where it is.
"""

from __future__ import annotations

import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from ..errors import LoadError

__all__ = [
    "KEY_ENV",
    "KEY_FILE_ENV",
    "MAX_KEY_FILE",
    "WorkerKey",
    "create_key_file",
    "default_key_path",
    "read_key_file",
    "session_key",
    "worker_key",
]

#: The environment variable that holds the key itself.
KEY_ENV = "LLMSLO_WORKER_KEY"
#: The environment variable that names a file holding the key.
KEY_FILE_ENV = "LLMSLO_WORKER_KEY_FILE"
MAX_KEY_FILE = 4096
_MIN_KEY = 16  # bytes of a key from a file or the environment


@dataclass(frozen=True, slots=True)
class WorkerKey:
    """A shared key and where it came from (``path``: its file, None for the
    environment). ``repr`` leaves the key out."""

    secret: bytes
    path: str | None = None

    def __repr__(self) -> str:
        return f"WorkerKey(path={self.path!r})"

    @property
    def worker_option(self) -> str:
        """How the printed worker command hands the key over, without the key."""
        if self.path is None:
            return f"(with {KEY_ENV} set to the session's key)"
        return f"--key-file {self.path}"

    @property
    def where(self) -> str:
        return f"the key file {self.path}" if self.path else KEY_ENV


def default_key_path() -> Path:
    """``$XDG_CONFIG_HOME/llmslo/worker.key`` (``~/.config`` without it)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "llmslo" / "worker.key"


def read_key_file(path: str | os.PathLike[str]) -> bytes:
    """The key in ``path``: bounded, its owner's alone, not empty, not short."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise LoadError(f"cannot read the worker key file {p} ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise LoadError(f"the worker key file {p} is not a regular file")
        if st.st_mode & 0o077:
            raise LoadError(
                f"the worker key file {p} may be read by others than its owner (mode "
                f"{stat.S_IMODE(st.st_mode):o}): run `chmod 600 {p}`"
            )
        data = os.read(fd, MAX_KEY_FILE + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_KEY_FILE:
        raise LoadError(f"the worker key file {p} holds more than {MAX_KEY_FILE} bytes")
    key = data.strip()
    if len(key) < _MIN_KEY:
        raise LoadError(
            f"the worker key file {p} holds a key of {len(key)} bytes, fewer than {_MIN_KEY}: "
            "delete it and let a session make one, or write a longer random one"
        )
    return key


def create_key_file(path: str | os.PathLike[str]) -> bytes:
    """A new random key in ``path``, readable by its user alone (fails if it exists)."""
    p = Path(path)
    p.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = secrets.token_hex(32).encode()
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, key + b"\n")
    finally:
        os.close(fd)
    return key


def _from_env() -> WorkerKey | None:
    value = os.environ.get(KEY_ENV)
    if not value:
        return None
    if len(value.encode()) < _MIN_KEY:
        raise LoadError(
            f"{KEY_ENV} holds a key of {len(value.encode())} bytes, fewer than {_MIN_KEY}: "
            "use a long random one (`python -c 'import secrets; print(secrets.token_hex(32))'`)"
        )
    return WorkerKey(value.encode())


def _named_file(key_file: str | None) -> str | None:
    return key_file or os.environ.get(KEY_FILE_ENV) or None


def _given_key(key_file: str | None) -> WorkerKey | None:
    """The key the user gave, session and worker alike: the environment's, else the file
    named (``key_file`` or ``LLMSLO_WORKER_KEY_FILE``); None when neither is given."""
    env = _from_env()
    if env is not None:
        return env
    named = _named_file(key_file)
    if named is not None:
        return WorkerKey(read_key_file(named), os.path.abspath(named))
    return None


def session_key(key_file: str | None = None) -> WorkerKey:
    """The session's key (see the module docstring); the default file is made if need be."""
    given = _given_key(key_file)
    if given is not None:
        return given
    path = default_key_path()
    try:
        return WorkerKey(create_key_file(path), str(path))
    except FileExistsError:
        return WorkerKey(read_key_file(path), str(path))
    except OSError as exc:
        raise LoadError(
            f"cannot write the workers' key to {path} ({exc.strerror}): name a key file "
            f"with --slo-worker-key-file or set {KEY_ENV}"
        ) from None


def worker_key(key_file: str | None = None) -> WorkerKey:
    """A worker's key: from the environment, the file named, or the default file."""
    given = _given_key(key_file)
    if given is not None:
        return given
    path = default_key_path()
    if path.exists():
        return WorkerKey(read_key_file(path), str(path))
    raise LoadError(
        f"no worker key: copy the session's key file (it names it when it listens) here and "
        f"give it with --key-file PATH (or {KEY_FILE_ENV}=PATH), or set {KEY_ENV}"
    )
