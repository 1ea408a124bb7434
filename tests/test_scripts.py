"""The command-line scripts: results on good input, one-line errors on bad input."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_script(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_drive_prints_race_times(capsys):
    assert load_script("drive").main(["--maps", "starter"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("starter"))
    assert "True" in row and 1.0 <= float(row.split()[-1]) <= 2.0


@pytest.mark.parametrize(
    "argv, msg",
    [
        (["--maps", "nope"], "unknown map name 'nope'"),
        (["--maps", "missing.csv"], "missing.csv: map file not found"),
        (["--maps", "starter", "--speed-share", "0"], "--speed-share must be in"),
    ],
)
def test_drive_bad_input_is_one_line(argv, msg, capsys):
    assert load_script("drive").main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and "\n" not in err and "Traceback" not in err
