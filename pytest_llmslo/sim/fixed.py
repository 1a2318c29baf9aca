"""``python -m pytest_llmslo.sim.fixed``, the truth server's first command name: it starts
``truth_server`` as ``python -m pytest_llmslo.sim.truth_server`` does."""

from __future__ import annotations

from .truth_server import main

if __name__ == "__main__":
    raise SystemExit(main())
