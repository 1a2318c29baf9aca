"""Remote load workers for the tests: ``llmslo worker`` subprocesses, each optionally in a
Linux time namespace of its own (``unshare --time --monotonic``, so its monotonic clock
starts at another epoch, as another host's does) and a network namespace of its own."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _works(*cmd: str) -> str | None:
    """None when ``cmd`` runs, else why not."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{cmd[0]}: {exc}"
    return None if out.returncode == 0 else (out.stderr.strip() or f"exit {out.returncode}")


def time_namespaces() -> str | None:
    """None where time namespaces can be made, else the reason they cannot."""
    if os.geteuid() != 0:
        return "time namespaces need root (unshare --time)"
    why = _works("unshare", "--time", "--monotonic", "100", "true")
    return None if why is None else f"unshare --time is not allowed here: {why}"


def worker_cmd(
    address: str, name: str, monotonic_s: int | None = None, netns: str | None = None
) -> list[str]:
    cmd = [sys.executable, "-m", "pytest_llmslo.cli", "worker", "--connect", address]
    cmd += ["--name", name, "--connect-timeout", "60"]
    if monotonic_s is not None:
        cmd = ["unshare", "--time", "--monotonic", str(monotonic_s), *cmd]
    if netns is not None:
        cmd = ["ip", "netns", "exec", netns, *cmd]
    return cmd


@contextlib.contextmanager
def workers(
    address: str, offsets: list[int | None], netns: dict[int, str] | None = None
) -> Iterator[list[subprocess.Popen[str]]]:
    """One ``llmslo worker`` per offset (its monotonic offset in seconds, or None), named
    ``w0``, ``w1``...; stopped (and reaped) at the end."""
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    procs = []
    try:
        for i, off in enumerate(offsets):
            cmd = worker_cmd(address, f"w{i}", off, (netns or {}).get(i))
            procs.append(
                subprocess.Popen(
                    cmd, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
                )
            )
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
            if p.stderr is not None:
                p.stderr.close()


@contextlib.contextmanager
def network_namespace(tag: int) -> Iterator[tuple[str, str, str]]:
    """A network namespace joined to this one by a veth pair on a /30 of its own:
    (namespace, this side's address, its side's address). Removed at the end."""
    ns = f"llmslo-t{tag}"
    host_if, ns_if = f"lt{tag}a", f"lt{tag}b"
    net = 10 * 256 + (tag % 60) * 4  # 10.213.x.y/30 inside 10.213.0.0/16
    host_ip = f"10.213.{net // 256 % 256}.{net % 256 + 1}"
    ns_ip = f"10.213.{net // 256 % 256}.{net % 256 + 2}"
    steps = [
        ["ip", "netns", "add", ns],
        ["ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if],
        ["ip", "link", "set", ns_if, "netns", ns],
        ["ip", "addr", "add", f"{host_ip}/30", "dev", host_if],
        ["ip", "link", "set", host_if, "up"],
        ["ip", "netns", "exec", ns, "ip", "addr", "add", f"{ns_ip}/30", "dev", ns_if],
        ["ip", "netns", "exec", ns, "ip", "link", "set", ns_if, "up"],
        ["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"],
    ]
    try:
        for step in steps:
            subprocess.run(step, check=True, capture_output=True, timeout=20)
        yield ns, host_ip, ns_ip
    finally:
        subprocess.run(["ip", "link", "del", host_if], capture_output=True, timeout=20)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)


def network_namespaces() -> str | None:
    """None where network namespaces and veth pairs can be made, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    try:
        with network_namespace(os.getpid() % 50 + 7):
            pass
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        err = getattr(exc, "stderr", b"") or b""
        return f"cannot make a network namespace with a veth pair: {exc} {err!r}"
    return None
