"""The docs' notes tables: what an analysis script writes with --json, for scripts/make_docs.py.

A table is {columns, rows, source}; the source is the command that made it, so that every
generated table in docs/ says how to get it again.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path


def write_notes_table(
    path: str | Path, columns: list[str], rows: list[list], script: str, argv: list[str] | None
) -> None:
    """Write the table to `path`, its source `python scripts/<script>.py <argv>` (argv None:
    the command line of this process)."""
    given = sys.argv[1:] if argv is None else argv
    source = f"python scripts/{script}.py " + shlex.join(given)
    out = {"columns": columns, "rows": rows, "source": source}
    Path(path).write_text(json.dumps(out, indent=1) + "\n")
