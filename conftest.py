"""Root conftest of the repository's own test session (``pytest`` at the top level).

The example SLO suite (``examples/``) and the benchmarks are not part of it: the examples
carry their own ``examples/pytest.ini`` and run as ``pytest -m slo examples/``; the
benchmarks are scripts (``tox -e benchmarks``). Ignoring them here keeps ``pytest .`` from
starting a full-size SLO sweep by accident.
"""

from __future__ import annotations

collect_ignore = ["examples", "benchmarks", "docker"]
