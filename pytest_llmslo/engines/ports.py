"""Ports on this machine: pick a free one, check that one is free, wait until one is
released. Kinds use them to choose the ports their units listen on; runtimes whose units
share this host's network (processes, docker with host networking) check them before a
start and after a stop."""

from __future__ import annotations

import socket
import time


def probe_host(host: str) -> str:
    """Where to check the ports of a server bound to ``host``: an IPv4 wildcard bind is
    checked on loopback."""
    return "127.0.0.1" if host in ("0.0.0.0", "") else host


def pick_free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` now (the kernel picks it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when nothing listens on ``host:port`` and it can be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        # SO_REUSEADDR mirrors what servers set, so TIME_WAIT leftovers count as free.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def wait_port_free(port: int, host: str = "127.0.0.1", timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        if port_is_free(port, host):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
