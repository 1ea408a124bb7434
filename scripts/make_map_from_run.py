"""Build a real map's reference line and zone centers from a recorded run, and register it.

    python scripts/make_map_from_run.py run.npy --name a01 \\
        --challenge "Campaigns/Nations/White/A01-Race.Challenge.Gbx" --reference-time 0:23.45
    python scripts/train.py env=tminterface collector=tminterface map=a01

The run is an (N, 3) .npy of game positions (x, y, z; y up) from scripts/record_run.py, or
a CSV with x,y,z columns. Its positions are resampled every 0.5 m into the reference line
(<out-dir>/<name>_0.5m_cl.npy, Linesight's convention), zone centers every 10 m go to
<out-dir>/<name>_zone_centers.npy, the line is checked the way training loads it, and
conf/map/<name>.yaml registers the map: reference line, challenge file (what TMInterface's
`map` command loads) and reference time (author or medal time; race times are reported as
a ratio to it). Exit status 2 with one line on bad input; nothing is written then.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np

from trackmind.cli import OneLineParser

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def load_run(path: Path) -> np.ndarray:
    """The run's positions from .npy or .csv (x,y,z columns, an optional header line)."""
    if not path.is_file():
        raise ValueError(f"{path}: run file not found")
    if path.suffix == ".npy":
        try:
            return np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise ValueError(f"{path}: cannot read .npy ({e})") from None
    if path.suffix == ".csv":
        rows = np.genfromtxt(path, delimiter=",", dtype=np.float64)
        rows = rows.reshape(1, -1) if rows.ndim == 1 else rows
        if rows.size and np.all(np.isnan(rows[0])):
            rows = rows[1:]  # header line
        return rows
    raise ValueError(f"{path}: a run is a .npy or .csv file")


def yaml_text(name: str, line: str, challenge: str, reference_ms: int, source: str) -> str:
    quoted = challenge.replace("'", "''")
    return (
        f"# Real TMNF map {name}, made by scripts/make_map_from_run.py from {source}.\n"
        f"#   python scripts/train.py env=tminterface collector=tminterface map={name}\n"
        "cycle:\n"
        f"  - map: {line}  # reference line: game x, y, z every 0.5 m\n"
        f"    challenge: '{quoted}'  # the file TMInterface's map command loads\n"
        f"    reference_time_ms: {reference_ms}  # author/medal time\n"
        "    exploration: 4\n"
        "    greedy: 1\n"
    )


def make_map(
    run: Path,
    name: str,
    challenge: str,
    reference_ms: int,
    out_dir: Path,
    conf_dir: Path,
    force: bool = False,
) -> dict:
    """Write the line, the zone centers and the map's config; returns their paths."""
    from trackmind.sim.mapio import import_npy
    from trackmind.tmi.reference_line import (
        check_run,
        drop_standstill,
        resample_polyline,
        zone_centers,
    )

    if not NAME.match(name):
        raise ValueError(f"--name {name!r}: use letters, digits, '_', '-' and '.'")
    if not challenge.strip():
        raise ValueError("--challenge: the challenge file name is missing")
    line_path = out_dir / f"{name}_0.5m_cl.npy"
    zones_path = out_dir / f"{name}_zone_centers.npy"
    conf_path = conf_dir / f"{name}.yaml"
    for p in (line_path, zones_path, conf_path):
        if p.exists() and not force:
            raise ValueError(f"{p} exists (use --force to replace it)")
    positions = check_run(load_run(run), str(run))
    line = resample_polyline(drop_standstill(positions))
    zones = zone_centers(line)
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".{name}.check.npy"
    np.save(tmp, line)
    try:
        track = import_npy(tmp, name=name)  # the check training's map loader makes
    finally:
        tmp.unlink()
    conf_dir.mkdir(parents=True, exist_ok=True)
    np.save(line_path, line)
    np.save(zones_path, zones)
    shown = line_path.as_posix()
    if line_path.resolve().is_relative_to(Path.cwd()):
        shown = line_path.resolve().relative_to(Path.cwd()).as_posix()
    conf_path.write_text(yaml_text(name, shown, challenge, reference_ms, run.name))
    return {
        "line": line_path,
        "zones": zones_path,
        "conf": conf_path,
        "length_m": track.length_m,
        "points": len(line),
        "n_zones": len(zones),
    }


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="recorded run (.npy or .csv of x, y, z)")
    ap.add_argument("--name", required=True, help="map name (conf/map/<name>.yaml)")
    ap.add_argument("--challenge", required=True, help="challenge file the game loads")
    ap.add_argument(
        "--reference-time", required=True, help="author/medal time: 0:55.10, 55.10 or 55100 (ms)"
    )
    ap.add_argument("--out-dir", type=Path, default=Path("maps/tmnf"))
    ap.add_argument("--conf-dir", type=Path, default=Path("conf/map"))
    ap.add_argument("--force", action="store_true", help="replace existing files")
    args = ap.parse_args(argv)

    from trackmind.sim.track import MapError
    from trackmind.tmi.reference_line import parse_race_time

    try:
        ref = parse_race_time(args.reference_time)
        made = make_map(
            args.run, args.name, args.challenge, ref, args.out_dir, args.conf_dir, args.force
        )
    except (ValueError, MapError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(
        f"{args.name}: {made['length_m']:.0f} m, {made['points']} line points, "
        f"{made['n_zones']} zone centers, reference {ref / 1000:.2f} s\n"
        f"  {made['line']}\n  {made['zones']}\n  {made['conf']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
