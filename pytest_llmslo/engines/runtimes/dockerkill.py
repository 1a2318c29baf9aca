"""A session's containers removed when a third stop signal ends the process at once.

A third SIGINT or SIGTERM ends the session without its shutdown (``interrupts.hard_exit``):
no ``finally`` runs, no grace period is waited for. A process-group SIGKILL ends an engine
run as a process, but a container is the docker daemon's child, not ours, and would run on
until the next session reaps it. So the hard exit also removes (``remove(force=True)``: a
SIGKILL, then the removal) every container labelled with this session, synchronously but
bounded: through a docker client of its own (the session's may be in the middle of a call
on the very thread the signal interrupted, holding its connection pool), each container on
a thread of its own, all joined for at most ``HARD_REMOVE_S``. The process then exits,
whatever the daemon did; a container it could not remove in time is left to the reaper of
the next session (``docker.reap_stale_containers``: its owner's pid is gone).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["HARD_REMOVE_S", "remove_now"]

#: How long a hard exit waits for the daemon, all containers together.
HARD_REMOVE_S = 3.0


def remove_now(label: str, connect: Callable[[], Any], bound_s: float = HARD_REMOVE_S) -> list[str]:
    """Force-remove every container labelled ``label`` (``key=value``), through the client
    ``connect()`` makes, within ``bound_s``; the names removed by then. Failures are
    ignored: the exit must happen."""
    removed: list[str] = []
    end = time.monotonic() + bound_s

    def remove(container: Any) -> None:
        with contextlib.suppress(Exception):
            container.remove(force=True)
            removed.append(str(container.name))

    def run() -> None:
        with contextlib.suppress(Exception):
            found = connect().containers.list(all=True, filters={"label": label})
            threads = [
                threading.Thread(target=remove, args=(c,), name="llmslo-docker-rm", daemon=True)
                for c in found
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(max(end - time.monotonic(), 0.0))

    lister = threading.Thread(target=run, name="llmslo-docker-kill", daemon=True)
    lister.start()
    lister.join(max(end - time.monotonic(), 0.0))
    return list(removed)
