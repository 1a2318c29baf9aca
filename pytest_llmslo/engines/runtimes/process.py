"""The process runtime: an engine's process units run as local processes.

Commands are argument lists, never shell strings. Each process gets its own process group
(an engine spawns workers: vLLM's engine core, Dynamo's worker runtimes), so stopping it
signals the whole group: SIGTERM, a grace period, then SIGKILL. Output goes to a log file
whose tail is shown when the engine fails to start.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...errors import EngineStartError
from ...redact import redact_text, secret_values
from .. import lifecycle
from .._common import require_gpu, require_module
from ..launchplan import LaunchPlan
from ..units import ProcessUnit
from .runtime import HostNetwork, MarksPhases, Started, StartedUnit

_PR_SET_PDEATHSIG = 1


def read_tail(path: str | os.PathLike[str], lines: int = 40, max_bytes: int = 256_000) -> str:
    """The last ``lines`` lines of a text file ('' if it does not exist)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])


def _load_prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


# Looked up once here: between fork and exec the child should do as little as possible.
_PRCTL = _load_prctl()


def _child_setup() -> None:
    # Runs in the child between fork and exec. The engine dies with the thread that
    # started it if the harness is killed outright (SIGKILL skips atexit and handlers).
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class ManagedProcess:
    """A started process group with its log file. ``stop()`` is idempotent."""

    def __init__(
        self,
        spec: ProcessUnit,
        log_path: str | os.PathLike[str] | None = None,
        *,
        grace_s: float = 15.0,
    ) -> None:
        self.spec = spec
        self.grace_s = grace_s
        if log_path is None:
            log_dir = tempfile.mkdtemp(prefix="llmslo-engine-")
            log_path = Path(log_dir) / f"{spec.role}.log"
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._secrets = secret_values(spec.env, spec.argv)
        env = dict(os.environ)
        env.update(spec.env)
        # Engines written in Python buffer stdout when it is a file; the log tail on a
        # start failure would then miss the last lines.
        env.setdefault("PYTHONUNBUFFERED", "1")
        self._env = env
        # Kept open for the life of the process; closed in stop().
        self._log = open(self.log_path, "ab", buffering=0)
        self._spawn()
        self._stopped = False
        self._lock = threading.Lock()
        self._token = lifecycle.register(self.stop, kill=self._kill_now)
        self._resume: threading.Timer | None = None

    def _spawn(self) -> None:
        spec = self.spec
        # PDEATHSIG is tied to the thread that forked: only use it from the main thread,
        # whose exit is the harness's exit (a restart from another thread goes without).
        main = threading.current_thread() is threading.main_thread()
        preexec = _child_setup if (main and _PRCTL is not None) else None
        try:
            self.popen = subprocess.Popen(
                list(spec.argv),
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=self._env,
                cwd=spec.cwd,
                start_new_session=True,
                preexec_fn=preexec,  # only prctl(); no Python state touched in the child
            )
        except OSError as exc:
            self._log.close()
            raise EngineStartError(f"cannot start {spec.role} ({spec.argv[0]}): {exc}") from exc
        #: When the process was spawned (``time.monotonic()``): its cold start's first mark.
        self.spawned_at = time.monotonic()
        self.pid = self.popen.pid
        self.pgid = self.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def returncode(self) -> int | None:
        return self.popen.poll()

    def log_tail(self, lines: int = 40) -> str:
        return redact_text(read_tail(self.log_path, lines), self._secrets)

    def describe(self) -> dict[str, Any]:
        d = self.spec.describe()
        d.update({"pid": self.pid, "log": str(self.log_path)})
        return d

    def marks(self) -> dict[str, float]:
        """The phases of its start this unit saw (``coldstart.py``)."""
        return {"spawned_s": self.spawned_at}

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def _kill_now(self) -> None:
        """SIGKILL the group, waiting for nothing (the process ends at once after it)."""
        self._signal_group(signal.SIGKILL)

    def _signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)

    def stop(self) -> None:
        """SIGTERM the process group, wait up to ``grace_s``, then SIGKILL it; reap."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        if self._resume is not None:
            self._resume.cancel()
        try:
            if self._group_alive():
                self._signal_group(signal.SIGCONT)  # a stalled group cannot act on SIGTERM
                self._signal_group(signal.SIGTERM)
                deadline = time.monotonic() + self.grace_s
                while time.monotonic() < deadline:
                    self.popen.poll()
                    if not self._group_alive():
                        break
                    time.sleep(0.05)
                if self._group_alive():
                    self._signal_group(signal.SIGKILL)
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.popen.wait(timeout=5)
            # Members that left the group's leader behind (already reaped) may linger.
            end = time.monotonic() + 5
            while self._group_alive() and time.monotonic() < end:
                self._signal_group(signal.SIGKILL)
                time.sleep(0.05)
        finally:
            with contextlib.suppress(OSError):
                self._log.close()
            lifecycle.unregister(self._token)


def kill_unit(unit: ManagedProcess) -> dict[str, Any]:
    """SIGKILL ``unit``'s process group and reap it (a fault: nothing it held survives)."""
    pid = unit.pid
    unit._signal_group(signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        unit.popen.wait(timeout=10)
    end = time.monotonic() + 5
    while unit._group_alive() and time.monotonic() < end:
        time.sleep(0.02)
    return {"pid": pid, "signal": "SIGKILL", "killed_unix": round(time.time(), 3)}


def restart_unit(unit: ManagedProcess) -> dict[str, Any]:
    """SIGKILL ``unit``'s process group, then start its command again, logging to the same
    file: the engine's process as a supervisor would bring it back."""
    killed = kill_unit(unit)
    with unit._lock:
        if unit._stopped:
            raise EngineStartError(f"{unit.spec.role} was stopped: it is not started again")
        unit._spawn()
    return {**killed, "new_pid": unit.pid, "spawned_unix": round(time.time(), 3)}


def stall_unit(unit: ManagedProcess, for_s: float) -> dict[str, Any]:
    """SIGSTOP ``unit``'s process group, and SIGCONT it ``for_s`` seconds later (on a
    timer; ``stop()`` continues it first)."""
    unit._signal_group(signal.SIGSTOP)
    timer = threading.Timer(for_s, unit._signal_group, (signal.SIGCONT,))
    timer.daemon = True
    unit._resume = timer
    timer.start()
    return {"pid": unit.pid, "signal": "SIGSTOP", "for_s": for_s,
            "stopped_unix": round(time.time(), 3)}  # fmt: skip


def start_processes(
    specs: Sequence[ProcessUnit], log_dir: str | os.PathLike[str] | None = None
) -> list[ManagedProcess]:
    """Start each spec in order; if one cannot be started, stop those already running."""
    if log_dir is None:
        log_dir = tempfile.mkdtemp(prefix="llmslo-engine-")
    started: list[ManagedProcess] = []
    try:
        for i, spec in enumerate(specs):
            name = spec.role if len(specs) == 1 else f"{i}-{spec.role}"
            started.append(ManagedProcess(spec, Path(log_dir) / f"{name}.log"))
    except BaseException:
        for p in reversed(started):
            p.stop()
        raise
    return started


# A process group marks the phases of its start it saw (mypy checks it).
_MARKS: type[MarksPhases] = ManagedProcess


class ProcessRuntime(HostNetwork):
    """Runs ``plan.processes`` on this machine, each in a process group of its own, with
    its output in a log file of a fresh directory (``llmslo-KIND-...``)."""

    name = "process"

    def units(self, plan: LaunchPlan) -> Sequence[ProcessUnit]:
        return plan.processes

    def check(self, plan: LaunchPlan) -> None:
        """Each unit's Python module, then its GPU: ``EngineUnavailable`` saying which is
        missing."""
        for unit in plan.processes:
            if unit.module is not None:
                require_module(plan.config, unit.module.name, unit.module.hint)
            if unit.needs_gpu:
                require_gpu(plan.config)  # no CPU build

    def start(self, plan: LaunchPlan) -> Started:
        if not plan.processes:
            return Started()
        log_dir = tempfile.mkdtemp(prefix=f"llmslo-{plan.config.kind}-")
        try:
            units = start_processes(plan.processes, log_dir)
        except BaseException:
            # Nothing ran long enough to log anything worth keeping.
            shutil.rmtree(log_dir, ignore_errors=True)
            raise
        return Started(list(units), log_dir)

    def known_version(self, plan: LaunchPlan) -> str | None:
        return None

    def fallback_version(self, plan: LaunchPlan) -> str | None:
        probe = plan.version_fallback
        return probe() if callable(probe) else None

    def reap(self) -> list[str]:
        """Nothing to reap: a process engine dies with the harness (parent-death signal)."""
        return []

    def kill(self, unit: StartedUnit) -> dict[str, Any]:
        return kill_unit(_managed(unit))

    def restart(self, unit: StartedUnit) -> dict[str, Any]:
        return restart_unit(_managed(unit))

    def stall(self, unit: StartedUnit, for_s: float) -> dict[str, Any]:
        return stall_unit(_managed(unit), for_s)


def _managed(unit: StartedUnit) -> ManagedProcess:
    if not isinstance(unit, ManagedProcess):
        raise TypeError(f"the process runtime runs ManagedProcess units, not {type(unit).__name__}")
    return unit
