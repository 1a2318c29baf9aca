"""The SLO session without pytest: engines, levels, sweeps, extension, capacity search,
retries, the baseline comparison and the documents of a session.

``Session`` (``state.py``) holds what a session knows; the functions of the modules here
act on it, each in the order a test needs them:

- ``engines.py``: the session's engine configs (``resolve_engines``), a test's own
  (``engines_of_test``), and the factory that starts them (``factory.py``: started once
  each, restarted when they die);
- ``inputs.py``: paths, datasets, TLS files and the baseline checked before anything
  starts (``prepare``, ``plan_test``: a ``ConfigError`` naming the option and the fix);
- ``levelplan.py``: what one level runs (``plan_level``: a ``LevelTask``, the first
  stage of a level's pipeline, docs/architecture.md);
- ``level.py``: one level of one test on one engine, retried while the client run is
  invalid, with the engine's signals and an early stop, recorded as a point
  (``run_level``, ``record``; the session's fields of its ``Run.meta``, a ``RunMeta``);
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

from .engines import engine_factory, engines_text
from .factory import EngineFactory, EngineRef, Progress
from .inputs import check_inputs, plan_test, prepare
from .judge import bound, call_test, load_test, run_test, search_capacity
from .level import measure_level, run_level
from .levelplan import other_load
from .state import README_XDIST, XDIST_REASON, Session, SessionHooks, TestContext, Voice, add_test
from .testreport import summary_lines_of_test, summary_report, tests_overview
from .writers import (
    finish,
    json_path,
    junit_outcomes,
    junit_properties,
    output_flags,
    suite_properties,
    write_json,
    write_reports,
)

__all__ = [
    "README_XDIST",
    "XDIST_REASON",
    "EngineFactory",
    "EngineRef",
    "Progress",
    "Session",
    "SessionHooks",
    "TestContext",
    "Voice",
    "add_test",
    "bound",
    "call_test",
    "check_inputs",
    "engine_factory",
    "engines_text",
    "finish",
    "json_path",
    "junit_outcomes",
    "junit_properties",
    "load_test",
    "measure_level",
    "other_load",
    "output_flags",
    "plan_test",
    "prepare",
    "run_level",
    "run_test",
    "search_capacity",
    "suite_properties",
    "summary_lines_of_test",
    "summary_report",
    "tests_overview",
    "write_json",
    "write_reports",
]
