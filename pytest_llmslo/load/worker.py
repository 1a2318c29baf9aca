"""``python -m pytest_llmslo.load.worker FD``: one load-generator worker process.

Started by ``runner.py`` with one end of a socketpair as FD; it receives its plan, says
ready, waits for the common start time, runs, and sends its records back.
"""

from __future__ import annotations

import sys

from .runner import worker_main

if __name__ == "__main__":
    worker_main(int(sys.argv[1]))
