"""The default suite's tests that send a stop signal, 20 times in a row in one session: they
wait on events they can observe (a line, a file, a request count), never on a sleep, so
they pass every time, on a busy machine too. ``SIGNAL_TESTS_REPEAT`` sets the count."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SIGNAL_TESTS = (
    "tests/test_interrupts.py",
    "tests/test_cli_run.py::test_a_signal_between_levels_stops_the_sweep_with_the_first_level_kept",
    "tests/test_cli_run.py::test_a_crash_in_the_sweep_still_writes_what_was_measured",
    "tests/load/test_fixed_server.py::test_ctrl_c_in_run_load_sync_keeps_the_partial_run",
    "tests/load/test_fixed_server.py::test_interrupt_with_worker_processes",
    "tests/engines/test_engines_process.py::test_sigterm_to_harness_stops_engines",
    "tests/engines/test_engines_process.py::test_sigterm_to_pytest_session_stops_engines_and_interrupts",
    "tests/plugin/test_failure_gates.py::test_sigterm_keeps_the_level_in_progress",
    "tests/plugin/test_regression.py::test_ctrl_c_during_a_load_keeps_the_partial_point_and_stops_the_engine",
)


@pytest.mark.slow
def test_the_signal_tests_pass_20_times_in_a_row() -> None:
    repeat = int(os.environ.get("SIGNAL_TESTS_REPEAT", "20"))
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SIGNAL_TESTS]
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    for i in range(repeat):
        proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        tail = proc.stdout[-4000:] + proc.stderr[-2000:]
        assert proc.returncode == 0, f"round {i + 1} of {repeat}:\n{tail}"
        m = re.search(r"(\d+) passed", proc.stdout)
        assert m is not None and int(m.group(1)) >= len(SIGNAL_TESTS), tail
        print(f"round {i + 1} of {repeat}: {m.group(0)}")
