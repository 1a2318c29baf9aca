"""Moved to :mod:`pytest_llmslo.metrics.traffic`; this name stays until every import moved."""

from pytest_llmslo.metrics.traffic import *  # noqa: F403
