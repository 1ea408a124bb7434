"""What an install carries: every package, and conf/ as trackmind.conf (the defaults' one home)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from importlib.resources import files
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def declared_packages() -> set[str]:
    return set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )


def packages_on_disk() -> set[str]:
    src = ROOT / "src"
    found = {
        ".".join(p.parent.relative_to(src).parts)
        for p in src.rglob("__init__.py")
        if "egg-info" not in str(p)
    }
    found.add("hydra_plugins")  # a namespace package (no __init__.py), listed for the editable path
    conf = ROOT / "conf"
    found.add("trackmind.conf")
    groups = (d for d in conf.iterdir() if d.is_dir() and not d.name.startswith("__"))
    found.update(f"trackmind.conf.{d.name}" for d in groups)
    return found


def test_pyproject_lists_every_package_and_config_group():
    assert declared_packages() == packages_on_disk()


def test_the_installed_conf_is_the_repository_conf():
    """An editable install reads conf/ itself: editing a YAML changes the defaults at once."""
    here = files("trackmind.conf").joinpath("env", "sim.yaml")
    assert here.read_text() == (ROOT / "conf" / "env" / "sim.yaml").read_text()


def test_a_wheel_carries_every_config_file(tmp_path):
    tree = tmp_path / "tree"  # a copy, so that the build leaves nothing in the checkout
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.nbi", "*.nbc")
    for name in ("src", "conf"):
        shutil.copytree(ROOT / name, tree / name, ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tree / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
        + ["-w", str(tmp_path), str(tree)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("trackmind-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    want = {
        f"trackmind/conf/{p.relative_to(ROOT / 'conf')}" for p in (ROOT / "conf").rglob("*.yaml")
    }
    assert want and want <= names
    assert "trackmind/defaults.py" in names and "trackmind/sim/game.py" in names
