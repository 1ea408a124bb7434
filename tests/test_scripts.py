"""The command-line scripts: results on good input, one-line errors on bad input."""

import importlib.util
import json
from pathlib import Path

import numpy as np
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
    row = next(
        line
        for line in out.splitlines()
        if line.startswith("| iqn_floats | cpu | fp32 | none | no | host | 0 |")
    )
    cells = [c.strip().replace(",", "").rstrip("%") for c in row.strip("|").split("|")]
    ours, batches, ref, ratio, share, sample_ms, update_ms, nbytes = map(float, cells[7:15])
    assert min(ours, batches, ref, ratio, share, sample_ms, update_ms, nbytes) > 0
    assert share < 100 and cells[15] == "no frame" and abs(batches - ours / 64) < 0.1
    # the step alone is no slower than the whole overlapped step (1000 / batches/s), give or
    # take the machine's noise
    assert update_ms < 3 * 1000 / batches


def _bench_learner_rows(capsys, *extra: str) -> list[list[str]]:
    threads = torch.get_num_threads()
    argv = ["--quick", "--presets", "iqn_floats", "--batch", "64", "--transitions", "1000"]
    argv += ["--repeats", "1", "--repeat-s", "0.05", "--threads", "1", "--devices", "cpu"]
    try:
        assert load_script("bench_learner").main([*argv, *extra]) == 0
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert "devices: cpu = " in out  # the table names the machine
    rows = [line for line in out.splitlines() if line.startswith("| iqn_floats | cpu |")]
    return [[c.strip().replace(",", "") for c in r.strip("|").split("|")] for r in rows]


def test_bench_learner_bf16_autocast_on_cpu(capsys):
    rows = _bench_learner_rows(capsys, "--precision", "fp32", "bf16")
    assert [r[2] for r in rows] == ["fp32", "bf16"]
    assert all(float(r[7]) > 0 and float(r[9]) > 0 for r in rows)


def test_bench_learner_prefetch_rows(capsys):
    """--prefetch 0 1: the step samples itself, then takes batches sampled on a thread."""
    rows = _bench_learner_rows(capsys, "--prefetch", "0", "1")
    assert [r[6] for r in rows] == ["0", "1"]
    assert all(float(r[7]) > 0 and 0 <= float(r[11].rstrip("%")) < 100 for r in rows)


def test_bench_learner_side_thread_rows(capsys):
    """--side-thread: the step on one thread, the target's forward aside, half the batch."""
    rows = _bench_learner_rows(capsys, "--side-thread", "none", "target", "split")
    assert [r[16] for r in rows] == ["none", "target", "split"]
    assert all(float(r[7]) > 0 and float(r[9]) > 0 for r in rows)


def test_bench_learner_graph_rows_dry_run_on_cpu(capsys, tmp_path):
    """--cuda-graph 0 1 on a CPU: the update a GPU would capture, run eagerly; --json."""
    out = tmp_path / "rows.json"
    rows = _bench_learner_rows(capsys, "--cuda-graph", "0", "1", "--json", str(out))
    assert [r[4] for r in rows] == ["no", "yes"] and [r[5] for r in rows] == ["host", "host"]
    assert all(float(r[7]) > 0 for r in rows)
    saved = json.loads(out.read_text())
    assert [r["graph"] for r in saved["rows"]] == [False, True]
    assert saved["devices"].startswith("cpu = ")


@pytest.mark.slow
def test_bench_learner_compiled_on_cpu(capsys):
    """torch.compile of the learner's networks (inductor, a C++ compiler) on the CPU."""
    rows = _bench_learner_rows(capsys, "--compile", "none", "default")
    assert [r[3] for r in rows] == ["none", "default"]
    assert all(float(r[7]) > 0 for r in rows)


def test_bench_learning_rows_by_hand():
    """bench_learning.summarise: first finish, closing-window finish rate and median ratio."""
    bench = load_script("bench_learning")
    history = [
        {"wall_s": 60.0, "time_ms": None, "frames": 9_000},
        {"wall_s": 150.0, "time_ms": 30_000.0, "frames": 20_000},  # first finish at 2.5 min
        {"wall_s": 700.0, "time_ms": 22_000.0, "frames": 90_000},  # closing window: 600..1200 s
        {"wall_s": 900.0, "time_ms": None, "progress": 0.6, "frames": 120_000},
        {"wall_s": 1000.0, "time_ms": 24_000.0, "frames": 130_000},
        {"wall_s": 1190.0, "time_ms": 20_900.0, "frames": 150_000},  # 1.045x: within 1.05
    ]
    row = bench.summarise(history, reference_ms=20_000.0, minutes=30, end_s=1200.0)
    assert row["first_finish_min"] == 2.5 and row["first_finish_actions"] == 20_000
    assert row["near_actions"] == 150_000 and row["near_min"] == pytest.approx(1190 / 60)
    assert row["late_races"] == 4 and row["finish_rate"] == 0.75
    assert row["median_ratio"] == pytest.approx(1.1)  # median of 1.10, 1.20, 1.045
    assert row["best_ratio"] == pytest.approx(1.045)
    assert row["lost_median_progress"] == 0.6 and row["lost_at_start"] == 0.0
    assert row["late_progress"] == pytest.approx((1 + 0.6 + 1 + 1) / 4)  # a finish covers 1
    late_stalls = [*history, {"wall_s": 1195.0, "time_ms": None, "progress": 0.01}]
    stalled = bench.summarise(late_stalls, 20_000.0, 30, 1200.0)  # 2 of 5 late races lost
    assert stalled["lost_median_progress"] == pytest.approx(0.305)  # median of 0.6, 0.01
    assert stalled["lost_at_start"] == 0.2  # 1 of the 5 late races never left the start
    assert stalled["late_progress"] == pytest.approx((3.6 + 0.01) / 5)
    assert not bench.meets(row)  # 75% < 90%
    assert bench.meets({**row, "finish_rate": 0.9})
    assert bench.window_s(6) == 120.0  # a short budget reads its last third
    never = bench.summarise(history[:1], 20_000.0, 30, 1200.0)
    assert never["first_finish_min"] is None and never["median_ratio"] is None
    # the table names a row's map and the overrides it ran with
    row.update(map="hairpins", option="hairpins", minutes=30, run_id="0123456789", overrides="")
    line = bench.table([row]).splitlines()[2]
    want = (
        "| hairpins | 30 min | 2.5 min | 75% of 4 | 1.100 | 60% of the map, 0% of races | 1.045 |"
    )
    assert line.startswith(want)
    # a map raced in a cycle meets its target at 80% finished
    assert bench.meets({**row, "option": "builtin_cycle", "finish_rate": 0.8})
    assert not bench.meets({**row, "option": "builtin_cycle", "finish_rate": 0.79})

    old = {k: v for k, v in row.items() if not k.startswith("lost_")}  # a row measured before
    assert "| 1.100 | - | 1.045 | 6 | no |" in bench.table([old]).splitlines()[2]
    tuned = bench.table([{**row, "overrides": "buffer.lost_ends=[stuck]"}]).splitlines()[2]
    assert tuned.startswith("| hairpins `buffer.lost_ends=[stuck]` | 30 min |")


def test_bench_learning_curve_by_hand():
    """finish_curve: the share finished per tenth of the budget, late races in the last."""
    bench = load_script("bench_learning")
    history = [
        {"wall_s": 10.0, "time_ms": None},  # 30 min: tenths of 180 s
        {"wall_s": 200.0, "time_ms": None},
        {"wall_s": 250.0, "time_ms": 70_000.0},
        {"wall_s": 1700.0, "time_ms": 68_000.0},
        {"wall_s": 1808.0, "time_ms": None},  # ended after the budget: the last tenth
    ]
    curve = bench.finish_curve(history, minutes=30)
    assert curve == [0.0, 0.5, None, None, None, None, None, None, None, 0.5]
    assert bench.finish_curve(history, minutes=3, windows=2) == [0.0, 0.5]  # 90 s halves
    assert bench.summarise(history, 60_000.0, 30, 1808.0)["curve"] == curve
    row = {"map": "technical", "option": "technical", "minutes": 30, "overrides": "seed=1"}
    lines = bench.curves_table([{**row, "curve": curve, "run_id": "0123456789"}]).splitlines()
    cells = "0 50 - - - - - - - 50 | - | - |"  # the curve, no autocorrelation, no value drift
    assert lines[2] == f"| technical `seed=1` | 30 min | {cells} `01234567` |"
    assert len(bench.curves_table([{**row, "curve": None, "run_id": "x"}]).splitlines()) == 2


def test_bench_learning_equal_actions_by_hand():
    """Greedy races counted per 100k actions collected; two runs compared over the last third
    of the whole bins both reached, whatever their speeds in minutes."""
    bench = load_script("bench_learning")
    fast = [
        {"wall_s": 60.0, "time_ms": None, "frames": 50_000},  # bin 0
        {"wall_s": 300.0, "time_ms": 70_000.0, "frames": 250_000},  # bin 2
        {"wall_s": 400.0, "time_ms": None, "frames": 260_000},  # bin 2
        {"wall_s": 600.0, "time_ms": 69_000.0, "frames": 410_000},  # bin 4
        {"wall_s": 700.0, "time_ms": 68_000.0, "frames": 530_000},  # bin 5: the slow never got here
        {"wall_s": 710.0, "time_ms": None},  # saved without the counter: not binned
    ]
    bins = bench.action_bins(fast)
    assert bins == [[0, 1], [0, 0], [1, 2], [0, 0], [1, 1], [1, 1]]
    assert bench.actions_collected(fast) == 530_000
    assert bench.action_bins([{"wall_s": 1.0, "time_ms": None}]) == []
    row = bench.summarise(fast, 60_000.0, 30, 720.0)
    assert row["action_bins"] == bins and row["actions"] == 530_000
    slow = {"action_bins": [[0, 3], [1, 2], [2, 3], [2, 2]], "actions": 390_000}
    # whole bins both reached: 3 (0-300k); the last third of 3 is one bin: [2, 3)
    assert bench.equal_actions_window([row, slow]) == (2, 3)
    assert bench.rate_in_bins(row["action_bins"], 2, 3) == 0.5
    assert bench.rate_in_bins(slow["action_bins"], 2, 3) == pytest.approx(2 / 3)
    assert bench.rate_in_bins(bins, 1, 2) is None  # no race ended there
    # nine whole bins: the last three; under one whole bin, or a row without counts: None
    nine = {"action_bins": [[0, 1]] * 10, "actions": 950_000}  # 950k actions: ten bins
    assert bench.equal_actions_window([nine]) == (6, 9)
    assert bench.equal_actions_window([row, {"action_bins": [[0, 1]], "actions": 90_000}]) is None
    assert bench.equal_actions_window([row, {"action_bins": [], "actions": None}]) is None


def test_bench_learning_outcome_autocorrelation_by_hand():
    """Lag-k autocorrelation of race outcomes: runs together > 0, alternating < 0."""
    bench = load_script("bench_learning")
    # 1 1 0 0: mean 1/2, deviations +-1/2, sum of squares 1; lag 1: 1/4 - 1/4 + 1/4
    assert bench.outcome_autocorrelation([True, True, False, False]) == 0.25
    # 1 0 1 0: three products of -1/4 over 1
    assert bench.outcome_autocorrelation([True, False, True, False]) == -0.75
    # lag 2 of 1 0 1 0: two products of +1/4 over 1
    assert bench.outcome_autocorrelation([True, False, True, False], lag=2) == 0.5
    # 1 1 1 0: mean 3/4, devs 1/4 1/4 1/4 -3/4, sum of squares 3/4; lag 1: 1/16 + 1/16 - 3/16
    assert bench.outcome_autocorrelation([True, True, True, False]) == -1 / 12
    assert bench.outcome_autocorrelation([True, True, True]) is None  # one outcome only
    assert bench.outcome_autocorrelation([True, False]) is None  # too few for lag 1
    history = [  # late_outcomes sorts by time and keeps the races from start_s on
        {"wall_s": 1700.0, "time_ms": 1.0},
        {"wall_s": 100.0, "time_ms": None},
        {"wall_s": 1300.0, "time_ms": None},
        {"wall_s": 1600.0, "time_ms": None},
        {"wall_s": 1800.0, "time_ms": 2.0},
    ]
    assert bench.late_outcomes(history, 1200.0) == [False, False, True, True]
    assert bench.summarise(history, 60_000.0, 30, 1808.0)["late_autocorr"] == 0.25
    row = {"map": "technical", "option": "technical", "minutes": 30, "overrides": ""}
    cells = {**row, "curve": [0.5] * 10, "late_autocorr": 0.25, "run_id": "0123456789"}
    assert bench.curves_table([cells]).splitlines()[2].endswith("| +0.25 | - | `01234567` |")


def test_bench_learning_value_drift_by_hand():
    """The closing window's median Q less the lowest one-minute median of the run."""
    bench = load_script("bench_learning")
    settled = [(0.0, -1.0), (30.0, -1.0), (60.0, -5.0), (90.0, -5.0), (120.0, -4.0), (150.0, -4.5)]
    # minute medians -1, -5, -4.25; closing window from 120 s: median(-4, -4.5) = -4.25
    assert bench.value_drift(settled, 120.0) == -4.25 - -5.0
    diverged = [(0.0, -4.0), (60.0, -4.5), (120.0, 5.0), (180.0, 17.0)]
    assert bench.value_drift(diverged, 120.0) == 11.0 - -4.5  # median(5, 17) = 11
    assert bench.value_drift(settled, 200.0) is None  # no point in the window
    row = {"map": "technical", "option": "technical", "minutes": 30, "overrides": ""}
    cells = {**row, "curve": [0.5] * 10, "q_drift": 15.5, "run_id": "0123456789"}
    assert bench.curves_table([cells]).splitlines()[2].endswith("| - | +15.50 | `01234567` |")


def test_bench_learning_counter_rate_by_hand():
    """transitions/s is the slope of the frames counter, whatever order its points come in."""
    bench = load_script("bench_learning")
    frames = [(130.0, 9000.0), (100.0, 1000.0), (110.0, 1000.0), (120.0, 1000.0)]
    assert bench.counter_rate(frames) == (9000.0 - 1000.0) / (130.0 - 100.0)  # 266.67/s
    assert bench.counter_rate([(5.0, 10.0)]) is None  # one point: no rate
    assert bench.counter_rate([(5.0, 10.0), (5.0, 20.0)]) is None  # no span
    races = [{"wall_s": 60.0, "frames": 3000}, {"wall_s": 90.0, "frames": None}]
    races += [{"wall_s": 160.0, "frames": 53000}]  # a race saved without the counter is skipped
    assert bench.transitions_per_s(races) == 500.0  # 50,000 actions in 100 s
    assert bench.transitions_per_s(races[1:2]) is None


def test_bench_learning_records_each_run_where_it_reads_it_back(monkeypatch, tmp_path):
    """A run is recorded in --tracking-uri's store, passed before the lever's overrides, so
    that its row is read back from the store it went to and no row names the store."""
    bench = load_script("bench_learning")
    seen = []
    monkeypatch.setattr(bench.subprocess, "run", lambda args, **kw: seen.append(args))
    uri = "sqlite:///elsewhere/mlflow.db"
    bench.run_training("technical", 10, ["network.layer_norm=true"], tmp_path, uri)
    (args,) = seen
    assert args[-2:] == [f"logger.tracking_uri={uri}", "network.layer_norm=true"]
    # a relative SQLite store is the repository's, wherever the benchmark is started from
    assert bench.store_uri("sqlite:///outputs/mlflow.db") == f"sqlite:///{ROOT}/outputs/mlflow.db"
    assert bench.store_uri("sqlite:////abs/mlflow.db") == "sqlite:////abs/mlflow.db"
    assert bench.store_uri("http://127.0.0.1:5000") == "http://127.0.0.1:5000"


def test_bench_learning_readme_lists_every_saved_row_defaults_first():
    bench = load_script("bench_learning")
    keys = [
        "technical|30|buffer.n_steps=5",
        "technical|30|",
        "builtin_cycle|60|",
        "hairpins|30|",
        "starter|30|env.ticks_per_action=5",
    ]
    saved = {k: [{"key": k, "n": 0}] for k in keys}
    saved["builtin_cycle|60|"].append({"key": "builtin_cycle|60|", "n": 1})
    assert [(r["key"], r["n"]) for r in bench.ordered_rows(saved)] == [
        ("hairpins|30|", 0),
        ("technical|30|", 0),
        ("builtin_cycle|60|", 0),
        ("builtin_cycle|60|", 1),
        ("starter|30|env.ticks_per_action=5", 0),
        ("technical|30|buffer.n_steps=5", 0),
    ]


def test_bench_learning_seed_groups_by_hand():
    """Three seeds of the defaults and two of a lever on technical: medians by hand."""
    bench = load_script("bench_learning")

    def row(overrides, first, rate, ratio):
        return {
            "map": "technical",
            "option": "technical",
            "minutes": 30.0,
            "overrides": overrides,
            "first_finish_min": first,
            "finish_rate": rate,
            "median_ratio": ratio,
        }

    rows = [
        row("", 12.1, 0.54, 1.133),
        row("seed=1", 25.4, 0.06, 1.283),
        row("seed=2", 4.0, 0.95, 1.10),  # this one meets every target
        row("x=1", None, 0.0, None),  # never finished: counts as the whole budget
        row("x=1 seed=1", 10.0, 0.5, 1.2),
        row("y=2", 3.0, 1.0, 1.0),  # one seed only: no summary
    ]
    defaults, lever = bench.seed_groups(rows)
    assert (defaults["overrides"], defaults["seeds"]) == ("", 3)
    assert defaults["first_finish_min"] == 12.1 and defaults["finish_rate"] == 0.54
    assert defaults["finish_rate_range"] == (0.06, 0.95) and defaults["median_ratio"] == 1.133
    assert defaults["met"] == 1
    assert (lever["overrides"], lever["seeds"], lever["met"]) == ("x=1", 2, 0)
    assert lever["first_finish_min"] == 20.0  # median of 30 (never) and 10
    assert lever["finish_rate"] == 0.25 and lever["median_ratio"] == 1.2
    assert "| technical `x=1` | 30 min | 2 | 20.0 min | 25% (0%-50%) | 1.200 | 0 of 2 |" in (
        bench.seeds_table([defaults, lever])
    )


def test_bench_learning_rebase_for_new_defaults_by_hand():
    """A change of defaults restates each saved row's overrides: what it ran with, less the
    defaults now; old defaults a row kept come first, `seed=` last."""
    bench = load_script("bench_learning")
    was = {"trainer.torch_threads": "2", "learner.target_tau": "0.02"}
    now = {"trainer.torch_threads": "1", "learner.target_tau": "0.005"}
    cases = {
        "": "trainer.torch_threads=2 learner.target_tau=0.02",
        "seed=1": "trainer.torch_threads=2 learner.target_tau=0.02 seed=1",
        "trainer.torch_threads=1 learner.target_tau=0.005 seed=2": "seed=2",
        "trainer.torch_threads=1 learner.target_taus=random": (
            "learner.target_tau=0.02 learner.target_taus=random"
        ),
        "network.layer_norm=true seed=1": (
            "trainer.torch_threads=2 learner.target_tau=0.02 network.layer_norm=true seed=1"
        ),
        "trainer.torch_threads=2": "learner.target_tau=0.02 trainer.torch_threads=2",
        "learner.target_tau=0.02 trainer.torch_threads=2": (
            "learner.target_tau=0.02 trainer.torch_threads=2"
        ),
        # Hydra's deletions stay as they ran, and a deleted key gains no old default
        "~env.observation.x seed=1": (
            "trainer.torch_threads=2 learner.target_tau=0.02 ~env.observation.x seed=1"
        ),
        "~learner.target_tau trainer.torch_threads=1": "~learner.target_tau",
    }
    for tag, want in cases.items():
        assert bench.rebased_tag(tag, was, now) == want, tag

    saved = {
        "technical|30|": [{"overrides": "", "run_id": "a"}],
        "hairpins|30|trainer.torch_threads=1 learner.target_tau=0.005": [
            {"overrides": "trainer.torch_threads=1 learner.target_tau=0.005", "run_id": "b"}
        ],
        "hairpins|30|learner.target_tau=0.02 trainer.torch_threads=2": [
            {"overrides": "learner.target_tau=0.02 trainer.torch_threads=2", "run_id": "c"}
        ],
    }
    out = bench.rebase(saved, was, now)
    assert list(out) == [
        "technical|30|trainer.torch_threads=2 learner.target_tau=0.02",
        "hairpins|30|",
        "hairpins|30|learner.target_tau=0.02 trainer.torch_threads=2",
    ]
    a, b, c = (rows[0] for rows in out.values())
    assert a == {
        "overrides": "trainer.torch_threads=2 learner.target_tau=0.02",
        "run_id": "a",
        "overrides_as_run": "",
    }
    assert b["overrides"] == ""
    assert b["overrides_as_run"] == "trainer.torch_threads=1 learner.target_tau=0.005"
    assert "overrides_as_run" not in c  # its key already said what it ran with
    assert saved["technical|30|"][0] == {"overrides": "", "run_id": "a"}  # not changed in place
    # the same settings run twice would land on one key
    twice = {
        "technical|30|": [{}],
        "technical|30|trainer.torch_threads=2 learner.target_tau=0.02": [{}],
    }
    with pytest.raises(ValueError, match="both become"):
        bench.rebase(twice, was, now)
    with pytest.raises(ValueError, match="differ"):
        bench.rebase(saved, was, {"trainer.torch_threads": "1"})


def test_bench_learning_rebase_of_one_maps_own_default(tmp_path, capsys):
    """A map option's own default (a key of its cycle row) re-keys that option's rows alone,
    checked against map=<option>; other maps' rows keep their keys."""
    bench = load_script("bench_learning")
    saved = {
        "hairpins|30|": [{"overrides": ""}],
        "hairpins|30|seed=1": [{"overrides": "seed=1"}],
        "hairpins|30|exploration.demos.share=0.0 seed=1": [{"overrides": "x"}],
        "technical|10|": [{"overrides": ""}],
    }
    was, now = {"map.cycle.0.demos": "null"}, {"map.cycle.0.demos": "0.25"}
    out = bench.rebase(saved, was, now, ["hairpins"])
    assert list(out) == [
        "hairpins|30|map.cycle.0.demos=null",
        "hairpins|30|map.cycle.0.demos=null seed=1",
        "hairpins|30|map.cycle.0.demos=null exploration.demos.share=0.0 seed=1",
        "technical|10|",
    ]
    assert out["hairpins|30|map.cycle.0.demos=null seed=1"][0]["overrides_as_run"] == "seed=1"
    assert out["technical|10|"] == saved["technical|10|"]
    # through the command line, against the shipped conf/map/hairpins.yaml
    results = tmp_path / "rows.json"
    results.write_text(json.dumps(saved))
    argv = ["--results", str(results), "--no-page", "--defaults-of", "hairpins"]
    ok = ["--defaults-were", "map.cycle.0.demos=null", "--defaults-are", "map.cycle.0.demos=0.25"]
    assert bench.main([*argv, *ok]) == 0
    assert list(json.loads(results.read_text())) == list(out)
    wrong = ["--defaults-were", "map.cycle.0.demos=null", "--defaults-are", "map.cycle.0.demos=0.5"]
    assert bench.main([*argv, *wrong]) == 2
    assert "but the config's default is 0.25 (map=hairpins)" in capsys.readouterr().err
    assert bench.main(["--results", str(results), "--defaults-of", "hairpins"]) == 2
    assert "--defaults-of needs --defaults-were" in capsys.readouterr().err
    assert bench.main([*argv[:4], "nowhere", *ok]) == 2
    assert "--defaults-of: no conf/map option 'nowhere'" in capsys.readouterr().err


def test_bench_learning_defaults_change_must_be_the_configs(tmp_path, capsys):
    """--defaults-are must be what the config composes to now, --defaults-were must not."""
    from omegaconf import OmegaConf

    bench = load_script("bench_learning")
    config = OmegaConf.create({"learner": {"target_tau": 0.02, "lr": {"points": [[0, 1.0e-3]]}}})
    check = bench.defaults_problem
    assert check({"learner.target_tau": "0.5"}, {"learner.target_tau": "0.02"}, config) is None
    assert (
        check({"learner.lr.points": "[[0,3e-4]]"}, {"learner.lr.points": "[[0,1.0e-3]]"}, config)
        is None
    )
    assert check({"learner.target_tau": "0.5"}, {"learner.target_tau": "0.005"}, config) == (
        "--defaults-are: learner.target_tau=0.005, but the config's default is 0.02"
    )
    assert check({"learner.target_tau": "2e-2"}, {"learner.target_tau": "0.02"}, config) == (
        "--defaults-were: learner.target_tau=2e-2 is still the config's default"
    )
    assert check({"learner.nope": "1"}, {"learner.nope": "2"}, config) == (
        "--defaults-are: no config key 'learner.nope'"
    )
    # through the command line, against the shipped config: the file is re-keyed, no page
    results = tmp_path / "rows.json"
    results.write_text(json.dumps({"technical|30|": [{"overrides": ""}]}))
    kappa = OmegaConf.load(ROOT / "conf" / "learner" / "iqn.yaml")["kappa"]
    argv = ["--results", str(results), "--no-page", "--defaults-were", "learner.kappa=1.0"]
    assert bench.main([*argv, "--defaults-are", f"learner.kappa={kappa}"]) == 0
    assert list(json.loads(results.read_text())) == ["technical|30|learner.kappa=1.0"]
    assert bench.main([*argv, "--defaults-are", "learner.kappa=7.0"]) == 2
    assert "but the config's default is" in capsys.readouterr().err
    assert bench.main([*argv, "--defaults-are", "learner.gamma=1"]) == 2
    assert "name other keys: learner.gamma, learner.kappa" in capsys.readouterr().err


def test_bench_learning_skips_a_saved_key_and_says_how_to_add_a_row(monkeypatch, tmp_path, capsys):
    """A key with a saved row is not run again; the message names the row's date and how to
    put a new row beside it (a control of this session needs an override of its own)."""
    bench = load_script("bench_learning")
    saved = json.loads((ROOT / "docs" / "bench_learning.json").read_text())
    results = tmp_path / "rows.json"
    results.write_text(json.dumps({"technical|30|seed=1": saved["technical|30|seed=1"]}))

    def no_run(*args, **kwargs):
        raise AssertionError("a saved key was run again")

    monkeypatch.setattr(bench, "run_training", no_run)
    argv = ["--maps", "technical", "--seeds", "1", "--results", str(results), "--no-page"]
    assert bench.main(argv) == 0
    out = capsys.readouterr().out
    date = saved["technical|30|seed=1"][0]["date"]
    assert f"technical|30|seed=1: already measured on {date}" in out
    assert "an override of its own" in out and "--force to replace it" in out


def test_min_deps_pins_each_lower_bound():
    pins = load_script("min_deps").minimum_pins(
        [
            "torch>=2.4",
            "mlflow>=3.0",
            "ray>=2.40,<3",
            "tensordict >= 0.14",
            "pywin32>=306; sys_platform == 'win32'",
            "stable-baselines3[extra]>=2.6",
            "tminterface",
        ]
    )
    assert pins == [
        "mlflow==3.0",
        "ray==2.40",
        "tensordict==0.14",
        "pywin32==306; sys_platform == 'win32'",
        "stable-baselines3==2.6",
    ]


def test_map_stats_figures_by_hand():
    stats = load_script("map_stats")
    assert stats.largest_braking(np.array([10.0, 30.0, 20.0, 25.0, 5.0, 6.0])) == 20.0
    assert stats.largest_braking(np.array([1.0, 2.0, 3.0])) == 0.0
    flags = np.array([True, True, False, True, True, True])
    assert stats.longest_run(flags, np.array([1.0, 2.0, 5.0, 1.0, 1.0, 0.5])) == 3.0


def test_make_circuit_writes_the_shipped_grandprix_line_again(tmp_path, capsys):
    """maps/grandprix_long.csv is what its command in conf/map/grandprix_long.yaml writes:
    an open line of 5.5 km with a reference of at least 90 s."""
    out = tmp_path / "long.csv"
    args = ["--grandprix", "--seed", "202", "--length", "5000", "--out", str(out)]
    assert load_script("make_circuit").main(args) == 0
    assert "open line, 5523 m" in capsys.readouterr().out
    assert out.read_text() == (ROOT / "maps" / "grandprix_long.csv").read_text()
    from trackmind.sim.mapio import load_map
    from trackmind.sim.reference import reference_time_ms

    assert reference_time_ms(load_map(str(out))) >= 90_000


def test_race_ends_assigns_each_stop_to_the_zone_ahead_by_hand():
    ends = load_script("race_ends")
    from collections import Counter

    # zones at 100, 500 and 900 m of a 1000 m map; a stop counts for the first zone ahead or
    # up to 20 m behind: 5% (50 m) -> 100; 11% (110 m, 10 m past it) -> 100; 15% -> 500;
    # 48% -> 500; 91% (910 m) -> 900; 95% (950 m, 50 m past the last) -> None
    zones = [{"s": 100.0}, {"s": 500.0}, {"s": 900.0}]
    got = ends.stopped_at([0.05, 0.11, 0.15, 0.48, 0.91, 0.95], zones, 1000.0)
    assert got == [100, 100, 500, 500, 900, None]
    # stops over two runs: 100 x4, 500 x5, 900 x1 (5%), None x10 -> with min_share 0.15 the
    # zones 500 (25%) and None (50%) and 100 (20%) stay, in map order with None last
    counts = [Counter({100: 4, 500: 1, None: 5}), Counter({500: 4, 900: 1, None: 5})]
    assert ends.crowded_zones(counts, 0.15) == [100, 500, None]
    assert ends.crowded_zones(counts, 0.05) == [100, 500, 900, None]
    assert ends.crowded_zones([Counter()], 0.1) == []


def test_wall_contacts_keeps_the_hits_that_braked_the_car():
    walls = load_script("wall_contacts")
    contacts = [(100, 40.0, 38.5), (250, 49.5, 20.8), (400, 30.0, 20.0), (500, 25.0, 26.0)]
    # drops 1.5, 28.7, 10.0 and -1.0 m/s: 10 or more are the hits
    assert walls.hard_hits(contacts, 10.0) == [(250, 49.5, 20.8), (400, 30.0, 20.0)]
    assert walls.hard_hits(contacts, 30.0) == []


def test_snapshot_ensembles_windows_and_table_by_hand(tmp_path):
    se = load_script("snapshot_ensembles")
    assert se.window(4, 1, 1) == [4]
    assert se.window(4, 3, 1) == [2, 3, 4]
    assert se.window(8, 5, 2) == [0, 2, 4, 6, 8]
    assert se.window(7, 5, 2) is None and se.window(1, 3, 1) is None
    rows = [
        {"single": {"finished": True, "ratio": 1.2, "progress": 1.0}},
        {
            "single": {"finished": False, "ratio": None, "progress": 0.4},
            "ens3": {"finished": True, "ratio": 1.1, "progress": 1.0},
        },
        {
            "single": {"finished": True, "ratio": 1.0, "progress": 1.0},
            "ens3": {"finished": True, "ratio": 1.3, "progress": 1.0},
        },
    ]
    assert se.arm_figures(rows, "single") == {
        "races": 3,
        "finished": 2,
        "median_ratio": 1.1,
        "median_progress": 1.0,
    }
    assert se.arm_figures(rows, "ens3")["median_ratio"] == pytest.approx(1.2)
    assert se.arm_figures(rows, "avg5") is None
    history = [
        {"wall_s": 10, "time_ms": 5},
        {"wall_s": 30, "time_ms": None},
        {"wall_s": 40, "time_ms": 7},
    ]
    assert se.training_rate(history, 20) == (1, 2)
    f = tmp_path / "a.json"
    f.write_text(
        json.dumps(
            {
                "label": "seed 0",
                "run_id": "abcdef123",
                "from_minute": 20,
                "training": [1, 2],
                "rows": rows,
            }
        )
    )
    t = se.table([str(f), str(f)])
    assert t["columns"][2] == "alone" and t["columns"][-1] == "training's greedy races"
    assert t["rows"][0][0] == "seed 0 (`abcdef12`)" and t["rows"][0][2] == "2 of 3 (67%), 1.100"
    assert t["rows"][0][3] == "2 of 2 (100%), 1.200" and t["rows"][0][4] == "-"
    assert t["rows"][-1][2] == "**4 of 6 (67%)**" and t["rows"][-1][-1] == "**2 of 4 (50%)**"
