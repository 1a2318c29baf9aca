"""The SLO session without pytest: engines, levels, sweeps, extension, capacity search,
retries, the baseline comparison and the documents of a session.

``Session`` (``state.py``) holds what a session knows; the functions of the modules here
act on it, each in the order a test needs them:

- ``engines.py``: the session's engine configs (``resolve_engines``), a test's own
  (``engines_of_test``), and the factory that starts them (``factory.py``: started once
  each, restarted when they die);
- ``inputs.py``: paths, datasets, TLS files and the baseline checked before anything
  starts (``prepare``, ``plan_test``: a ``ConfigError`` naming the option and the fix);
- ``level.py``: one level of one test on one engine, retried while the client run is
  invalid, with the engine's signals and an early stop, recorded as a point
  (``run_level``, ``record``; the harness's keys of its ``Run.meta`` are a ``RunMeta``);
- ``judge.py``: the per-test protocol (``load_test`` before the body, ``run_test``
  around it): the configured gate, the sweep extension, the capacity search;
- ``baseline.py``: the comparison with the baseline (``--slo-compare``);
- ``outputs.py``: the results document, the report formats, the saved baseline and the
  JUnit properties (``finish``); ``summary.py``: what the session says of its tests.

The pytest plugin (``plugin.py``) and ``llmslo run`` (``cli.py``) both drive a Session
through the same protocol: the plugin from its hooks and fixtures, with a node id per
test; the command line with a ``TestContext`` it makes for each engine and level. The
session talks through the callbacks it is given (``Voice``: say, progress, warn), never
to a terminal itself.
"""

from __future__ import annotations

from .baseline import compare_with_baseline, load_baseline
from .constants import constants_of_test, objective_dict, workload_text
from .engines import (
    engine_config,
    engine_factory,
    engines_of_test,
    engines_text,
    record_engine,
    resolve_engines,
)
from .factory import EngineFactory, EngineRef, NullProgress, Progress, exit_reason
from .inputs import check_inputs, check_output_path, check_test_inputs, plan_test, prepare
from .judge import (
    after_test,
    bound,
    call_test,
    configured_gate,
    extend,
    extend_safely,
    gate_kwargs,
    inconclusive_message,
    load_test,
    run_test,
    run_test_load,
    search_capacity,
)
from .level import (
    LevelTask,
    Measured,
    RunMeta,
    inconclusive,
    measure_level,
    other_load,
    point_notes,
    record,
    run_level,
    with_signals,
)
from .outputs import (
    finish,
    json_path,
    junit_properties,
    output_flags,
    output_path,
    suite_properties,
    write_json,
    write_reports,
)
from .state import (
    README_XDIST,
    XDIST_REASON,
    Session,
    SessionHooks,
    TestContext,
    Voice,
    add_test,
    baseline_root,
    primary,
    prompt_salt,
    resolve_path,
)
from .summary import summary_lines_of_test, summary_report, tests_overview

__all__ = [
    "README_XDIST",
    "XDIST_REASON",
    "EngineFactory",
    "EngineRef",
    "LevelTask",
    "Measured",
    "NullProgress",
    "Progress",
    "RunMeta",
    "Session",
    "SessionHooks",
    "TestContext",
    "Voice",
    "add_test",
    "after_test",
    "baseline_root",
    "bound",
    "call_test",
    "check_inputs",
    "check_output_path",
    "check_test_inputs",
    "compare_with_baseline",
    "configured_gate",
    "constants_of_test",
    "engine_config",
    "engine_factory",
    "engines_of_test",
    "engines_text",
    "exit_reason",
    "extend",
    "extend_safely",
    "finish",
    "gate_kwargs",
    "inconclusive",
    "inconclusive_message",
    "json_path",
    "junit_properties",
    "load_baseline",
    "load_test",
    "measure_level",
    "objective_dict",
    "other_load",
    "output_flags",
    "output_path",
    "plan_test",
    "point_notes",
    "prepare",
    "primary",
    "prompt_salt",
    "record",
    "record_engine",
    "resolve_engines",
    "resolve_path",
    "run_level",
    "run_test",
    "run_test_load",
    "search_capacity",
    "suite_properties",
    "summary_lines_of_test",
    "summary_report",
    "tests_overview",
    "with_signals",
    "workload_text",
    "write_json",
    "write_reports",
]
