"""Moved to ``pytest_llmslo.regression`` (re-exported here until every import moved)."""

from pytest_llmslo.regression import *  # noqa: F403
