"""Keeping secrets out of everything the package shows or writes: the one place that
masks them.

Secrets reach text in two ways. The package knows some of them: the API key it sends
(``remember`` is called where the key is read), an engine config's tokens (``env``,
``--api-key`` in ``extra_args``), the password of a URL such as
``http://user:PASS@host``. Others it can only recognise: a server that echoes the
``Authorization`` header, an ``api_key=`` in a URL, the password of any URL in a message.
``redact(text)`` masks both kinds; ``redact_url`` masks a URL's password; ``redact_obj``
walks a JSON-like document (the results document, JUnit properties). Everything that
reaches an output (terminal lines, the results document and the reports made from it,
JUnit properties, readiness and request error texts, engine logs) passes through here.

Known secrets are kept per process (the load's worker processes remember the key they
send themselves), never written anywhere.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

MASK = "***"

# Environment variables whose values are secrets, matched on the name.
_SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|CREDENTIAL|AUTH)", re.I)
# Command-line flags whose next argument (or ``=value``) is a secret.
_SECRET_FLAGS = frozenset(
    {"--api-key", "--hf-token", "--token", "--admin-api-key", "--password", "--auth-token"}
)
# Very short values would mask innocent text everywhere; they are not real tokens.
_MIN_SECRET = 4

# What a secret looks like in text the package did not write (a server's error body):
# the credentials of an auth scheme ("Bearer sk-...", "Basic ..."), the value after a secret-looking
# key ("api_key": "...", X-Api-Key: ..., ?token=...), a URL's password.
_SCHEME = re.compile(r"\b(Bearer|Basic)(\s+)([A-Za-z0-9._~+/=-]{4,})")
_KEYED = re.compile(
    r"""(?ix)
    \b((?:x-)?api[-_]?key|access[-_]?token|auth[-_]?token|password|passwd|secret
       |authorization)
    (["']?\s*[:=]\s*["']?)
    (?!(?:Bearer|Basic)\s)([^\s"',;&}\]]{4,})"""
)
_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@]*):([^/\s@]+)@")

_known: set[str] = set()


def remember(*values: str | None) -> None:
    """Add secret strings to those ``redact`` masks in this process (values under four
    characters are ignored: they are no real tokens)."""
    for v in values:
        if v and len(v) >= _MIN_SECRET:
            _known.add(v)


def known_secrets() -> tuple[str, ...]:
    """The secrets remembered in this process, longest first (for replacement)."""
    return tuple(sorted(_known, key=len, reverse=True))


def forget_all() -> None:
    """Forget every remembered secret (for tests)."""
    _known.clear()


def redact(text: str, extra: Iterable[str] = ()) -> str:
    """``text`` with every secret masked: the known ones, ``extra``, credentials after an
    auth scheme or a secret-looking key, and URL passwords. What is around a secret stays,
    so a message is still understandable (``HTTP 401: invalid key ***``)."""
    if not text:
        return text
    for s in (*sorted((e for e in extra if e), key=len, reverse=True), *known_secrets()):
        if s in text:
            text = text.replace(s, MASK)
    text = _URL_PASSWORD.sub(rf"\1:{MASK}@", text)
    text = _SCHEME.sub(lambda m: m.group(0) if m.group(3) == MASK else f"{m[1]}{m[2]}{MASK}", text)
    return _KEYED.sub(lambda m: m.group(0) if m.group(3) == MASK else f"{m[1]}{m[2]}{MASK}", text)


def url_password(url: str) -> str | None:
    """The password of ``url`` (``http://user:PASS@host``), None when it has none."""
    try:
        return urlsplit(url).password or None
    except ValueError:
        return None


def redact_url(url: str) -> str:
    """``url`` with its password (and any known secret) masked; the user name stays."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact(url)
    if parts.password:
        host = parts.netloc.rpartition("@")[2]
        user = parts.username or ""
        parts = parts._replace(netloc=f"{user}:{MASK}@{host}")
        url = urlunsplit(parts)
    return redact(url)


def redact_obj(obj: Any) -> Any:
    """A JSON-like value with ``redact`` applied to every string in it (keys included);
    other values are returned as they are, containers rebuilt only when needed."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, Mapping):
        return {redact_obj(k): redact_obj(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [redact_obj(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(redact_obj(v) for v in obj)
    return obj


def is_secret_name(name: str) -> bool:
    """True for an environment variable (or header) name that looks like it holds a
    secret."""
    return bool(_SECRET_NAME.search(name))


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` with the values of secret-looking names masked."""
    return {k: (MASK if is_secret_name(k) else v) for k, v in env.items()}


def secret_values(env: Mapping[str, str], argv: Sequence[str] = ()) -> list[str]:
    """The secret strings in ``env`` and ``argv``, longest first (for text replacement)."""
    values = {v for k, v in env.items() if is_secret_name(k) and v}
    for i, arg in enumerate(argv):
        flag, eq, val = arg.partition("=")
        if flag in _SECRET_FLAGS:
            if eq and val:
                values.add(val)
            elif i + 1 < len(argv) and argv[i + 1]:
                values.add(argv[i + 1])
    return sorted((v for v in values if len(v) >= _MIN_SECRET), key=len, reverse=True)


def redact_argv(argv: Sequence[str], secrets: Iterable[str] = ()) -> list[str]:
    """``argv`` with secret flag values and any known secret string masked."""
    out: list[str] = []
    mask_next = False
    for arg in argv:
        if mask_next:
            out.append(MASK)
            mask_next = False
            continue
        flag, eq, _ = arg.partition("=")
        if flag in _SECRET_FLAGS:
            if eq:
                out.append(f"{flag}={MASK}")
            else:
                out.append(arg)
                mask_next = True
            continue
        out.append(redact_text(arg, secrets))
    return out


def redact_text(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each of ``secrets`` replaced by the mask (and
    whatever ``redact`` recognises)."""
    return redact(text, secrets)
