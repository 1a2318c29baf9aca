"""What the pytest plugin keeps for a run and how it reports a test: the ``Session`` and
the collected SLO items in ``config.stash`` (``state_of``), the parameter of a test's load
level (``LevelParam``), and a test's JUnit properties and ``llmslo`` report section
(``report_test``); shared by the hooks (``plugin.py``) and the fixtures (``fixtures.py``)."""

from __future__ import annotations

import dataclasses

import pytest

from pytest_llmslo import session as core
from pytest_llmslo import settings as S
from pytest_llmslo.records import LoadLevel
from pytest_llmslo.session import TestContext

__all__ = [
    "ITEMS_KEY",
    "JUNIT_PLUGIN",
    "STATE_KEY",
    "LevelParam",
    "attach_properties",
    "report_test",
    "state_of",
]

#: The session of this pytest run.
STATE_KEY = pytest.StashKey[core.Session]()
#: The name the JUnit system-out collector is registered under.
JUNIT_PLUGIN = "llmslo-junit-system-out"
#: The collected SLO test items by node id (the session names tests by node id).
ITEMS_KEY = pytest.StashKey[dict[str, pytest.Item]]()


def state_of(config: pytest.Config) -> core.Session:
    return config.stash[STATE_KEY]


@dataclasses.dataclass(frozen=True)
class LevelParam:
    """The parameter of a test's load level: the level, the test's settings, whether it is
    the last level of the test (the sweep extension runs there) and its id."""

    level: LoadLevel
    settings: S.TestSettings
    last: bool
    id: str

    def __repr__(self) -> str:  # shown by --collect-only and in assertion messages
        return self.level.label


def attach_properties(state: core.Session, item: pytest.Item, ctx: TestContext) -> None:
    # Through user_properties: no record_property warning under xunit2.
    item.user_properties.extend(core.junit_properties(state, ctx))


def report_test(state: core.Session, item: pytest.Item, ctx: TestContext, when: str) -> None:
    """A test's JUnit properties, and its lines as the ``llmslo`` section of its report."""
    attach_properties(state, item, ctx)
    lines = core.summary_lines_of_test(state, ctx)
    item.add_report_section(when, "llmslo", "\n".join(lines))
