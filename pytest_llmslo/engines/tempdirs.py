"""The temporary directories a launch makes for an engine (discovery, generated configs,
process logs), removed when it stops or when its start fails."""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterable

log = logging.getLogger("pytest_llmslo.engines.launch")


def remove_dirs(paths: Iterable[str], keep: Iterable[str] = ()) -> None:
    """Remove the launcher's temporary directories, except those in ``keep``."""
    kept = set(keep)
    for path in paths:
        if path in kept:
            continue
        shutil.rmtree(path, ignore_errors=True)
        if os.path.exists(path):  # e.g. files a container wrote as another user
            log.warning("could not remove the engine's temporary directory %s", path)
