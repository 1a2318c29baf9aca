"""Moved to ``pytest_llmslo.document`` (this path re-exports it until every import moved)."""

from pytest_llmslo.document import *  # noqa: F403
