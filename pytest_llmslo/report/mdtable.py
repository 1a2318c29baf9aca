"""A GitHub-flavoured Markdown table, and cell text that cannot break one (a ``|`` in a
test id, a newline in a message): the pieces of the Markdown report and comparison."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["escape_cell", "table"]


def escape_cell(text: object) -> str:
    """Text safe inside a Markdown table cell: pipes escaped, newlines as spaces."""
    s = str(text).replace("\\", "\\\\").replace("|", "\\|")
    return " ".join(s.splitlines())


def table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], right: set[int] | None = None
) -> list[str]:
    """A GitHub-flavoured Markdown table; columns in ``right`` are right-aligned."""
    right = right or set()
    align = ["---:" if i in right else ":---" for i in range(len(headers))]
    lines = [
        "| " + " | ".join(escape_cell(h) for h in headers) + " |",
        "| " + " | ".join(align) + " |",
    ]
    lines.extend("| " + " | ".join(escape_cell(c) for c in r) + " |" for r in rows)
    return lines
