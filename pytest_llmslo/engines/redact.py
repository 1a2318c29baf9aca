"""Keeping secrets out of metadata, logs and error messages.

Engine configs carry tokens (``HF_TOKEN``, API keys) in ``env`` and sometimes in
``extra_args`` (``--api-key``). Anything the package shows or writes goes through here
first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

MASK = "***"

# Environment variables whose values are secrets, matched on the name.
_SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|CREDENTIAL|AUTH)", re.I)
# Command-line flags whose next argument (or ``=value``) is a secret.
_SECRET_FLAGS = frozenset(
    {"--api-key", "--hf-token", "--token", "--admin-api-key", "--password", "--auth-token"}
)


def is_secret_name(name: str) -> bool:
    """True for an environment variable name that looks like it holds a secret."""
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
    # Very short values would mask innocent text everywhere; they are not real tokens.
    return sorted((v for v in values if len(v) >= 4), key=len, reverse=True)


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
    """``text`` with every occurrence of each secret replaced by the mask."""
    for s in secrets:
        if s:
            text = text.replace(s, MASK)
    return text
