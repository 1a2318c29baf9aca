"""Moved to ``pytest_llmslo.document.constants`` (re-exported here until every import moved)."""

from pytest_llmslo.document.constants import *  # noqa: F403
