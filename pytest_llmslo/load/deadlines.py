"""The deadlines of one streaming request, shared by both transports.

A request fails as ``timeout`` when any of these passes (each configurable, defaults sized
for LLM streams):

- ``connect_timeout_s`` (10 s): the TCP (and TLS) connection is not up;
- ``first_byte_timeout_s`` (300 s): no response data since the request was sent. A loaded
  engine queues requests before their prefill, so minutes can be legitimate; a request
  that has not started answering after that is not going to;
- ``idle_timeout_s`` (60 s): the response started, then no data came for this long. SSE
  comments (``: ping``) and blank keep-alives do not count as data: a server that sends
  only keep-alives is stalled, however lively its socket looks;
- ``timeout_s`` (600 s): the whole request, from send to its last byte.

"Data" is any read of the response body that does not begin with ``:`` (an SSE comment).
The check is a byte comparison on the read the transport already holds, so it costs the
hot path nothing measurable. One sweeper per transport looks at every request in flight
about four times per shortest deadline, instead of a timer per read.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Deadlines"]

_NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Deadlines:
    """The four deadlines of one request, in nanoseconds (see the module docstring)."""

    connect_ns: int
    first_byte_ns: int
    idle_ns: int
    total_ns: int

    @classmethod
    def of(cls, connect_s: float, first_byte_s: float, idle_s: float, total_s: float) -> Deadlines:
        return cls(
            int(connect_s * _NS), int(first_byte_s * _NS), int(idle_s * _NS), int(total_s * _NS)
        )

    @property
    def sweep_interval_s(self) -> float:
        """How often the sweeper looks: a quarter of the shortest deadline, at most 1 s."""
        shortest = min(self.first_byte_ns, self.idle_ns, self.total_ns)
        return max(min(1.0, shortest / 4 / _NS), 0.005)

    def expired(self, now_ns: int, sent_ns: int, last_data_ns: int) -> str | None:
        """Why a request sent at ``sent_ns`` has failed by ``now_ns``, or None while it has
        not. ``last_data_ns`` is the arrival of the latest response data, 0 before any."""
        if not sent_ns:
            return None
        if now_ns - sent_ns > self.total_ns:
            return (
                f"no complete response within {self.total_ns / _NS:g} s of sending "
                "(request timeout, --request-timeout)"
            )
        if not last_data_ns:
            if now_ns - sent_ns > self.first_byte_ns:
                return (
                    f"no response data within {self.first_byte_ns / _NS:g} s of sending "
                    "(first-byte timeout, --first-byte-timeout)"
                )
            return None
        if now_ns - last_data_ns > self.idle_ns:
            # No time into the response here: one text for every request that stalled the
            # same way keeps them one line of the report ("after 0.0 s of response" also
            # read as if nothing had streamed); the transport adds the chunks that came.
            return (
                f"stream stalled: no data for {self.idle_ns / _NS:g} s since its last data "
                "(idle timeout, --idle-timeout; SSE comments and keep-alives do not count as "
                "data)"
            )
        return None
