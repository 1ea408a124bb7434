"""The collectors' policy: greedy (evaluation) races keep the weights they started with.

Midpoint taus by hand, FrozenGreedy's binding and reuse of frozen copies, and a real batch
of sim races whose live weights change every few actions: each greedy race is repeated
action for action by a one-car race with the single weights version it recorded.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir

from trackmind.agent.acting import BatchedPolicy, FrozenGreedy
from trackmind.agent.inference import greedy_q, make_inference_network
from trackmind.agent.network import midpoint_taus
from trackmind.collectors.parts import build_collector_parts, make_policy
from trackmind.env.observations import FLOATS
from trackmind.env.rollout import GameInstanceManager
from trackmind.evaluation import evaluate
from trackmind.training.factory import RunPlan, plan_run

ROOT = Path(__file__).resolve().parents[1]


def _plan(*overrides: str) -> RunPlan:
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        cfg = compose("train", overrides=["debug=smoke", "network=iqn_floats", *overrides])
    return plan_run(cfg)


def _weights(net: torch.nn.Module, seed: int) -> dict:
    """A different random set of weights for the same network (a new 'version')."""
    torch.manual_seed(seed)
    out = {}
    for k, v in net.state_dict().items():
        out[k] = torch.randn_like(v) * 0.3 if v.is_floating_point() and v.dim() > 1 else v
    return out


def test_midpoint_taus_by_hand():
    t = midpoint_taus(2, 4)
    assert t.shape == (2, 4)
    assert torch.equal(t[0], torch.tensor([0.125, 0.375, 0.625, 0.875]))
    assert torch.equal(t[0], t[1])


def test_cvar_taus_cover_the_lowest_share_by_hand():
    t = midpoint_taus(1, 4, cvar=0.5)  # the midpoints of [0, 0.5] in 4 strata
    assert torch.equal(t[0], torch.tensor([0.0625, 0.1875, 0.3125, 0.4375]))
    with pytest.raises(ValueError, match="cvar"):
        midpoint_taus(1, 4, cvar=0.0)


def test_cvar_q_is_the_mean_of_the_lowest_quantiles():
    plan = _plan()
    race, _, net = build_collector_parts(plan.collectors, n_cars=3)
    obs, _ = race.reset()
    floats = torch.from_numpy(obs[FLOATS])
    q = greedy_q(net, None, floats, 8, midpoint=True, cvar=0.25)
    with torch.inference_mode():
        z = net(None, floats, midpoint_taus(3, 8, cvar=0.25))  # (B, 8, A)
        neutral = greedy_q(net, None, floats, 8, midpoint=True)
    assert torch.allclose(q, z.mean(dim=1))
    assert not torch.allclose(q, neutral)
    race.close()


def test_midpoint_q_is_the_mean_over_midpoint_quantiles():
    plan = _plan()
    race, _, net = build_collector_parts(plan.collectors, n_cars=3)
    obs, _ = race.reset()
    floats = torch.from_numpy(obs[FLOATS])
    q1 = greedy_q(net, None, floats, 8, midpoint=True)
    q2 = greedy_q(net, None, floats, 8, midpoint=True)
    assert torch.equal(q1, q2)  # the same every call: no random taus
    with torch.inference_mode():
        by_hand = net(None, floats, midpoint_taus(3, 8)).mean(dim=1)
    assert torch.allclose(q1, by_hand)
    race.close()


def test_collectors_policy_takes_greedy_cvar_from_the_config():
    """make_policy (local collectors and Ray workers): greedy cars act on the
    CVaR of the config, exploration cars on the mean."""
    plan = _plan("network.greedy_cvar=0.25")
    race, _, net = build_collector_parts(plan.collectors, n_cars=2)
    live = make_inference_network(net, "none")
    acting = make_policy(plan.collectors, live, 2, 0, lambda: 0)
    assert acting.frozen.cvar == 0.25
    obs, _ = race.reset()
    greedy = np.array([True, False])
    _, q, _ = acting.act(obs, greedy, np.ones(2, bool), version=0)
    floats = torch.from_numpy(obs[FLOATS])
    cvar_q = greedy_q(net, None, floats[:1], 32, midpoint=True, cvar=0.25).numpy()
    np.testing.assert_allclose(q[:1], cvar_q, rtol=1e-6)
    assert make_policy(_plan().collectors, live, 2, 0, lambda: 0).frozen.cvar == 1.0
    race.close()


def test_exploring_cars_act_on_the_policys_cvar():
    """network.policy_cvar: exploring cars' values average random taus in [0, cvar], from the
    policy's seeded generator; the greedy races keep greedy_cvar (here the mean)."""
    plan = _plan("network.policy_cvar=0.25")
    race, _, net = build_collector_parts(plan.collectors, n_cars=2)
    live = make_inference_network(net, "none")
    acting = make_policy(plan.collectors, live, 2, 7, lambda: 0)
    assert acting.explore_cvar == 0.25 and acting.frozen.cvar == 1.0
    obs, _ = race.reset()
    _, q, _ = acting.act(obs, np.zeros(2, bool), np.ones(2, bool), version=0)
    floats = torch.from_numpy(obs[FLOATS])
    gen = torch.Generator().manual_seed(7)
    with torch.inference_mode():
        want = net(None, floats, 0.25 * torch.rand((2, 32), generator=gen)).mean(dim=1)
    np.testing.assert_allclose(q, want.numpy(), rtol=1e-5, atol=1e-6)
    assert make_policy(_plan().collectors, live, 2, 0, lambda: 0).explore_cvar == 1.0
    race.close()


def test_frozen_greedy_binds_releases_and_reuses_copies():
    plan = _plan()
    race, _, net = build_collector_parts(plan.collectors, n_cars=3)
    obs, _ = race.reset()
    floats = torch.from_numpy(obs[FLOATS])
    w1, w2 = _weights(net, 1), _weights(net, 2)
    live = make_inference_network(net, "none")
    live.load_state_dict(w1)
    frozen = FrozenGreedy(live, 8, 3)
    greedy = np.array([True, False, True])
    frozen.update(greedy, np.ones(3, bool), version=1)
    assert frozen.bound.tolist() == [1, -1, 1] and list(frozen.nets) == [1]

    live.load_state_dict(w2)  # the collector refreshes mid-race: version 2 is live
    frozen.update(greedy, np.zeros(3, bool), version=2)
    assert frozen.bound.tolist() == [1, -1, 1]  # the running greedy races keep version 1
    q = np.full((3, 12), np.nan, np.float32)
    frozen.fill(q, None, floats)
    ref = make_inference_network(_fresh(plan, w1), "none")
    expected = greedy_q(ref, None, floats[[0, 2]], 8, midpoint=True).numpy()
    np.testing.assert_array_equal(q[[0, 2]], expected)
    assert np.isnan(q[1]).all()  # exploration cars are not its business

    frozen.update(greedy, np.array([False, False, True]), version=2)  # car 2: a new race
    assert frozen.bound.tolist() == [1, -1, 2] and sorted(frozen.nets) == [1, 2]
    old = frozen.nets[1]
    frozen.update(np.array([False, False, True]), np.array([True, False, False]), version=2)
    assert frozen.bound.tolist() == [-1, -1, 2] and list(frozen.nets) == [2]
    live.load_state_dict(w1)
    frozen.update(np.array([True, False, True]), np.array([True, False, False]), version=3)
    assert frozen.nets[3] is old  # the released copy is reused, not rebuilt
    race.close()


def test_frozen_greedy_holds_at_most_max_versions_then_binds_to_the_newest():
    plan = _plan()
    race, _, net = build_collector_parts(plan.collectors, n_cars=4)
    obs, _ = race.reset()
    floats = torch.from_numpy(obs[FLOATS])
    w = {v: _weights(net, v) for v in (1, 2, 3, 4)}
    live = make_inference_network(net, "none")
    frozen = FrozenGreedy(live, 8, 4, max_versions=2)
    greedy, one = np.ones(4, bool), np.eye(4, dtype=bool)
    for car, v in ((0, 1), (1, 2), (2, 3)):  # each car starts a greedy race at a new version
        live.load_state_dict(w[v])
        frozen.update(greedy & one[: car + 1].any(0), one[car], version=v)
    # version 3 found two copies in use: car 2 races on the newest, version 2
    assert frozen.bound.tolist() == [1, 2, 2, -1] and sorted(frozen.nets) == [1, 2]
    q = np.full((4, 12), np.nan, np.float32)
    frozen.fill(q, None, floats)
    ref = make_inference_network(_fresh(plan, w[2]), "none")
    expected = greedy_q(ref, None, floats[[1, 2]], 8, midpoint=True).numpy()
    np.testing.assert_array_equal(q[[1, 2]], expected)  # version 2's weights, not live's

    live.load_state_dict(w[4])  # car 0's race ends and car 3 starts one: version 1 is freed
    frozen.update(np.array([False, True, True, True]), one[3], version=4)
    assert frozen.bound.tolist() == [-1, 2, 2, 4] and sorted(frozen.nets) == [2, 4]
    assert len(frozen._spare) == 0  # version 1's copy became version 4's
    with pytest.raises(ValueError, match="max_versions"):
        FrozenGreedy(live, 8, 4, max_versions=0)
    race.close()


def _fresh(plan: RunPlan, weights: dict) -> torch.nn.Module:
    _, _, net = build_collector_parts(plan.collectors, n_cars=1)
    net.load_state_dict(weights)
    return net.eval()


def test_greedy_races_repeat_exactly_with_their_recorded_version():
    """Live weights change every 3 actions; every greedy race is still one version's race."""
    plan = _plan("map.cycle=[{map: starter, exploration: 1, greedy: 1}]")
    race, cycle, net = build_collector_parts(plan.collectors, n_cars=4)
    versions = {v: _weights(net, v) for v in range(60)}
    live = make_inference_network(net, "none")
    live.load_state_dict(versions[0])
    k = plan.network.n_quantiles_inference
    acting = BatchedPolicy(live, plan.collectors.exploration, k, 4, 0, lambda: 0)
    gim = GameInstanceManager(race, cycle)
    state = {"version": 0, "steps": 0}

    def policy(obs, greedy):
        state["steps"] += 1
        if state["steps"] % 3 == 0 and state["version"] + 1 in versions:
            state["version"] += 1
            live.load_state_dict(versions[state["version"]])
        return acting.act(obs, greedy, gim.started, state["version"])

    greedy_races = []
    for r in gim.races(policy):
        r["weights_version"] = acting.race_version(r["car"], state["version"])
        if r["greedy"]:
            greedy_races.append(r)
        if len(greedy_races) == 2:
            break
    race.close()

    one, one_cycle, one_net = build_collector_parts(plan.collectors, n_cars=1)
    evaluator = GameInstanceManager(one, one_cycle)
    entry = one_cycle.entries[0]
    for r in greedy_races:
        assert len(r["actions"]) > 10  # long enough that live weights changed during it

        def frozen_policy(obs, greedy, v=r["weights_version"]):
            one_net.load_state_dict(versions[v])
            q = greedy_q(one_net, None, torch.from_numpy(obs[FLOATS]), k, midpoint=True)
            q = q.numpy()
            return q.argmax(axis=1), q, np.ones(1, bool)

        again = evaluator.rollout(frozen_policy, entry, greedy=True)
        assert again["actions"] == r["actions"]
        assert again["race_time_ms"] == r["race_time_ms"]
        mixed = r["weights_version"] + 5  # a version that was live later during the race
        other = evaluator.rollout(
            lambda obs, g, v=mixed: frozen_policy(obs, g, v), entry, greedy=True
        )
        assert other["actions"] != r["actions"]  # the weights matter: the check has teeth
        # evaluate.py, given that version as a checkpoint, drives the same race
        row = evaluate(
            {"network": versions[r["weights_version"]], "config": plan.cfg}, ["starter"], 1
        )
        driven = max(r["meters_advanced_along_centerline"]) / entry.track.length_m
        assert row[0]["progress"] == min(1.0, driven)
        assert row[0]["end"] == r["end"]
    one.close()


def test_frozen_copies_run_as_the_live_network_but_never_recompile():
    from trackmind.agent.inference import InferenceNetwork

    plan = _plan()
    _, _, net = build_collector_parts(plan.collectors, n_cars=1)
    for live_mode, copy_mode in (("none", "none"), ("script", "script"), ("compile", "script")):
        live = InferenceNetwork(net, net, live_mode)  # the label is what the copies follow
        frozen = FrozenGreedy(live, 8, 1)
        frozen.update(np.ones(1, bool), np.ones(1, bool), version=7)
        assert frozen.nets[7].mode == copy_mode
        assert frozen.nets[7].net is not net


def _untrained_agent(tmp_path: Path) -> Path:
    """An agent.pt of freshly drawn weights and the test plan's config, for the scripts that
    read a checkpoint."""
    plan = _plan()
    _, _, net = build_collector_parts(plan.collectors, n_cars=1)
    agent = tmp_path / "agent.pt"
    torch.save({"network": net.state_dict(), "config": plan.cfg}, agent)
    return agent


def _notes_table_of(script, tmp_path: Path, map_name: str) -> dict:
    """The table a notes-table script (wall_contacts, lap_sections) writes for an untrained
    agent on one map, after checking that it exited 0 and named its own command line."""
    import json

    agent = _untrained_agent(tmp_path)
    notes = tmp_path / "notes.json"
    args = [str(agent), "--map", map_name, "--labels", "untrained", "--json", str(notes)]
    assert script.main(args) == 0
    table = json.loads(notes.read_text())
    name = Path(script.__file__).stem
    assert table["source"] == f"python scripts/{name}.py " + " ".join(args)
    return table


def test_evaluate_races_every_loadable_map_and_names_the_others(tmp_path, capsys):
    """scripts/evaluate.py: bad maps do not stop the good ones; one line each, exit 2."""
    import evaluate as script

    agent = _untrained_agent(tmp_path)
    bad_csv = tmp_path / "bad.csv"
    bad_csv.write_text("0,0,4,4\n1,0\n")
    code = script.main(
        [str(agent), "--maps", "nowhere.csv", "starter", str(bad_csv), "procedural:x"]
    )
    out, err = capsys.readouterr()
    assert code == 2
    assert len([x for x in out.splitlines() if x.startswith("| starter |")]) == 1
    lines = err.strip().splitlines()
    assert lines == [
        "error: map nowhere.csv: nowhere.csv: map file not found",
        f"error: map {bad_csv}: {bad_csv}: line 2: expected 4 or 5 columns "
        "x,y,width_right,width_left[,height], got 2",
        "error: map procedural:x: procedural:x: procedural seed must be an integer",
    ]


def test_evaluate_mirror_races_on_the_mirror_averaged_q(tmp_path, capsys):
    """scripts/evaluate.py --mirror: a race on the mean Q of each observation and its mirror
    image (the values themselves: tests/test_mirror.py)."""
    import evaluate as script

    agent = _untrained_agent(tmp_path)
    assert script.main([str(agent), "--maps", "starter", "--mirror"]) == 0
    out, _ = capsys.readouterr()
    assert len([x for x in out.splitlines() if x.startswith("| starter |")]) == 1


def test_ensemble_q_by_hand():
    from trackmind.evaluation import ensemble_q

    a = np.array([[1.0, 4.0], [0.0, -2.0]])
    b = np.array([[3.0, 0.0], [2.0, 2.0]])
    assert ensemble_q([a, b]).tolist() == [[2.0, 2.0], [1.0, 0.0]]
    assert ensemble_q([a]).tolist() == a.tolist()


def test_evaluate_races_several_checkpoints_as_one_ensemble(tmp_path, capsys, monkeypatch):
    """scripts/evaluate.py A B: races on the mean Q of both networks; A twice races as A
    alone; a checkpoint of another network config is one line naming it, exit 2."""
    import copy
    import json

    import evaluate as script

    import trackmind.evaluation as evaluation

    plan = _plan()
    _, _, net = build_collector_parts(plan.collectors, n_cars=1)
    paths = []
    for seed in (1, 2):
        path = tmp_path / f"v{seed}.pt"
        torch.save({"network": _weights(net, seed), "config": plan.cfg}, path)
        paths.append(str(path))
    members = []
    real = evaluation.ensemble_q

    def spy(qs):
        members.append([q.copy() for q in qs])
        return real(qs)

    monkeypatch.setattr(evaluation, "ensemble_q", spy)
    results = {}
    for name, argv in (("a", paths[:1]), ("aa", [paths[0]] * 2), ("ab", paths)):
        members.clear()
        out = tmp_path / f"{name}.json"
        assert script.main([*argv, "--maps", "starter", "--json", str(out)]) == 0
        results[name] = (json.loads(out.read_text()), [len(m) for m in members], members[0])
    assert results["a"][1] == [1] * len(results["a"][1])
    assert results["aa"][0]["maps"] == results["a"][0]["maps"]  # the same policy
    assert set(results["ab"][1]) == {2}  # every action of the race: both networks' Q
    q_a, q_b = results["ab"][2]
    assert np.array_equal(q_a, results["a"][2][0]) and not np.allclose(q_a, q_b)
    assert results["ab"][0]["checkpoint"] == " ".join(paths)
    # an ensemble.pt (what a run with validation.average writes) races as its members do
    both = [torch.load(p, weights_only=True)["network"] for p in paths]
    kept = tmp_path / "ensemble.pt"
    torch.save({"network": both[1], "members": both, "config": plan.cfg}, kept)
    out = tmp_path / "kept.json"
    assert script.main([str(kept), "--maps", "starter", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["maps"] == results["ab"][0]["maps"]
    torch.save({"network": both[1], "members": both[0], "config": plan.cfg}, kept)
    capsys.readouterr()
    assert script.main([str(kept), "--maps", "starter"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {kept}: not a trackmind checkpoint (members is not a list of weights)"
    )

    other = copy.deepcopy(plan.cfg)
    other["network"]["n_quantiles_inference"] += 1
    odd = tmp_path / "odd.pt"
    torch.save({"network": _weights(net, 3), "config": other}, odd)
    assert script.main([paths[0], str(odd), "--maps", "starter"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"error: {odd}: its network config differs from {paths[0]}'s; an ensemble's "
        "checkpoints must see the same observations through the same network"
    ]


def test_held_floats_by_hand():
    from trackmind.evaluation import held_floats

    floats = np.arange(8, dtype=np.float32).reshape(2, 4)
    out = held_floats(floats, [(slice(1, 3), 7.0), (slice(3, 4), -1.0)])
    assert out.tolist() == [[0, 7, 7, -1], [4, 7, 7, -1]]
    assert floats.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]  # a copy: the race's own untouched


def test_evaluate_hold_feeds_the_policy_the_held_value(tmp_path, capsys, monkeypatch):
    """scripts/evaluate.py --hold TERM=VALUE: every observation the policy acts on carries
    VALUE in that term's columns; an unknown term is one line naming the ones there are."""
    import evaluate as script

    import trackmind.evaluation as evaluation

    seen = []
    real_q = evaluation.observation_q

    def spy(net, obs, *args):
        seen.append(obs[FLOATS].copy())
        return real_q(net, obs, *args)

    monkeypatch.setattr(evaluation, "observation_q", spy)
    agent = _untrained_agent(tmp_path)
    assert script.main([str(agent), "--maps", "starter", "--hold", "distance_to_finish=12.5"]) == 0
    out, _ = capsys.readouterr()
    assert len([x for x in out.splitlines() if x.startswith("| starter |")]) == 1
    plan = _plan()
    race, _, _ = build_collector_parts(plan.collectors, n_cars=1)
    column = race.observation.term(FLOATS).layout()["distance_to_finish"]
    race.close()
    assert len(seen) > 10
    assert all(np.all(f[:, column] == 12.5) for f in seen)
    assert not np.all(seen[0][:, column.stop :] == 12.5)  # the other columns as raced

    assert script.main([str(agent), "--maps", "starter", "--hold", "speed=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --hold speed: not a float term")
    assert "distance_to_finish" in err[0]
    with pytest.raises(SystemExit):
        script.main([str(agent), "--hold", "distance_to_finish"])
    assert "must be NAME=NUMBER" in capsys.readouterr().err


def test_value_audit_compares_q_with_true_mini_race_returns(tmp_path, capsys):
    """scripts/value_audit.py: one row per audited state, returns of every alternative."""
    import value_audit as script

    agent = _untrained_agent(tmp_path)
    code = script.main(
        [
            str(agent),
            "--map",
            "starter",
            "--from-m",
            "0",
            "--to-m",
            "50",
            "--every",
            "40",
            "--brake",
            "4",
        ]
    )
    out, _ = capsys.readouterr()
    assert code == 0
    rows = [x for x in out.splitlines() if x.startswith("| ") and x[2].isdigit()]
    assert rows, out
    for row in rows:  # progress, speed, Q + Phi, greedy (end), brake 4 (end)
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == 5
        # the race's time penalty alone over a 140-action mini-race is -8.4: returns are
        # finite and of that order
        for cell in cells[3:]:
            assert -20.0 < float(cell.split()[0]) < 5.0
    assert "network Q minus the greedy return" in out
    assert script.main([str(tmp_path / "none.pt"), "--map", "starter"]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_target_argmax_tables_each_draw_against_the_greedy_action(tmp_path, capsys):
    """scripts/target_argmax.py: one row per count and draw, shares between 0 and 100%."""
    import target_argmax as script

    agent = _untrained_agent(tmp_path)
    argv = [str(agent), "--map", "starter", "--counts", "2", "4", "--repeats", "2"]
    assert script.main([*argv, "--max-actions", "20"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("20 states of one greedy race on starter")
    rows = [r.strip("|").split("|") for r in out.splitlines() if r.startswith("| ") and "%" in r]
    assert [(r[0].strip(), int(r[1])) for r in rows] == [
        ("random", 2),
        ("stratified", 2),
        ("random", 4),
        ("stratified", 4),
    ]
    for r in rows:
        assert 0.0 <= float(r[2].strip().rstrip("%")) <= 100.0 and float(r[3]) >= 0.0


def test_the_target_network_takes_its_own_quantile_count():
    from trackmind.training.run import build_learner

    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        cfg = compose("train", overrides=["debug=smoke", "network=iqn_floats"])
    cfg.network.n_quantiles_target = 4
    learner = build_learner(plan_run(cfg), None)
    assert (learner.module.n_train, learner.module.n_target) == (8, 4)


def test_wall_contacts_drives_a_checkpoint_and_writes_its_notes_table(tmp_path, capsys):
    """scripts/wall_contacts.py: one greedy race per checkpoint, a row each, in the table."""
    import wall_contacts as script

    table = _notes_table_of(script, tmp_path, "starter")
    (row,) = table["rows"]
    assert len(row) == len(table["columns"]) == 4
    assert row[0] == "untrained"
    assert row[1].startswith(("finished in", "ended at"))
    assert isinstance(row[2], int) and row[2] >= 0  # steps touching a wall
    assert capsys.readouterr().out.startswith("untrained | ")
