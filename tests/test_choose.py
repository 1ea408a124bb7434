"""choose_checkpoint: a run's snapshots raced on held-out maps, ranked as validation ranks."""

from __future__ import annotations

import json

import pytest
import torch
from specs import smoke_plan

from trackmind.commands.choose import averaged, candidates, main


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run folder as validation.snapshots leaves it: two snapshots, validated.pt, agent.pt."""
    plan = smoke_plan()
    out = tmp_path_factory.mktemp("run")
    (out / "validation").mkdir()
    torch.manual_seed(0)
    for step in (8, 40):
        weights = plan.new_network().state_dict()
        record = {"step": step, "minute": step / 8, "maps": [{"map": "x", "progress": 0.5}]}
        saved = {"network": weights, "config": plan.cfg, "validation": record}
        torch.save(saved, out / "validation" / f"step_{step:08d}.pt")
    torch.save(saved, out / "validated.pt")
    torch.save({"network": weights, "config": plan.cfg}, out / "agent.pt")
    return out


def test_candidates_are_snapshots_in_step_order_then_the_named_checkpoints(run_dir, tmp_path):
    names = [p.name for p in candidates(run_dir)]
    assert names == ["step_00000008.pt", "step_00000040.pt", "validated.pt", "agent.pt"]
    with pytest.raises(ValueError, match="no checkpoints"):
        candidates(tmp_path)
    with pytest.raises(ValueError, match="not a run folder"):
        candidates(tmp_path / "missing")


def test_every_candidate_races_the_maps_and_one_is_chosen(run_dir, tmp_path, capsys):
    out, kept = tmp_path / "ranks.json", tmp_path / "pick.pt"
    assert (
        main([str(run_dir), "--maps", "procedural:7-8", "--json", str(out), "--keep", str(kept)])
        == 0
    )
    rows = json.loads(out.read_text())["rows"]
    assert [r["checkpoint"] for r in rows] == [
        "step_00000008.pt",
        "step_00000040.pt",
        "validated.pt",
        "agent.pt",
    ]
    assert [r["step"] for r in rows] == [8, 40, 40, None]
    assert all(list(r["maps"]) == ["procedural:7", "procedural:8"] for r in rows)
    # the same weights race the same: the last snapshot, validated.pt and agent.pt agree
    assert rows[1]["maps"] == rows[2]["maps"] == rows[3]["maps"]
    assert rows[1]["progress"] == rows[3]["progress"]
    assert sum(r["chosen"] for r in rows) == 1
    chosen = next(r for r in rows if r["chosen"])
    # ties go to the earlier weights: the later copies of step 40 are never chosen over it
    assert chosen["checkpoint"] in ("step_00000008.pt", "step_00000040.pt")
    pick = torch.load(kept, weights_only=True)
    assert pick["validation"]["step"] == chosen["step"]
    assert "| step_00000008.pt | 8 |" in capsys.readouterr().out


def test_training_maps_and_bad_maps_are_one_line(run_dir, capsys):
    assert main([str(run_dir), "--maps", "starter"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --maps: starter is a training map of this run"
    )
    assert main([str(run_dir), "--maps", "no_such_map"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --maps: no_such_map:") and "\n" not in err


def test_a_run_on_the_real_game_is_refused_in_one_line(run_dir, tmp_path, capsys):
    ckpt = torch.load(run_dir / "agent.pt", weights_only=False)
    ckpt["config"] = {**ckpt["config"], "env": {**ckpt["config"]["env"], "backend": "tminterface"}}
    torch.save(ckpt, tmp_path / "agent.pt")
    assert main([str(tmp_path), "--maps", "procedural:7"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("trained on env.backend=tminterface; this races the sim")


def test_averages_of_consecutive_snapshots_race_and_can_be_kept(run_dir, tmp_path):
    out, kept = tmp_path / "ranks.json", tmp_path / "avg.pt"
    argv = [str(run_dir), "--maps", "procedural:7", "--average", "2", "--json", str(out)]
    assert main([*argv, "--keep", str(kept)]) == 0
    rows = json.loads(out.read_text())["rows"]
    names = [r["checkpoint"] for r in rows]
    assert names == [
        "step_00000008.pt",
        "step_00000040.pt",
        "avg2:step_00000040.pt",
        "validated.pt",
        "agent.pt",
    ]
    assert rows[2]["step"] == 40  # the last snapshot's record
    pick = torch.load(kept, weights_only=True)
    chosen = next(r for r in rows if r["chosen"])
    assert ("averaged" in pick) == chosen["checkpoint"].startswith("avg2:")


def test_an_average_is_the_mean_of_its_window_with_the_last_record(run_dir):
    snaps = [
        (p.name, torch.load(p, weights_only=True))
        for p in sorted((run_dir / "validation").glob("step_*.pt"))
    ]
    ((name, ckpt),) = averaged(snaps, 2)
    assert name == "avg2:step_00000040.pt"
    # the last snapshot's step and minute, not its races (other weights drove them)
    assert ckpt["validation"] == {"step": 40, "minute": 5.0}
    assert ckpt["config"] == snaps[1][1]["config"]
    assert ckpt["averaged"] == ["step_00000008.pt", "step_00000040.pt"]
    for key, value in ckpt["network"].items():
        a, b = snaps[0][1]["network"][key], snaps[1][1]["network"][key]
        expected = (a.double() + b.double()) / 2 if a.is_floating_point() else a
        assert torch.equal(value, expected.to(a.dtype)), key
    assert [n for n, _ in averaged(snaps, 1)] == ["avg1:step_00000008.pt", "avg1:step_00000040.pt"]


def test_an_average_of_more_snapshots_than_kept_is_one_line(run_dir, capsys):
    assert main([str(run_dir), "--maps", "procedural:7", "--average", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: --average 3: {run_dir} keeps 2 snapshots"
    assert main([str(run_dir), "--maps", "procedural:7", "--average", "0"]) == 2
    assert "must be at least 1" in capsys.readouterr().err


def test_mirror_races_every_candidate_on_the_mirror_averaged_q(run_dir, tmp_path):
    out = tmp_path / "ranks.json"
    assert main([str(run_dir), "--maps", "procedural:7", "--mirror", "--json", str(out)]) == 0
    ranks = json.loads(out.read_text())
    assert ranks["mirror"] is True and len(ranks["rows"]) == 4
    # the same weights race the same with the mirror too
    assert ranks["rows"][1]["maps"] == ranks["rows"][3]["maps"]
