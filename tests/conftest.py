"""Shared fixtures: the reference-time cache goes to a per-session temporary folder."""

import pytest


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("TRACKMIND_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    yield
    mp.undo()
