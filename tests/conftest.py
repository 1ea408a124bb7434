"""Shared fixtures: the reference-time cache goes to a per-session temporary folder.

scripts/ joins the end of sys.path, as it is the first entry of a script run as
`python scripts/NAME.py`: scripts that import each other (race_ends imports bench_learning)
load the same way under the tests.
"""

import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parents[1] / "scripts"))


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("TRACKMIND_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    yield
    mp.undo()
