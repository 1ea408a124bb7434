"""A pip user's first run: build the wheel, install it in a fresh venv, train through the
console script, with no clone in sight.

    python scripts/wheel_smoke.py                 # make test-wheel (CI runs it)
    python scripts/wheel_smoke.py --keep DIR      # leave the venv and the run in DIR

The venv gets torch first (TORCH_SPEC, the CPU build the Makefile pins), then the wheel with
its dependencies from the package index, torch named again so it is never swapped. The
console scripts run from an empty folder, so nothing of the checkout (conf/, scripts/,
src/) can stand in for what the wheel ships: `trackmind-train debug=smoke` must train and
record an MLflow run in that folder, then `trackmind-evaluate` races its agent.pt and
`trackmind-drive` drives a map. Exit status 0 when every step did; otherwise the step that
failed, in one line, and its output.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COPIED = ("src", "conf", "pyproject.toml", "README.md", "LICENSE")


def run(step: str, cmd: list[str], cwd: Path, limit_s: float = 900.0) -> str:
    """Run one step; on failure print what failed in one line, then its output, and exit."""
    t0 = time.monotonic()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=limit_s, env=env)
    print(f"[wheel] {step}: {time.monotonic() - t0:.0f} s, exit {r.returncode}", flush=True)
    if r.returncode != 0:
        print(f"wheel-smoke: {step} failed (exit {r.returncode})", file=sys.stderr)
        print(r.stdout[-4000:], r.stderr[-4000:], sep="\n", file=sys.stderr)
        sys.exit(1)
    return r.stdout + r.stderr


def build_wheel(out: Path) -> Path:
    """The wheel of a copy of the checkout, so the build leaves nothing behind in it."""
    tree = out / "tree"
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.nbi", "*.nbc")
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, tree / name, ignore=skip)
        elif src.is_file():
            shutil.copy(src, tree / name)
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    run("build the wheel", [*cmd, "-w", str(out), str(tree)], out)
    shutil.rmtree(tree)
    (wheel,) = out.glob("trackmind-*.whl")
    return wheel


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=Path, help="work in this folder and keep it")
    ap.add_argument("--python", default=sys.executable, help="the Python of the fresh venv")
    args = ap.parse_args(argv)
    torch_spec = os.environ.get("TORCH_SPEC", "torch==2.13.0")
    work = args.keep or Path(tempfile.mkdtemp(prefix="trackmind-wheel-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        wheel = build_wheel(work)
        venv = work / "venv"
        run("create the venv", [args.python, "-m", "venv", str(venv)], work)
        py, bin_dir = venv / "bin" / "python", venv / "bin"
        run("install torch", [str(py), "-m", "pip", "install", "-q", torch_spec], work)
        # torch named again: a dependency that torch cannot meet fails, never swaps torch
        install = [str(py), "-m", "pip", "install", "-q", torch_spec, str(wheel)]
        run("install the wheel", install, work)
        user = work / "user"  # an empty folder: no conf/, no scripts/, no src/
        user.mkdir()
        where = run("import", [str(py), "-c", "import trackmind; print(trackmind.__file__)"], user)
        if not Path(where.strip().splitlines()[-1]).is_relative_to(venv):
            print(f"wheel-smoke: trackmind imported from {where.strip()}, not the venv")
            return 1
        db = user / "mlflow.db"
        train = [
            str(bin_dir / "trackmind-train"),
            "debug=smoke",
            f"logger.tracking_uri=sqlite:///{db}",
        ]
        run("trackmind-train debug=smoke", train, user)
        (agent,) = user.glob("outputs/*/*/agent.pt")
        query = (
            "import json, mlflow; r = mlflow.search_runs(experiment_names=['trackmind'], "
            "output_format='list'); print(json.dumps([x.info.status for x in r]))"
        )
        env_db = [
            str(py),
            "-c",
            f"import mlflow; mlflow.set_tracking_uri('sqlite:///{db}'); {query}",
        ]
        statuses = json.loads(run("read the MLflow run", env_db, user).strip().splitlines()[-1])
        if statuses != ["FINISHED"]:
            print(f"wheel-smoke: the tracking store holds runs {statuses}, not one FINISHED run")
            return 1
        run("trackmind-evaluate", [str(bin_dir / "trackmind-evaluate"), str(agent)], user)
        out = run("trackmind-drive", [str(bin_dir / "trackmind-drive"), "--maps", "starter"], user)
        if "starter" not in out:
            print("wheel-smoke: trackmind-drive printed no row for starter")
            return 1
        print(f"wheel-smoke: {wheel.name} trains, evaluates and drives from a fresh venv")
        return 0
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
