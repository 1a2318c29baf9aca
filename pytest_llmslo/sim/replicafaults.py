"""The sim engine's faults: a replica killed, restarted or stalled while it runs, and the
sim's own account of what happened to its replicas.

``POST /admin/fault`` with a JSON body:

- ``{"kind": "kill", "replica": "replica0"}``: the replica dies; the connections of the
  requests it held (running or queued on it) are closed mid-stream, as when an engine
  process is killed, and it takes no new requests (the frontend routes around it; with
  no replica left, new requests are refused with a 500);
- ``{"kind": "restart", "replica": "replica0", "startup_s": 2.0}``: killed as above,
  then serving again ``startup_s`` later (its cold start, 0 by default), empty;
- ``{"kind": "stall", "replica": "replica0", "for_s": 2.0}``: it produces no token for
  ``for_s`` seconds, holding its requests, then carries on.

``replica`` may be left out (the first serving replica) or given as its number. The
answer names the replica, the requests lost and when it was done (``unix``). An
aggregated sim only; anything else, or a bad body, answers 400 saying why.

``GET /admin/events`` answers the sim's log of its replicas (``Cluster.replica_log``):
``{"replicas": <serving>, "serving": [...], "events": [{"replica", "event": "down" |
"up" | "stalled" | "resumed", "unix", "why"}, ...]}`` in time order, the wall clock of
each event taken from the simulated one (a restarted or added replica's ``up`` is when
it took requests again). The same events go to the sim's log (``REPLICA_DOWN``, and
``admin.REPLICA_UP``): the truth a test checks a measured recovery against.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from .admin import answer_json_post

if TYPE_CHECKING:
    from .httpd import HttpConnection, HttpRequest
    from .scheduler import SimRequest

#: The server's ``EngineLoop``.
EngineLoop = Any

__all__ = ["REPLICA_DOWN", "events", "fault", "inject", "lose", "replica_events"]

log = logging.getLogger("pytest_llmslo.sim")

#: The log line of a replica that went down: its name, the wall clock, why, how many serve.
REPLICA_DOWN = "replica %s down at unix %.3f (%s); %d replicas serving"

KINDS = ("kill", "restart", "stall")


def _seconds(body: dict[str, Any], key: str, default: float | None) -> float:
    value = body.get(key, default)
    if value is None:
        raise ValueError(f"{key}: required for this kind, a number of seconds > 0")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"{key}: a number of seconds >= 0, got {value!r}")
    return float(value)


def lose(engine: EngineLoop, req: SimRequest, why: str, abrupt: bool = True) -> None:
    """End a client request the cluster lost: its connection closed mid-stream
    (``abrupt``: a killed engine says nothing more), else an error event or a 500."""
    engine.latency.forget(req)
    stream = engine.streams.pop(req, None)
    if stream is None:
        return
    if abrupt:
        stream.conn.close()
        stream.cancel()
    else:
        stream.fail(why)


def inject(engine: EngineLoop, body: dict[str, Any]) -> dict[str, Any]:
    """Do the fault ``body`` asks for (module docstring); ``ValueError`` says what is
    wrong with it."""
    kind = body.get("kind")
    if kind not in KINDS:
        raise ValueError(f"kind: one of {', '.join(KINDS)}, got {kind!r}")
    name = body.get("replica")
    if name is not None and not isinstance(name, (str, int)):
        raise ValueError(f"replica: a replica's name or number, got {name!r}")
    name = None if name is None else str(name)
    cluster = engine.cluster
    now = max(engine.sim_now, engine.wall_sim())
    answer: dict[str, Any] = {"kind": kind}
    if kind == "stall":
        for_s = _seconds(body, "for_s", None)
        answer["replica"] = cluster.stall_replica(name, now, for_s)
        answer["for_s"] = for_s
        lost: list[Any] = []
    elif kind == "restart":
        startup_s = _seconds(body, "startup_s", 0.0)
        answer["replica"], lost = cluster.restart_replica(name, now, startup_s)
        answer["startup_s"] = startup_s
    else:
        answer["replica"], lost = cluster.kill_replica(name, now)
    for req in lost:
        lose(engine, req, f"replica {answer['replica']} went down")
    engine.wake()
    answer["lost"] = len(lost)
    answer["replicas"] = cluster.replicas
    answer["unix"] = round(time.time(), 3)
    if kind != "stall":
        log.info(REPLICA_DOWN, answer["replica"], time.time(), kind, cluster.replicas)
    else:
        log.info("replica %s stalled at unix %.3f for %.3f s", answer["replica"], time.time(),
                 answer["for_s"])  # fmt: skip
    return answer


def replica_events(engine: EngineLoop) -> dict[str, Any]:
    """The sim's log of its replicas, on the wall clock (module docstring)."""
    cluster = engine.cluster
    offset = time.time() - engine.wall_sim()  # unix time of simulated time 0
    rows = sorted(cluster.replica_log, key=lambda e: e[2])
    return {
        "replicas": cluster.replicas,
        "serving": [i.name for i in cluster if i.role != "decode"],
        "events": [
            {"replica": n, "event": e, "unix": round(offset + at, 3), "why": why}
            for n, e, at, why in rows
        ],
    }


async def fault(engine: EngineLoop, req: HttpRequest, conn: HttpConnection) -> None:
    """``POST /admin/fault``."""
    answer_json_post(inject, engine, req, conn)


async def events(engine: EngineLoop, req: HttpRequest, conn: HttpConnection) -> None:
    """``GET /admin/events``."""
    conn.send_json(200, replica_events(engine))
