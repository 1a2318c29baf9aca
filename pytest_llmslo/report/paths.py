"""Paths as the reports show them: never absolute. A report is pasted into a pull request
or published by CI; a path such as ``/tmp/llmslo-sim-x1/sim.log`` or
``/home/ci/work/traces/day.jsonl`` says where one machine kept a file, not what it was, and
leaks a user or runner name. A path near the results file is shown relative to its
directory (``../traces/day.jsonl``), any other by its file name (``sim.log``).

``relative_paths`` rewrites every absolute path in a text (a workload's path, an engine's
log, an error message that names a file, a baseline), so a renderer can pass its whole
output through it.
"""

from __future__ import annotations

import os
import re
from pathlib import PurePosixPath, PureWindowsPath

__all__ = ["ABSOLUTE_PATH", "relative_paths", "show_path"]

#: An absolute path in text: POSIX (``/tmp/x/y``, two segments at least, not part of a
#: word, a URL or a ratio such as ``tok/s``, not an API route such as ``/v1/completions``)
#: or Windows (``C:\\x``, ``C:/x``).
ABSOLUTE_PATH = re.compile(
    r"(?<![\w./~<>\\-])(?!/v\d+/)(?:/[\w.@+~-]+){2,}/?"
    r"|\b[A-Za-z]:[\\/][^\s`'\"|)\]]*"
)


def show_path(path: str, base: str | None = None) -> str:
    """``path`` as a report shows it: relative to ``base`` (the results file's directory)
    when both lie under one directory below the root and it is at most two levels up,
    else its file name; never absolute."""
    windows = bool(re.match(r"[A-Za-z]:[\\/]", path))
    pure = PureWindowsPath(path) if windows else PurePosixPath(path)
    if not pure.is_absolute():
        return path
    if base and not windows and os.path.isabs(base):
        try:
            shared = os.path.commonpath([path, base])
        except ValueError:
            shared = "/"
        rel = os.path.relpath(path, base)
        if shared != "/" and PurePosixPath(rel).parts.count("..") <= 2:
            return rel
    return pure.name or path.strip("/\\") or "."


def relative_paths(text: str, base: str | None = None) -> str:
    """``text`` with every absolute path in it shown as ``show_path`` shows it."""
    return ABSOLUTE_PATH.sub(lambda m: show_path(m.group(0), base), text)
