"""Moved to ``pytest_llmslo.regression.baselines`` (re-exported here until every import moved)."""

from pytest_llmslo.regression.baselines import *  # noqa: F403
