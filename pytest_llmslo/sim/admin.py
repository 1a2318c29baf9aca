"""The sim engine's admin endpoint: capacity added while it runs.

``POST /admin/replicas`` with ``{"add": 1, "startup_s": 2.0}`` (or ``{"replicas": 3}``:
the total wanted) adds replicas to an aggregated sim (``Cluster.add_replica``); each takes
requests ``startup_s`` seconds later (its cold start, 0 by default). The answer says how
many replicas serve now and the names of those coming up. When a replica comes up the sim
logs it, with the wall-clock time, on its log (``REPLICA_UP``): the record a test checks a
measured scale-up against. A disaggregated sim answers 400.

Faults (``POST /admin/fault``) and the sim's own account of them (``GET /admin/events``)
are in ``sim/replicafaults.py``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .httpd import HttpConnection, HttpRequest

#: The server's ``EngineLoop`` (``engineloop.py`` imports this module, not the other way).
EngineLoop = Any

log = logging.getLogger("pytest_llmslo.sim")

#: The log line of a replica that came up: its name, the wall clock (Unix seconds), how
#: many replicas serve now.
REPLICA_UP = "replica %s up at unix %.3f; %d replicas serving"


def _number(body: dict[str, Any], key: str, default: float) -> float:
    value = body.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"{key}: a number >= 0, got {value!r}")
    return float(value)


def add_replicas(engine: EngineLoop, body: dict[str, Any]) -> dict[str, Any]:
    """Add the replicas ``body`` asks for (see the module docstring); ``ValueError`` says
    what is wrong with it."""
    cluster = engine.cluster
    startup_s = _number(body, "startup_s", 0.0)
    if "replicas" in body:
        wanted = int(_number(body, "replicas", 0))
        add = wanted - cluster.replicas_planned
    else:
        add = int(_number(body, "add", 1))
    if add < 1:
        raise ValueError(
            f"nothing to add: {cluster.replicas_planned} replicas serve or are coming up"
        )
    now = max(engine.sim_now, engine.wall_sim())
    names = [cluster.add_replica(now, startup_s) for _ in range(add)]
    engine.wake()
    log.info("adding %s (startup_s %.3f)", ", ".join(names), startup_s)
    return {
        "replicas": cluster.replicas,
        "adding": names,
        "startup_s": startup_s,
        "asked_unix": round(time.time(), 3),
    }


def log_replicas_up(engine: EngineLoop, seen: int) -> int:
    """Log the replicas that came up since ``seen`` of them were logged; the new count."""
    up = engine.cluster.replicas_up
    for name, _at in up[seen:]:
        log.info(REPLICA_UP, name, time.time(), engine.cluster.replicas)
    return len(up)


def answer_json_post(
    action: Callable[[EngineLoop, dict[str, Any]], Any],
    engine: EngineLoop,
    req: HttpRequest,
    conn: HttpConnection,
) -> None:
    """An admin ``POST`` with a JSON object body: 200 with ``action(engine, body)``, or 400
    with the reason when the body is not a JSON object or ``action`` refuses it
    (``ValueError``)."""
    try:
        body = json.loads(req.body or b"{}")
        if not isinstance(body, dict):
            raise ValueError("the body must be a JSON object")
        conn.send_json(200, action(engine, body))
    except ValueError as exc:
        conn.send_json(400, {"error": {"message": str(exc), "type": "BadRequestError"}})


async def replicas(engine: EngineLoop, req: HttpRequest, conn: HttpConnection) -> None:
    """``POST /admin/replicas``."""
    answer_json_post(add_replicas, engine, req, conn)
