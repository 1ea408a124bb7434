"""The command-line scripts: results on good input, one-line errors on bad input."""

import importlib.util
from pathlib import Path

import pytest
import torch

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


def test_bench_learner_quick_row(capsys):
    threads = torch.get_num_threads()
    argv = ["--quick", "--presets", "iqn_floats", "--batch", "64", "--transitions", "1000"]
    argv += ["--repeats", "1", "--repeat-s", "0.05", "--threads", "1", "--devices", "cpu"]
    try:
        assert load_script("bench_learner").main(argv) == 0
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| iqn_floats | cpu |"))
    cells = [c.strip().replace(",", "").rstrip("%") for c in row.strip("|").split("|")]
    ours, ref, ratio, share, nbytes = map(float, cells[2:7])
    assert min(ours, ref, ratio, share, nbytes) > 0 and share < 100
    assert cells[7] == "no frame"
