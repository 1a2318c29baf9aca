"""One TLS policy for every HTTP client of the package: the load generator's fast client,
its httpx client and the engines' readiness probes.

- By default certificates are checked against the system store, as OpenSSL finds it:
  ``SSL_CERT_FILE`` and ``SSL_CERT_DIR`` are honoured (``ssl.create_default_context``), so a
  private CA installed the usual way works everywhere, not only in the fast client.
- ``ca_bundle`` (``--ca-bundle``) names a PEM file of CAs to trust instead.
- ``verify=False`` (``--insecure``) accepts any certificate (self-signed test servers).

httpx is given the context itself, never ``trust_env``: a client that read proxies from the
environment could route loopback traffic through a proxy.
"""

from __future__ import annotations

import os
import ssl

from .errors import ConfigError

__all__ = ["certificate_hint", "make_ssl_context"]


def make_ssl_context(ca_bundle: str | None = None, verify: bool = True) -> ssl.SSLContext:
    """The client context of the policy above. ``ConfigError`` when ``ca_bundle`` cannot be
    read as a PEM bundle."""
    if ca_bundle:
        if not os.path.isfile(ca_bundle):
            raise ConfigError(f"CA bundle {ca_bundle!r} is not a file (--ca-bundle)")
        try:
            ctx = ssl.create_default_context(cafile=ca_bundle)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(
                f"CA bundle {ca_bundle!r} cannot be loaded (--ca-bundle): {exc}"
            ) from None
    else:
        ctx = ssl.create_default_context()
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def certificate_hint(text: str) -> str:
    """``text`` with what to do appended when it is a certificate failure."""
    low = text.lower()
    if "certificate" in low and ("verify" in low or "self" in low or "issuer" in low):
        return (
            f"{text} (trust the server's CA with --ca-bundle PATH or SSL_CERT_FILE, or "
            "skip verification with --insecure)"
        )
    return text
