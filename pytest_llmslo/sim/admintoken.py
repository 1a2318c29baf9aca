"""The token that guards the sim's admin endpoints (``/admin/*``: they add replicas,
kill and stall them, so they change the engine's behaviour under test).

A sim listening on loopback serves them to anyone on the host, as before. On any other
address they need a token (``LLMSLO_SIM_ADMIN_TOKEN`` in the sim's environment), sent as
``Authorization: Bearer TOKEN`` and compared in constant time; a sim on such an address
without a token refuses them, saying how to give one. A token, once set, is required on
loopback too.

The session holds one token (``session_token``: the variable's, else one made at random
for the process), hands it to the sims it starts where they may listen beyond loopback
(containers, pods), and sends it with its own admin requests (``admin_headers``).
"""

from __future__ import annotations

import functools
import hmac
import ipaddress
import os
import secrets
from collections.abc import Mapping

__all__ = ["TOKEN_ENV", "admin_headers", "is_loopback", "refusal", "session_token"]

TOKEN_ENV = "LLMSLO_SIM_ADMIN_TOKEN"


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is loopback only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@functools.cache
def session_token() -> str:
    """This process's admin token: ``LLMSLO_SIM_ADMIN_TOKEN``, else a random one."""
    return os.environ.get(TOKEN_ENV) or secrets.token_hex(24)


def admin_headers() -> dict[str, str]:
    """The headers of an admin request to a sim this session started (or one given the
    same ``LLMSLO_SIM_ADMIN_TOKEN``)."""
    return {"Authorization": f"Bearer {session_token()}"}


def refusal(host: str, token: str | None, headers: Mapping[str, str]) -> str | None:
    """Why an admin request (lower-case ``headers``) to a sim listening on ``host`` with
    ``token`` (None: none set) is refused; None when it is allowed."""
    if token:
        given = headers.get("authorization", "")
        scheme, _, value = given.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(value.encode(), token.encode()):
            return None
        return (
            "the admin endpoints need this sim's token: send 'Authorization: Bearer TOKEN' "
            f"with the {TOKEN_ENV} the sim was started with"
        )
    if is_loopback(host):
        return None
    return (
        f"the admin endpoints change the engine's behaviour: on {host}, beyond loopback, "
        f"they need a token; start the sim with {TOKEN_ENV} set and send it as "
        "'Authorization: Bearer TOKEN'"
    )
