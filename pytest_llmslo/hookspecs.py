"""Hooks of pytest-llmslo, for a project's ``conftest.py`` (or a plugin of its own) to
extend the plugin without forking it, as pytest-benchmark's hooks do:

.. code-block:: python

    # conftest.py
    import dataclasses

    def pytest_llmslo_engine_config(config, name, engine_config):
        if engine_config.kind == "vllm":  # a project-wide flag, whatever the config says
            extra = (*engine_config.extra_args, "--enable-chunked-prefill")
            return dataclasses.replace(engine_config, extra_args=extra)

    def pytest_llmslo_level_result(config, point, run):
        dashboard.push(point.engine, point.level.label, point.summary.to_dict())

    def pytest_llmslo_update_document(config, document):
        document["ci"] = {"job": os.environ.get("CI_JOB_ID")}

Registered in ``pytest_addhooks``. ``llmslo run`` calls none of them (it has no
conftest); the callbacks of ``session.SessionHooks`` are what they plug into.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_llmslo.engines.base import EngineConfig
    from pytest_llmslo.records import Run
    from pytest_llmslo.sweep import SweepPoint


@pytest.hookspec(firstresult=True)
def pytest_llmslo_engine_config(
    config: pytest.Config, name: str, engine_config: EngineConfig
) -> EngineConfig | None:
    """Adjust the config of engine ``name`` just before it starts (also before a restart):
    return a changed ``EngineConfig`` (``dataclasses.replace``), or None to keep it. The
    first result that is not None is used."""


def pytest_llmslo_level_result(config: pytest.Config, point: SweepPoint, run: Run) -> None:
    """One load level's result, once its test has judged it: the ``SweepPoint`` (engine,
    test, level, summary, verdict when the test asserted an SLO, outcome, notes) and the
    ``Run`` with every request record. Called for each level of a test, extension levels
    and capacity probes included, e.g. to push figures to a dashboard as a sweep runs. An
    exception here is reported as a note and does not change the test's outcome."""


def pytest_llmslo_update_document(config: pytest.Config, document: dict[str, Any]) -> None:
    """Change the results document before it is written (``--slo-json``, partial ones
    after each test, baselines, Markdown/SVG/CSV): add fields under keys of your own
    (the document's own keys keep their meaning; ``document.validate_document``
    must still accept it)."""
