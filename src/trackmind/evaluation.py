"""Greedy races of a trained agent on any map: race time, ratio to reference, finish rate.

The library behind scripts/evaluate.py (and scripts/value_audit.py): read a checkpoint
(agent.pt, best.pt or a training .ckpt) into its network weights and training config, and
race those weights greedily, one car per map, on built-in, procedural or imported maps,
including maps the agent never saw. Greedy actions use the quantile midpoints as taus, as
training's greedy races do, so in the sim a race depends on the weights alone.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from trackmind.agent.inference import observation_q
from trackmind.agent.network_config import build_network, network_config
from trackmind.env.build import build_managers, make_race
from trackmind.env.map_cycle import loadable_cycle
from trackmind.env.map_prices import price_walls_by_map, priced_as_recorded
from trackmind.env.observations import FLOATS
from trackmind.env.rollout import GameInstanceManager
from trackmind.game.actions import ACTION_NAMES
from trackmind.sim.reference import reference_time_ms
from trackmind.training.factory import recorded_config


def load_checkpoint(path: str) -> dict:
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{path}: checkpoint not found")
    try:  # plain tensors and containers only: a checkpoint cannot run code when loaded
        ckpt = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as e:  # any unreadable file is the same error to the user
        raise ValueError(f"{path}: not a trackmind checkpoint ({type(e).__name__})") from None
    if isinstance(ckpt, dict) and isinstance(ckpt.get("trackmind"), dict):  # a training .ckpt
        state = ckpt["state_dict"]  # the weights greedy races ran: the acting average if any
        prefix = "acting_network." if any(k.startswith("acting_") for k in state) else "online_"
        prefix = "online_network." if prefix == "online_" else prefix
        net = {k[len(prefix) :]: v for k, v in ckpt["state_dict"].items() if k.startswith(prefix)}
        ckpt = {"network": net, "config": ckpt["trackmind"]["config"]}
    if not isinstance(ckpt, dict) or "network" not in ckpt or "config" not in ckpt:
        raise ValueError(f"{path}: not a trackmind checkpoint (no network/config)")
    members = ensemble_members(ckpt)
    if (
        not isinstance(members, list)
        or not members
        or not all(isinstance(m, dict) for m in members)
    ):
        raise ValueError(f"{path}: not a trackmind checkpoint (members is not a list of weights)")
    return ckpt


def ensemble_members(ckpt: dict) -> list:
    """The weights a checkpoint races with: an ensemble's members, or its one network."""
    return ckpt.get("members", [ckpt["network"]])


def load_ensemble(paths: list[str]) -> dict:
    """Several checkpoints as one agent that acts on the mean of their Q values: the first
    one's checkpoint, with every checkpoint's weights as `members` (an ensemble.pt's own
    members each). They must share the observations and the network (the env and network
    sections of their configs), as the snapshots of one run or the runs of several seeds
    do; a ValueError names one that does not. Why: one greedy race is one draw of a
    policy's mistakes, and the weight average of snapshots minutes apart is not the average
    of their policies."""
    ckpts = [load_checkpoint(p) for p in paths]
    if len(ckpts) == 1:
        return ckpts[0]
    first = recorded_config(ckpts[0]["config"])
    for path, ckpt in zip(paths[1:], ckpts[1:]):
        cfg = recorded_config(ckpt["config"])
        for section in ("env", "network"):
            if getattr(cfg, section) != getattr(first, section):
                raise ValueError(
                    f"{path}: its {section} config differs from {paths[0]}'s; an ensemble's "
                    "checkpoints must see the same observations through the same network"
                )
    members = [w for ckpt in ckpts for w in ensemble_members(ckpt)]
    return {**ckpts[0], "members": members}


def ensemble_q(qs: list[np.ndarray]) -> np.ndarray:
    """The ensemble's Q values (cars, actions): the mean of its members' Q values."""
    return np.mean(np.stack(qs), axis=0)


def map_entries(names: list[str], conf_dir: Path) -> list[dict]:
    """Cycle entries for --maps: a conf/map option gives its cycle's entries (with their
    challenge files and reference times), any other name is a map of its own."""
    from omegaconf import OmegaConf

    entries = []
    for name in dict.fromkeys(names):
        option = conf_dir / f"{name}.yaml"
        if "/" not in name and ":" not in name and option.is_file():
            cycle = OmegaConf.to_container(OmegaConf.load(option)).get("cycle", [])
            entries += [{"map": e} if isinstance(e, str) else dict(e) for e in cycle]
        else:
            entries.append({"map": name})
    return entries


def evaluate(
    ckpt: dict,
    maps: list[str | dict],
    races: int,
    trace: bool = False,
    plot_dir: str | None = None,
    video: bool = True,
    midpoint: bool = True,
    cvar: float | None = None,
    mirror: bool = False,
    hold: dict[str, float] | None = None,
) -> list[dict]:
    """Greedy races (one car each) on every map; a row of results per map.

    `maps` are map names or cycle entries (`{map, challenge, reference_time_ms}`).
    `cvar` overrides the checkpoint's network.greedy_cvar (the greedy races' risk).
    `mirror` acts on the mean of the Q values of each observation and of its mirror image
    (agent/inference.py's observation_q), a policy that turns left and right alike.
    A checkpoint of load_ensemble's acts on the mean Q of its members.
    `hold` maps float terms to a value the policy sees in their place all race long (an
    ablation: how the weights drive without what that input says; see held_floats).
    With `plot_dir`, the best race of each map is drawn there (trajectory coloured by speed)
    and, with `video`, rendered as a GIF from the sim (driver's view and minimap).
    """

    if cvar is not None and not 0.0 < cvar <= 1.0:
        raise ValueError(f"cvar must be in (0, 1], got {cvar}")
    cfg = recorded_config(ckpt["config"])
    columns = []
    if hold:  # checked from the config, before a game is started for the first map
        columns = held_columns(build_managers(cfg.env, cfg.reward)[0].term(FLOATS), hold)
    cycle, failed = loadable_cycle(maps)
    rows = [{"map": name, "error": problem} for name, problem in failed]
    for entry in cycle.entries if cycle is not None else []:
        race = make_race(
            cfg.env, cfg.reward, n_cars=1, maps=entry.track, challenges=cycle.challenges
        )
        price_walls_by_map(race, priced_as_recorded([entry], cfg.map.get("cycle")))
        try:
            rows.append(
                _evaluate_map(
                    race,
                    cfg,
                    ckpt,
                    cycle,
                    entry,
                    races=races,
                    trace=trace,
                    plot_dir=plot_dir,
                    video=video,
                    midpoint=midpoint,
                    cvar=cvar,
                    mirror=mirror,
                    columns=columns,
                )
            )
        finally:
            race.close()  # a real game is released for the next map or the next program
    return rows


def checkpoint_network(race, cfg, ckpt: dict, weights: dict | None = None):
    """(the checkpoint's network in eval mode, its NetworkConfig), built as it was trained
    for this race's observations, with `weights` (default: the checkpoint's); ValueError
    when the weights are of another architecture."""
    stats = race.observation.term(FLOATS)
    frame_shape = race.frame_shape if race.frame_shape[0] else None
    network = network_config(cfg.network, stats.size, frame_shape)  # as it was trained
    net = build_network(network, stats.size, frame_shape, stats.mean, stats.std)
    try:
        net.load_state_dict(ckpt["network"] if weights is None else weights)
    except RuntimeError as e:  # weights of another architecture than its config
        first = str(e).splitlines()[1].strip() if "\n" in str(e) else str(e)
        raise ValueError(f"checkpoint network does not match its config: {first}") from None
    return net.eval(), network


def held_columns(group, hold: dict[str, float]) -> list[tuple[slice, float]]:
    """(columns, value) of each held float term of the race's float group; a ValueError
    naming a term the group does not have, with the ones it has."""
    layout = group.layout() if hasattr(group, "layout") else {group.name: slice(0, group.size)}
    unknown = [name for name in hold if name not in layout]
    if unknown:
        raise ValueError(
            f"--hold {unknown[0]}: not a float term of this checkpoint's observations "
            f"(they are: {', '.join(layout)})"
        )
    return [(layout[name], float(value)) for name, value in hold.items()]


def held_floats(floats: np.ndarray, columns: list[tuple[slice, float]]) -> np.ndarray:
    """A copy of the (cars, F) floats with each held term's columns set to its value, in the
    units the race gives them (before the network's own normalisation)."""
    out = np.array(floats, copy=True)
    for cols, value in columns:
        out[:, cols] = value
    return out


def checkpoint_race(path: str, map_name: str):
    """(a one-car race on the map, the checkpoint's network, its NetworkConfig, the run's
    recorded config) for the tools that study one checkpoint on one map; a ValueError with
    a one-line message for a checkpoint that does not load, a map that does not load, or
    weights of another architecture than their config."""
    ckpt = load_checkpoint(path)
    cycle, failed = loadable_cycle([map_name])
    if failed:
        raise ValueError(f"map {failed[0][0]}: {failed[0][1]}")
    if len(cycle.entries) > 1:
        raise ValueError(f"map {map_name}: names {len(cycle.entries)} maps, this tool races one")
    cfg = recorded_config(ckpt["config"])
    race = make_race(cfg.env, cfg.reward, n_cars=1, maps=cycle.entries[0].track)
    price_walls_by_map(race, priced_as_recorded(cycle.entries, cfg.map.get("cycle")))
    try:
        net, network = checkpoint_network(race, cfg, ckpt)
    except ValueError:
        race.close()
        raise
    return race, net, network, cfg


def greedy_trace(path: str, map_name: str, max_steps: int = 100_000) -> dict:
    """One greedy race of a checkpoint on one map (quantile midpoints, as training's greedy
    races: in the sim the race depends on the weights alone), step by step: the action taken,
    then the car's progress (m along the centre line), race clock (s), speed (m/s) and wall
    contact after it, and its speed before it; with how the race ended. What the tools that
    ask where a race loses its time or its speed read."""
    race, net, network, _ = checkpoint_race(path, map_name)
    k = network.n_quantiles_inference
    rows: list[tuple[float, float, float, float, bool, int]] = []
    try:
        obs, _ = race.reset()
        car = race.car
        for _ in range(max_steps):
            action = int(observation_q(net, obs, k)[0].argmax())
            before = float(car.speed[0])
            obs, _, terminated, truncated, _ = race.step(np.array([action]))
            car = race.car
            rows.append(
                (
                    float(car.progress_m[0]),
                    float(car.race_time_ms[0]) / 1000.0,
                    float(car.speed[0]),
                    before,
                    bool(car.wall_contact[0]),
                    action,
                )
            )
            if terminated[0] or truncated[0] or car.finished[0]:
                break
        finished = bool(car.finished[0])
    finally:
        race.close()
    cols = list(zip(*rows, strict=True)) if rows else [()] * 6
    return {
        "progress_m": np.asarray(cols[0], dtype=np.float64),
        "time_s": np.asarray(cols[1], dtype=np.float64),
        "speed": np.asarray(cols[2], dtype=np.float64),
        "speed_before": np.asarray(cols[3], dtype=np.float64),
        "wall_contact": np.asarray(cols[4], dtype=bool),
        "action": np.asarray(cols[5], dtype=np.int64),
        "finished": finished,
        "race_time_s": rows[-1][1] if finished else None,
        "end_m": rows[-1][0] if rows else 0.0,
    }


def _evaluate_map(
    race,
    cfg,
    ckpt,
    cycle,
    entry,
    *,
    races,
    trace,
    plot_dir,
    video,
    midpoint,
    cvar=None,
    mirror=False,
    columns=(),
) -> dict:
    """`races` greedy races on one map, with the trace, plot and GIF asked for; its row."""

    built = [checkpoint_network(race, cfg, ckpt, w) for w in ensemble_members(ckpt)]
    nets, network = [net for net, _ in built], built[0][1]
    gen = torch.Generator().manual_seed(0)
    k = network.n_quantiles_inference
    cvar = network.greedy_cvar if cvar is None else float(cvar)
    twin = race.observation.float_mirror(FLOATS) if mirror else None

    def policy(obs, greedy, gen=gen, k=k):
        if columns:
            obs = {**obs, FLOATS: held_floats(obs[FLOATS], columns)}
        q = ensemble_q([observation_q(n, obs, k, gen, midpoint, cvar, twin) for n in nets])
        return q.argmax(axis=1), q, np.ones(len(q), bool)

    gim = GameInstanceManager(race, cycle)
    ref = reference_time_ms(entry.track)
    times, results = [], []
    for _ in range(races):
        r = gim.rollout(policy, entry, greedy=True)
        results.append(r)
        if r["finished"]:
            times.append(r["race_time"])
    if trace and results:
        r = results[-1]
        for t in range(0, len(r["actions"]), max(1, len(r["actions"]) // 40)):
            q = r["q_values"][t]
            print(
                f"  t={t:4d} {r['meters_advanced_along_centerline'][t]:7.1f} m "
                f"{ACTION_NAMES[r['actions'][t]]:>18s}  Q max {q.max():+.3f} "
                f"spread {q.max() - q.min():.3f}"
            )
    best = min(times) if times else None
    if plot_dir is not None:
        from trackmind.tracking.plots import plot_trajectory

        shown = min(results, key=lambda r: r["race_time"] or float("inf"))
        safe = entry.name.replace(":", "_").replace("/", "_")
        print(f"wrote {plot_trajectory(entry.track, shown, Path(plot_dir) / f'{safe}.png')}")
        if video:
            from trackmind.tracking.media import render_race_gif

            gif = Path(plot_dir) / f"{safe}.gif"
            action_ms = race.action_ms
            print(f"wrote {render_race_gif(entry.track, shown, gif, action_ms=action_ms)}")
    progress = max(max(r["meters_advanced_along_centerline"]) for r in results)
    return {
        "map": entry.name,
        "finish_rate": len(times) / races,
        "best_s": best / 1000 if best else None,
        "reference_s": ref / 1000,
        "ratio": best / ref if best else None,
        "progress": min(1.0, progress / entry.track.length_m),
        "end": results[-1]["end"],
    }
