"""Bad input, one line each: every script, config key and input file a user can get wrong.

Each case runs the real script as a user would (tests/bad_input_runner.py: one warm
interpreter, a fork per case) in a sandbox folder that already holds a recorded run and an
MLflow store. Every case must exit with status 2, print exactly one line naming the key,
flag or file, and leave the sandbox as it was (no run folder, no store written).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]

TRAIN = [  # (id, argv, what the line must name)
    ("map-option", ["map=nonexistent"], "no map option 'nonexistent'"),
    ("map-option-hint", ["map=my_track.csv"], "map.cycle='[{map: path/to/map.csv}]'"),
    ("network-option", ["network=huge"], "no network option 'huge'"),
    ("unknown-key", ["learner.nope=1"], "Could not override 'learner.nope'"),
    ("added-unknown-key", ["+learner.nope=1"], "nope"),
    ("unparsable-override", ["learner.lr.points=[[0,"], "learner.lr.points"),
    ("batch-size", ["learner.batch_size=0"], "learner.batch_size"),
    ("replay-ratio", ["learner.replay_ratio=-1"], "learner.replay_ratio"),
    ("optimizer", ["learner.optimizer=sgd"], "learner.optimizer"),
    ("n-steps", ["buffer.n_steps=0"], "buffer.n_steps"),
    ("mini-race", ["buffer.mini_race_duration_ms=-5"], "buffer.mini_race_duration_ms"),
    ("value-bound", ["buffer.value_bound_rate=fast"], "buffer.value_bound_rate"),
    (
        "value-bound-shaping",
        ["buffer.value_bound_rate=0", "reward.shaping=env"],
        "buffer.value_bound_rate: needs reward.shaping=collate",
    ),
    ("epsilon", ["exploration.epsilon=oops"], "exploration.epsilon"),
    ("starts-share", ["exploration.starts.share=2"], "exploration.starts.share"),
    ("demos-share", ["exploration.demos.share=2"], "exploration.demos.share"),
    ("demos-map-share", ["map=hairpins", "map.cycle.0.demos=2"], "map.cycle[0].demos"),
    (
        "demos-real-game",
        ["env=tminterface", "collector=tminterface", "exploration.demos.share=0.2"],
        "exploration.demos.share: demonstration races need the scripted driver",
    ),
    ("max-time", ["trainer.max_time_s=-1"], "trainer.max_time_s"),
    ("frame-shape", ["env.frame_shape=[4,4]"], "env.frame_shape"),
    ("reward-weight", ["reward.terms.progress.weight=abc"], "reward.terms.progress"),
    ("processes", ["collector.processes=0"], "collector.processes"),
    ("collector-device", ["collector.device=tpu"], "collector.device: must be one of"),
    ("tracking-scheme", ["logger.tracking_uri=foo://x"], "MLflow has no store of scheme 'foo'"),
    (
        "tracking-server",
        ["logger=mlflow_server", "logger.tracking_uri=http://127.0.0.1:9"],
        "logger.tracking_uri: no MLflow tracking server answers at 127.0.0.1:9",
    ),
    ("map-file-missing", ["map.cycle=[{map: maps/missing.csv}]"], "missing.csv: map file not"),
    ("csv-columns", ["map.cycle=[{map: maps/bad_columns.csv}]"], "bad_columns.csv: line 3"),
    ("csv-nan", ["map.cycle=[{map: maps/nan.csv}]"], "nan.csv: line 3: NaN"),
    ("csv-empty", ["map.cycle=[{map: maps/empty.csv}]"], "empty.csv: no rows"),
    ("procedural-seed", ["map.cycle=[{map: procedural:abc}]"], "procedural seed must be an int"),
    ("seed-type", ["seed=abc"], "seed: Value 'abc'"),
    ("seed-float", ["seed=1.5"], "seed: Value '1.5'"),
    ("run-name-type", ["run_name=[1,2]"], "run_name:"),
    ("target-taus", ["learner.target_taus=midpoint"], "learner.target_taus: must be one of"),
    ("policy-cvar", ["network.policy_cvar=0"], "network.policy_cvar: must be in (0, 1]"),
    (
        "policy-cvar-munchausen",
        ["network.policy_cvar=0.5", "learner.munchausen_alpha=0.9"],
        "network.policy_cvar: a risk-averse policy's target excludes Munchausen",
    ),
    ("accelerator", ["trainer.accelerator=tpu"], "trainer.accelerator: must be one of"),
    ("precision", ["trainer.precision=77"], "trainer.precision: must be one of"),
    ("devices", ["trainer.devices=4"], "trainer.devices: must be 1"),
    ("intake-thread", ["trainer.intake_thread=maybe"], "trainer.intake_thread"),
    (
        "intake-ahead",
        ["trainer.intake_ahead_batches=0"],
        "trainer.intake_ahead_batches: must be an integer >= 1",
    ),
    ("devices-cpu-gpu-list", ["trainer.devices=[0]"], "trainer.devices: [0] names a GPU"),
    ("ray-fleet", ["collector=ray", "collector.processes=90"], "collector.processes: 90 workers"),
    ("resume-missing", ["resume=outputs/nowhere"], "nowhere"),
    ("resume-corrupt", ["resume=corrupt.ckpt"], "corrupt.ckpt"),
]
SCRIPTS = [  # (id, script, argv, what the line must name)
    ("evaluate-missing", "evaluate", ["outputs/none.ckpt"], "none.ckpt"),
    ("evaluate-corrupt", "evaluate", ["corrupt.ckpt"], "corrupt.ckpt"),
    ("evaluate-races", "evaluate", ["corrupt.ckpt", "--races", "0"], "--races"),
    ("evaluate-taus", "evaluate", ["corrupt.ckpt", "--taus", "all"], "--taus"),
    ("drive-map", "drive", ["--maps", "nope"], "unknown map name 'nope'"),
    ("drive-map-file", "drive", ["--maps", "missing.csv"], "missing.csv: map file not found"),
    ("drive-speed-share", "drive", ["--speed-share", "0"], "--speed-share"),
    ("drive-frames", "drive", ["--frames", "10xabc"], "--frames"),
    ("audit-missing", "value_audit", ["nope.pt", "--map", "starter"], "nope.pt"),
    ("audit-every", "value_audit", ["nope.pt", "--map", "starter", "--every", "0"], "--every"),
    ("audit-range", "value_audit", ["x.pt", "--map=s", "--from-m=9", "--to-m=1"], "--from-m"),
    ("audit-brake", "value_audit", ["corrupt.ckpt", "--map", "starter", "--brake", "x"], "--brake"),
    ("walls-missing", "wall_contacts", ["nope.pt", "--map", "starter"], "nope.pt"),
    ("walls-drop", "wall_contacts", ["x.pt", "--map", "starter", "--min-drop", "-1"], "--min-drop"),
    ("laps-missing", "lap_sections", ["nope.pt", "--map", "starter"], "nope.pt"),
    ("laps-map", "lap_sections", ["x.pt", "--map", "nope"], "nope"),
    ("race-ends-map", "race_ends", ["--map", "nowhere.csv", "--runs", "abc"], "nowhere.csv"),
    ("race-ends-share", "race_ends", ["--map=starter", "--runs=a", "--min-share=2"], "--min-share"),
    ("target-argmax-missing", "target_argmax", ["nope.pt", "--map", "starter"], "nope.pt"),
    ("target-argmax-odd", "target_argmax", ["x.pt", "--map=s", "--counts", "5"], "--counts"),
    ("bench-learning-minutes", "bench_learning", ["--minutes", "0"], "--minutes"),
    ("bench-learning-maps", "bench_learning", ["--maps", "nope"], "no conf/map option 'nope'"),
    ("bench-learner-batch", "bench_learner", ["--batch", "0"], "--batch"),
    ("bench-learner-preset", "bench_learner", ["--presets", "nope"], "--presets"),
    ("bench-env-batches", "bench_env", ["--batches", "0"], "--batches"),
    ("bench-collectors-repeats", "bench_collectors", ["--repeats", "0"], "--repeats"),
    ("bench-collectors-backends", "bench_collectors", ["--backends", "slurm"], "--backends"),
    ("bench-collectors-device", "bench_collectors", ["--backends", "local",
                                                     "collector.device=tpu"], "collector.device"),
    ("make-circuit-length", "make_circuit", ["--length", "-5"], "--length"),
    ("map-from-run-shape", "make_map_from_run", ["maps/run.npy", "--name", "x", "--challenge",
                                                 "x.Challenge.Gbx", "--reference-time", "55.1"],
     "run.npy"),
    ("map-from-run-time", "make_map_from_run", ["maps/run3.npy", "--name", "x", "--challenge",
                                                "x.Challenge.Gbx", "--reference-time", "soon"],
     "soon"),
    ("record-run-suffix", "record_run", ["run.csv"], "written as .npy"),
    ("record-run-timeout", "record_run", ["run.npy", "--timeout", "0"], "--timeout"),
    ("plot-marks", "plot_learning_curve", ["--marks-min", "0"], "--marks-min"),
    ("sb3-minutes", "train_sb3", ["--minutes", "0"], "--minutes"),
    ("plot-maps-map", "plot_maps", ["--maps", "nope"], "--maps: unknown map name 'nope'"),
    ("plot-maps-out", "plot_maps", ["--out", "maps.xyz"], "--out: 'maps.xyz' must end in"),
    ("screenshot-runs", "mlflow_ui_screenshot", ["--runs", "a"], "--runs"),
    ("min-deps-extras", "min_deps", ["--extras", "nope"], "no extra 'nope'"),
    ("min-deps-flag", "min_deps", ["--dev"], "unrecognized arguments: --dev"),
    ("snapshots-run", "snapshot_ensembles", ["nowhere", "--out", "x.json"],
     "nowhere/validation: no snapshots"),
    ("snapshots-out", "snapshot_ensembles", ["nowhere"], "give a run's output dir and --out"),
    ("sb3-map", "train_sb3", ["--map", "nope", "--minutes", "1"], "unknown map name 'nope'"),
]  # fmt: skip
if not torch.cuda.is_available():  # a CPU machine: asking for the GPU is a config error
    TRAIN.append(("collector-device-cuda", ["collector.device=cuda"], "collector.device: cuda"))
    TRAIN.append(("trainer-gpu", ["trainer=gpu"], "trainer.accelerator: gpu asked for"))
CASES = [(f"train-{i}", "train", argv, want) for i, argv, want in TRAIN] + SCRIPTS


def make_sandbox(root: Path) -> Path:
    """A user's folder: a recorded run, an MLflow store, and the bad files of the table."""
    box = root / "box"
    (box / "outputs/2026-01-01/10-00-00/checkpoints").mkdir(parents=True)
    (box / "outputs/2026-01-01/10-00-00/checkpoints/last.ckpt").write_bytes(b"learned")
    (box / "outputs/mlflow.db").write_bytes(b"recorded runs")
    (box / "maps").mkdir()
    (box / "maps/bad_columns.csv").write_text("x,y,width_right,width_left\n0,0,5,5\n10,0,5\n")
    (box / "maps/nan.csv").write_text("0,0,5,5\n10,0,5,5\nnan,0,5,5\n")
    (box / "maps/empty.csv").write_text("")
    np.save(box / "maps/run.npy", np.zeros((5, 2)))  # not x, y, z
    line = np.stack([np.linspace(0, 300, 601), np.zeros(601), np.zeros(601)], axis=1)
    np.save(box / "maps/run3.npy", line)
    (box / "corrupt.ckpt").write_bytes(b"not a checkpoint")
    return box


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad_input")
    box = make_sandbox(root)
    cases = [{"id": i, "script": s, "argv": a, "cwd": str(box)} for i, s, a, _ in CASES]
    (root / "cases.json").write_text(json.dumps(cases))
    cmd = [sys.executable, str(ROOT / "tests/bad_input_runner.py")]
    subprocess.run([*cmd, str(root / "cases.json"), str(root / "results.json")], check=True)
    return json.loads((root / "results.json").read_text())


def test_the_table_is_large_enough():
    assert len(CASES) >= 30 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case_id, script, argv, want", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_exit_2(results, case_id, script, argv, want):
    r = results[case_id]
    err = r["stderr"].strip()
    assert r["code"] == 2, f"{script} {argv}: exit {r['code']}: {err[-800:]}"
    assert "\n" not in err and "Traceback" not in err, err[-800:]
    assert want in err, err
    assert r["touched"] == [], f"{script} {argv} changed {r['touched']}"
    assert r["seconds"] < 10.0, f"{script} {argv} took {r['seconds']:.1f} s"
