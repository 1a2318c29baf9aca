"""A load worker process dies with the process that started it.

A session killed outright (SIGKILL: a CI system's last word, the OOM killer) runs no
handler and no ``finally``: its load worker processes would go on sending requests, as
orphans, until their level's bound. On Linux a worker asks the kernel for SIGKILL when its
parent dies (``prctl(PR_SET_PDEATHSIG)``); the parent that counts is the *thread* that
started it, so the pool starts its workers from the thread that runs the level, which
outlives them (``pool.py``). The parent may die between the worker's start and its call:
the worker then finds itself adopted by another process (``getppid()`` is no longer the
pid it was given) and exits at once. Elsewhere there is no such call: the workers then
rely on the end of their connection to the parent, which they read as a ``Stop``.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

__all__ = ["die_with_parent"]

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> str | None:
    """Have the kernel SIGKILL this process when ``parent_pid`` (its parent) dies; exit at
    once (status 1) when the parent is already gone. None when in place, else why not."""
    if not sys.platform.startswith("linux"):
        return f"no parent-death signal on {sys.platform} (Linux only)"
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError) as exc:
        return f"no prctl in the C library ({exc})"
    if prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return f"prctl(PR_SET_PDEATHSIG) failed: {os.strerror(ctypes.get_errno())}"
    if os.getppid() != parent_pid:
        # The parent died before the signal was in place: nobody will send it.
        os._exit(1)
    return None
