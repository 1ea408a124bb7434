"""Map files: the one on-disk format (.npz) plus imports from CSV and driven-line .npy.

Format (see docs/maps.md): a NumPy .npz archive with
  format = "trackmind-map", version = 1, name (str),
  line (M, 2) float race line from start line to finish line, in metres,
  width_left (M,), width_right (M,) float half-widths to the walls,
  checkpoints (K,) float fractions of the race distance in (0, 1),
  reference_time_ms () float, optional (real maps: author/medal time; sim maps leave it out).
All sources go through `Track.build`, which validates them.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from trackmind.sim.maps import builtin_map, builtin_names, procedural_map
from trackmind.sim.track import MapError, Track

FORMAT = "trackmind-map"
VERSION = 1


def save_map(track: Track, path: str | Path) -> Path:
    """Write a track in the trackmind map format (.npz)."""
    path = Path(path)
    if path.suffix != ".npz":
        path = path.with_suffix(".npz")
    path.parent.mkdir(parents=True, exist_ok=True)
    frac = (track.checkpoints_s - track.start_s) / track.length_m
    extra = {}
    if track.reference_time_ms is not None:
        extra["reference_time_ms"] = np.float64(track.reference_time_ms)
    np.savez(
        path,
        format=np.str_(FORMAT),
        version=np.int64(VERSION),
        name=np.str_(track.name),
        line=track.race_line,
        width_left=track.race_width_left,
        width_right=track.race_width_right,
        checkpoints=frac,
        **extra,
    )
    return path


def load_map(spec: str | Path, width_m: float = 8.0, name: str | None = None) -> Track:
    """Load a map from a built-in name, 'procedural:<seed>' or a .npz / .csv / .npy file.

    `width_m` is the half-width used for a .npy driven line (which carries no widths).
    """
    text = str(spec)
    if text in builtin_names():
        return builtin_map(text)
    if text.startswith("procedural:"):
        seed_text = text.split(":", 1)[1]
        try:
            seed = int(seed_text)
        except ValueError:
            raise MapError(f"{text}: procedural seed must be an integer") from None
        return procedural_map(seed)
    path = Path(text)
    if path.suffix not in (".npz", ".csv", ".npy"):
        return builtin_map(text)  # raises the unknown-name error listing the choices
    if not path.is_file():
        raise MapError(f"{path}: map file not found")
    name = name or path.stem
    if path.suffix == ".npz":
        return _load_npz(path, name)
    if path.suffix == ".csv":
        return import_csv(path, name)
    return import_npy(path, width_m, name)


def _load_npz(path: Path, name: str) -> Track:
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise MapError(f"{path}: not a readable .npz map ({e})") from None
    if str(data.get("format", "")) != FORMAT:
        raise MapError(f"{path}: not a trackmind map (missing format='{FORMAT}')")
    if int(data.get("version", -1)) != VERSION:
        raise MapError(f"{path}: unsupported map version {data.get('version')}")
    for key in ("line", "width_left", "width_right"):
        if key not in data:
            raise MapError(f"{path}: missing array '{key}'")
    ref = data.get("reference_time_ms")
    return Track.build(
        str(data.get("name", name)),
        data["line"],
        data["width_left"],
        data["width_right"],
        checkpoints=data.get("checkpoints", np.zeros(0)),
        reference_time_ms=None if ref is None else float(ref),
        source=str(path),
    )


def import_csv(path: str | Path, name: str | None = None) -> Track:
    """Import rows of `x,y,width_right,width_left` (metres; an optional header line)."""
    path = Path(path)
    try:
        rows = np.genfromtxt(path, delimiter=",", dtype=np.float64, comments="#")
    except (OSError, ValueError) as e:
        raise MapError(f"{path}: cannot read CSV ({e})") from None
    if rows.ndim == 1:
        rows = rows.reshape(1, -1)
    if rows.size and np.all(np.isnan(rows[0])):  # header line
        rows = rows[1:]
    if rows.ndim != 2 or rows.shape[1] != 4:
        raise MapError(f"{path}: expected 4 columns x,y,width_right,width_left, got {rows.shape}")
    return Track.build(name or path.stem, rows[:, :2], rows[:, 3], rows[:, 2], source=str(path))


def import_npy(path: str | Path, width_m: float = 8.0, name: str | None = None) -> Track:
    """Import an (N, 3) driven line (x, y, z with y up, as Trackmania replays give).

    The ground plane is (x, z); the line becomes the race line with half-width `width_m`.
    """
    path = Path(path)
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise MapError(f"{path}: cannot read .npy ({e})") from None
    if arr.ndim != 2 or arr.shape[1] != 3:
        raise MapError(f"{path}: expected an N x 3 array of x, y, z points, got {arr.shape}")
    # Trackmania is left-handed with y up: looking down, (x, z) maps to our (x, y) mirrored,
    # so keep turning directions by negating z.
    line = np.stack([arr[:, 0], -arr[:, 2]], axis=1)
    return Track.build(name or path.stem, line, width_m, width_m, source=str(path))
