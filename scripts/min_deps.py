"""Print pip constraints that pin every declared dependency to its minimum version.

    python scripts/min_deps.py [--extras dev,ray,sweep] > minimums.txt
    pip install -c minimums.txt torch==2.13.0 -e ".[dev,ray,sweep]"  # make test-min-deps

A `>=` in pyproject.toml is a promise that the code works with that release; installing
exactly those releases (dependencies of dependencies at their newest) and running the tests
is how the promise is kept. torch is left out: its minimum on PyPI is a multi-GB CUDA build,
and the Makefile pins the CPU build it tests with, naming it again in the install so that a
minimum torch cannot meet fails the install instead of swapping torch for a CUDA build.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path
from typing import NoReturn

ROOT = Path(__file__).resolve().parents[1]
SKIP = {"torch"}  # pinned by the Makefile (TORCH_SPEC)
_REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*([^;]*?)\s*(;.*)?$")


def minimum_pins(requirements: list[str]) -> list[str]:
    """`name==minimum` (markers kept) for each requirement with a `>=` bound.

    "mlflow>=3.0" -> "mlflow==3.0"; "ray>=2.40,<3" -> "ray==2.40";
    "pywin32>=306; sys_platform == 'win32'" -> "pywin32==306; sys_platform == 'win32'".
    A requirement without a lower bound is left free.
    """
    pins = []
    for req in requirements:
        m = _REQ.match(req)
        if m is None:
            raise ValueError(f"cannot read requirement {req!r}")
        name, spec, marker = m.group(1), m.group(3), m.group(4) or ""
        if name.lower() in SKIP:
            continue
        low = re.search(r">=\s*([0-9][^,\s]*)", spec)
        if low:
            pins.append(f"{name}=={low.group(1)}" + (f"; {marker[1:].strip()}" if marker else ""))
    return pins


def _one_line_error(message: str) -> NoReturn:
    """trackmind.cli's one-line errors; this script runs before trackmind is installed."""
    print(f"min_deps.py: {message}", file=sys.stderr)
    sys.exit(2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.error = _one_line_error  # type: ignore[method-assign]
    ap.add_argument("--extras", default="", help="comma-separated extras, e.g. dev,ray")
    extras = [e for e in ap.parse_args(argv).extras.split(",") if e]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    optional = project.get("optional-dependencies", {})
    for extra in extras:
        if extra not in optional:
            print(f"error: --extras: no extra {extra!r} in pyproject.toml", file=sys.stderr)
            return 2
        reqs += optional[extra]
    print("\n".join(minimum_pins(reqs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
