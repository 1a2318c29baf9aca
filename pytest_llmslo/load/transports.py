"""The transports of the load generator, chosen by name (``ClientSettings.transport``):
``fast`` (``http1.FastTransport``, the lean HTTP/1.1 client and the default) or ``httpx``
(``client.HttpxTransport``, an independent stack). ``client.py`` holds what both share
(settings, request bodies and headers, the raw exchange, records); this module is the one
place that knows both, so neither imports the other's module."""

from __future__ import annotations

from .client import ClientSettings, HttpxTransport, Transport
from .http1 import FastTransport

__all__ = ["make_transport"]


def make_transport(settings: ClientSettings, max_connections: int | None) -> Transport:
    """The transport ``settings.transport`` names (``auto``: the fast client)."""
    if settings.resolved_transport == "fast":
        return FastTransport(settings)
    return HttpxTransport(settings, max_connections)
