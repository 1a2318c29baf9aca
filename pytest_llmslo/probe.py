"""Bounded HTTP exchanges for everything beside the load: readiness and version probes,
/metrics scrapes, cache resets.

httpx's timeouts bound each read, not the exchange: a server that keeps sending bytes (an
endless or trickling body) holds ``client.get`` forever. ``fetch`` reads the body itself
and gives up when the whole exchange has taken ``total_s`` (at most one read timeout
more, as a read already waiting is not interrupted) or the body has passed ``max_bytes``
(counted after decompression, so a small gzip body cannot grow without bound). It
returns an ordinary ``httpx.Response`` holding the body it read.
"""

from __future__ import annotations

import time

import httpx

#: The largest body a probe reads: an engine's /metrics with many adapters and
#: histograms is a few MB at most, a /v1/models or /health answer much less.
MAX_BYTES = 16 * 1024 * 1024


class BodyTooLarge(httpx.RequestError):
    """The body went past the probe's size bound."""


class ExchangeTooSlow(httpx.TimeoutException):
    """The exchange went past the probe's total deadline (the body did not end)."""


def fetch(
    client: httpx.Client,
    url: str,
    *,
    method: str = "GET",
    total_s: float | None = None,
    max_bytes: int = MAX_BYTES,
) -> httpx.Response:
    """``method url`` through ``client`` with a total deadline (``total_s``; default the
    client's read timeout, else 10 s) and a body-size bound. Raises what httpx raises,
    ``ExchangeTooSlow`` past the deadline and ``BodyTooLarge`` past the size."""
    t = client.timeout
    total = total_s if total_s is not None else (t.read or 10.0)
    total = max(total, 0.001)
    deadline = time.monotonic() + total
    per = httpx.Timeout(
        min(t.read or total, total),
        connect=min(t.connect or total, total),
        write=min(t.write or total, total),
        pool=min(t.pool or total, total),
    )
    with client.stream(method, url, timeout=per) as resp:
        chunks: list[bytes] = []
        size = 0
        for data in resp.iter_bytes():
            size += len(data)
            if size > max_bytes:
                raise BodyTooLarge(
                    f"the body of {method} {url} is over {max_bytes // (1024 * 1024)} MiB "
                    "(not read further)",
                    request=resp.request,
                )
            chunks.append(data)
            if time.monotonic() > deadline:
                raise ExchangeTooSlow(
                    f"the body of {method} {url} did not end within {total:.3g} s "
                    f"({size} bytes read)",
                    request=resp.request,
                )
        headers = [
            (k, v)
            for k, v in resp.headers.multi_items()
            if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")
        ]
        return httpx.Response(
            resp.status_code, headers=headers, content=b"".join(chunks), request=resp.request
        )
