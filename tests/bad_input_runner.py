"""Run scripts on bad input, each in a forked copy of one warm interpreter (for test_bad_input).

    python tests/bad_input_runner.py cases.json results.json

Each case is {"id", "script", "argv", "cwd"}. The heavy imports happen once here; a forked
child runs the script as `__main__` with the case's argv in the case's cwd, its stderr in a
file. Each result says the exit status, stderr, the seconds it took (imports already warm), and
every path under cwd that the case created, changed or removed.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Path -> (size, mtime_ns) of every file under root; folders by existence alone (a
    folder's mtime moves when an entry is made and removed again)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            out[str(Path(dirpath, name).relative_to(root))] = (-1, 0)
        for name in filenames:
            p = Path(dirpath, name)
            st = p.stat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


def run_case(case: dict, err_path: Path) -> int:
    """Fork, run the script as __main__ in the child, return its exit status."""
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 1
        try:
            import torch

            torch.set_num_threads(1)  # the parent's thread pool does not survive a fork
            os.chdir(case["cwd"])
            fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 2)
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
            sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
            sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
            script = ROOT / "scripts" / f"{case['script']}.py"
            sys.argv = [str(script), *case["argv"]]
            sys.path.insert(0, str(script.parent))
            try:
                runpy.run_path(str(script), run_name="__main__")
                code = 0
            except SystemExit as e:
                if isinstance(e.code, int) or e.code is None:
                    code = e.code or 0
                else:
                    print(e.code, file=sys.stderr)
                    code = 1
            except BaseException:
                traceback.print_exc()
                code = 1
            sys.stderr.flush()
            sys.stdout.flush()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def main(cases_path: str, results_path: str) -> None:
    import hydra  # noqa: F401  (the imports every case needs, once)
    import lightning  # noqa: F401
    import torch  # noqa: F401

    import trackmind.training.factory  # noqa: F401
    import trackmind.training.run  # noqa: F401

    cases = json.loads(Path(cases_path).read_text())
    results = {}
    for case in cases:
        cwd = Path(case["cwd"])
        err = cwd.parent / f"{case['id']}.stderr"
        before = snapshot(cwd)
        t0 = time.monotonic()
        code = run_case(case, err)
        seconds = time.monotonic() - t0
        after = snapshot(cwd)
        touched = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        results[case["id"]] = {
            "code": code,
            "stderr": err.read_text(),
            "touched": touched,
            "seconds": seconds,
        }
    Path(results_path).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(*sys.argv[1:3])
