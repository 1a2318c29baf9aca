"""The stop-signal handler records and never raises in the session's own code; the
session acts at its checkpoints; a third signal ends the process, after a document being
written is in place. Signals are delivered for real (``signal.raise_signal``: the handler
runs before the call returns), on the main thread."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator

import pytest

from pytest_llmslo import interrupts
from pytest_llmslo.interrupts import Interrupts


class Exited(Exception):
    """What the test's ``exit`` raises in place of ``os._exit``."""


@pytest.fixture
def guard() -> Iterator[Interrupts]:
    exits: list[int] = []

    def fake_exit(code: int) -> None:
        exits.append(code)

    g = Interrupts(exit=fake_exit)
    g.exits = exits  # type: ignore[attr-defined]
    g.before = signal.getsignal(signal.SIGINT)  # type: ignore[attr-defined]
    g.outer = interrupts.active()  # type: ignore[attr-defined]
    assert g.install()
    try:
        yield g
    finally:
        g.uninstall()


def test_a_signal_is_recorded_and_nothing_is_raised_where_it_lands(guard: Interrupts) -> None:
    signal.raise_signal(signal.SIGTERM)
    signal.raise_signal(signal.SIGINT)
    assert guard.received == ["SIGTERM", "SIGINT"]
    assert guard.stop_requested and interrupts.active() is guard
    assert guard.exits == []  # type: ignore[attr-defined]


def test_the_first_checkpoint_after_a_signal_raises_once(guard: Interrupts) -> None:
    guard.checkpoint()  # nothing recorded: nothing raised
    signal.raise_signal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        interrupts.checkpoint()
    guard.checkpoint()  # the shutdown is under way: not again
    signal.raise_signal(signal.SIGINT)
    guard.checkpoint()


def test_a_shielded_block_runs_to_its_end_and_a_deferred_one_raises_after_it(
    guard: Interrupts,
) -> None:
    done = []
    with pytest.raises(KeyboardInterrupt):
        with guard.shielded(deferred=True):
            signal.raise_signal(signal.SIGINT)
            guard.checkpoint()  # not inside the block
            done.append(1)
    assert done == [1]


def test_a_shielded_block_that_raises_keeps_its_own_error(guard: Interrupts) -> None:
    signal.raise_signal(signal.SIGINT)
    with pytest.raises(ValueError):
        with guard.shielded(deferred=True):
            raise ValueError("its own")


def test_a_checkpoint_off_the_main_thread_raises_nothing(guard: Interrupts) -> None:
    signal.raise_signal(signal.SIGTERM)
    errors: list[BaseException] = []

    def other() -> None:
        try:
            guard.checkpoint()
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert errors == []
    with pytest.raises(KeyboardInterrupt):
        guard.checkpoint()


def test_note_marks_the_shutdown_under_way(guard: Interrupts) -> None:
    signal.raise_signal(signal.SIGTERM)
    guard.note("SIGTERM")
    guard.checkpoint()
    assert guard.received == ["SIGTERM"]
    other = Interrupts()
    other.note(None)  # a signal its handler did not see
    assert other.received == ["SIGINT"] and other.interrupted


def test_pause_ends_early_on_a_signal_from_another_thread(guard: Interrupts) -> None:
    assert guard.pause(0.01) is False
    timer = threading.Timer(0.1, guard.received.append, ("SIGTERM",))
    timer.start()
    t0 = time.monotonic()
    try:
        assert interrupts.pause(30) is True
    finally:
        timer.cancel()
    assert time.monotonic() - t0 < 10


def test_the_third_signal_exits_at_once_with_128_plus_its_number(guard: Interrupts) -> None:
    for _ in range(3):
        signal.raise_signal(signal.SIGTERM)
    assert guard.exits == [128 + signal.SIGTERM]  # type: ignore[attr-defined]


def test_the_third_signal_waits_for_the_document_being_written(guard: Interrupts) -> None:
    exits: list[int] = guard.exits  # type: ignore[attr-defined]
    with guard.writing():
        for _ in range(3):
            signal.raise_signal(signal.SIGINT)
        assert exits == []
    assert exits == [128 + signal.SIGINT]


def test_a_tests_own_code_is_interrupted_where_the_signal_lands(guard: Interrupts) -> None:
    with pytest.raises(KeyboardInterrupt, match="SIGINT"):
        with guard.foreign():
            signal.raise_signal(signal.SIGINT)
            pytest.fail("the signal did not interrupt the test's own code")
    guard.checkpoint()  # already raised


def test_the_sessions_own_code_called_from_a_test_is_not(guard: Interrupts) -> None:
    with guard.foreign(), interrupts.owned():
        signal.raise_signal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        guard.checkpoint()


def test_uninstall_gives_the_signals_back(guard: Interrupts) -> None:
    guard.uninstall()
    assert interrupts.active() is guard.outer  # type: ignore[attr-defined]
    assert signal.getsignal(signal.SIGINT) == guard.before  # type: ignore[attr-defined]


def test_describe_names_the_signals() -> None:
    g = Interrupts()
    assert g.describe() == ""
    g.received[:] = ["SIGTERM", "SIGTERM"]
    assert g.describe() == "SIGTERM x2"
    g.received[:] = ["SIGINT", "SIGTERM"]
    assert g.describe() == "SIGINT, then SIGTERM"


def test_after_a_session_with_the_default_handler_two_late_signals_are_absorbed() -> None:
    outer = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        g = Interrupts()
        assert g.install()
        g.uninstall()
        late = signal.getsignal(signal.SIGTERM)
        assert callable(late)
        # The process would exit with the session's status: a CI system's second and
        # third SIGTERM do not kill it on its way out (the default would).
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGTERM)
        assert g.received == []
    finally:
        signal.signal(signal.SIGTERM, outer)


def test_a_hard_exit_runs_its_hooks_then_ends_with_the_code(tmp_path) -> None:
    import subprocess
    import sys

    mark = tmp_path / "hooked"
    code = (
        "from pytest_llmslo import interrupts\n"
        f"interrupts.on_hard_exit(lambda: open({str(mark)!r}, 'w').write('x'))\n"
        "interrupts.on_hard_exit(lambda: 1 / 0)  # a failing hook keeps nothing from exiting\n"
        "interrupts.hard_exit(137)\n"
        "print('not reached')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 137 and "not reached" not in proc.stdout
    assert mark.read_text() == "x"


def test_a_third_signal_kills_the_engine_process_groups_before_the_exit(tmp_path) -> None:
    # A ProcessUnit's group (a shell and the sleep it starts) is SIGKILLed by the hook the
    # engines' lifecycle registers, even though os._exit runs no atexit handler.
    import os
    import subprocess
    import sys

    pids = tmp_path / "pids"
    code = (
        "import os, signal, sys, time\n"
        "from pytest_llmslo.engines.runtimes.process import ManagedProcess\n"
        "from pytest_llmslo.engines.units import ProcessUnit\n"
        "from pytest_llmslo.interrupts import Interrupts\n"
        f"unit = ManagedProcess(ProcessUnit(argv=('sh', '-c', 'sleep 300 & echo $! > {pids}; "
        "wait'), role='sleeper'))\n"
        f"while not os.path.exists({str(pids)!r}) or not open({str(pids)!r}).read(): "
        "time.sleep(0.05)\n"
        "g = Interrupts()\n"
        "g.install()\n"
        "for _ in range(3):\n"
        "    signal.raise_signal(signal.SIGTERM)\n"
        "print('not reached')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, proc.stdout + proc.stderr
    grandchild = int(pids.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            status = open(f"/proc/{grandchild}/status").read()
        except FileNotFoundError:
            break
        if "\nState:\tZ" in status:  # killed, not yet reaped by whoever adopted it
            break
        time.sleep(0.05)
    else:
        os.kill(grandchild, signal.SIGKILL)
        pytest.fail("the engine's process group outlived a third signal")
