"""Drive maps with the scripted pure-pursuit driver and print race times.

    python scripts/drive.py                      # every built-in map
    python scripts/drive.py --maps starter procedural:7 my_track.csv --speed-share 0.9
    python scripts/drive.py --maps starter --frames 120x160 --save-frames outputs/frames
    python scripts/drive.py --maps circuits/*.csv --json docs/results/circuits/drive.json

Race times are printed with their ratio to each map's reference time (the simulated car's
physical limit on a minimum-curvature line). For an imported line, `fit m` is the farthest
its raw points lie from the smoothed line the track was built on.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from trackmind.cli import OneLineParser
from trackmind.sim.driver import PurePursuitDriver, drive_races
from trackmind.sim.game import SimGame
from trackmind.sim.mapio import load_map
from trackmind.sim.maps import builtin_names
from trackmind.sim.reference import reference_time_ms
from trackmind.sim.track import MapError


def parse_frames(text: str | None) -> tuple[int, int] | None:
    if text is None or text == "none":
        return None
    try:
        h, w = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must look like 120x160, got {text!r}") from None
    if not (8 <= h <= 1024 and 8 <= w <= 1024):
        raise argparse.ArgumentTypeError(f"sides must be in 8..1024, got {text!r}")
    return h, w


def frames_arg(text: str) -> str:
    """--frames as argparse checks it: a size such as 120x160, or none."""
    parse_frames(text)
    return text


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--maps", nargs="+", default=builtin_names(), help="map names or files")
    ap.add_argument("--speed-share", type=float, default=0.8, help="share of the limit speed")
    ap.add_argument(
        "--frames", type=frames_arg, default=None, help="render frames of this size, e.g. 120x160"
    )
    ap.add_argument("--save-frames", default=None, help="folder for a PNG strip per map")
    ap.add_argument("--json", default=None, help="also write the table to this JSON file")
    args = ap.parse_args(argv)
    if not 0.1 <= args.speed_share <= 2.0:
        print(f"error: --speed-share must be in [0.1, 2], got {args.speed_share}", file=sys.stderr)
        return 2
    try:
        tracks = [load_map(m) for m in args.maps]
    except MapError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    frames = parse_frames(args.frames or ("120x160" if args.save_frames else None))
    game = SimGame(len(tracks), maps=tracks, frame_shape=frames)
    driver = PurePursuitDriver(tracks, speed_share=args.speed_share)
    t0 = time.perf_counter()
    results = drive_races(game, driver)
    wall = time.perf_counter() - t0
    rows = [race_row(track, res) for track, res in zip(tracks, results)]
    print(
        f"{'map':<16}{'length m':>10}{'fit m':>8}{'bridge':>8}{'finished':>10}{'time s':>10}"
        f"{'ref s':>10}{'ratio':>8}"
    )
    for r in rows:
        fit = "-" if r["fit_m"] is None else f"{r['fit_m']:.2f}"
        print(
            f"{r['map']:<16}{r['length_m']:>10.0f}{fit:>8}{str(r['bridge']):>8}"
            f"{str(r['finished']):>10}{r['time_s']:>10.2f}{r['reference_s']:>10.2f}"
            f"{r['ratio']:>8.3f}"
        )
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(
            json.dumps({"speed_share": args.speed_share, "maps": rows}, indent=1)
        )
    race_s = sum(r["race_time_ms"] for r in results) / 1000
    print(f"simulated {race_s:.0f} s of racing in {wall:.1f} s of wall time")
    if args.save_frames:
        save_strips(tracks, frames, Path(args.save_frames))
    return 0


def race_row(track, result: dict) -> dict:
    """One map's line of the table: its geometry, the race and its ratio to the reference."""
    ref = reference_time_ms(track)
    return {
        "map": track.name,
        "length_m": round(track.length_m, 1),
        "fit_m": None
        if track.smoothing_deviation_m is None
        else round(track.smoothing_deviation_m, 3),
        "bridge": bool(track.crossings),
        "finished": bool(result["finished"]),
        "time_s": result["race_time_ms"] / 1000,
        "reference_s": ref / 1000,
        "ratio": round(result["race_time_ms"] / ref, 4),
    }


def save_strips(tracks, frames, folder: Path) -> None:
    """One PNG per map: frames every second of a scripted race."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    for track in tracks:
        game = SimGame(1, maps=[track], frame_shape=frames)
        driver = PurePursuitDriver([track])
        obs = game.reset()
        shots = []
        for k in range(400):
            obs = game.step(driver.act(obs.car))
            if k % 20 == 0:
                shots.append(obs.frames[0, 0])
            if obs.car.finished[0] or len(shots) == 8:
                break
        strip = np.concatenate(shots, axis=1)
        path = folder / f"{track.name.replace(':', '_')}.png"
        Image.fromarray(strip).save(path)
        print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
