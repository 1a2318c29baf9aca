"""Moved to ``pytest_llmslo.regression.tolerances`` (re-exported here until every import moved)."""

from pytest_llmslo.regression.tolerances import *  # noqa: F403
