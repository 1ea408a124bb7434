"""Map files: the one on-disk format (.npz) plus imports from CSV and driven-line .npy.

Format (see docs/maps.md): a NumPy .npz archive with
  format = "trackmind-map", version = 2 (1 is read too), name (str),
  line (M, 2) float race line from start line to finish line (one lap of a circuit), metres,
  width_left (M,), width_right (M,) float half-widths to the walls,
  checkpoints (K,) float fractions of the (lap) distance in (0, 1),
  reference_time_ms () float, optional (real maps: author/medal time; sim maps leave it out),
  closed () bool and laps () int, optional (a circuit and its race's laps),
  heights (M,) float, optional (lets the road pass over itself, see Track).
All sources go through `Track.build`, which validates them.
"""

from __future__ import annotations

import dataclasses
import logging
import zipfile
from pathlib import Path

import numpy as np

from trackmind.sim.bridge import bridge_heights
from trackmind.sim.maps import (
    GENERATED_FAMILIES,
    builtin_map,
    builtin_names,
    generated_family,
)
from trackmind.sim.smoothing import smooth_line
from trackmind.sim.track import MapError, Track, checked_line, line_is_closed

log = logging.getLogger(__name__)

FORMAT = "trackmind-map"
VERSION = 2
READABLE_VERSIONS = (1, 2)
CSV_COLUMNS = "x,y,width_right,width_left[,height]"


def save_map(track: Track, path: str | Path) -> Path:
    """Write a track in the trackmind map format (.npz)."""
    path = Path(path)
    if path.suffix != ".npz":
        path = path.with_suffix(".npz")
    path.parent.mkdir(parents=True, exist_ok=True)
    extra = {}
    if track.reference_time_ms is not None:
        extra["reference_time_ms"] = np.float64(track.reference_time_ms)
    if track.race_heights is not None:
        extra["heights"] = track.race_heights
    np.savez(
        path,
        format=np.str_(FORMAT),
        version=np.int64(VERSION),
        name=np.str_(track.name),
        line=track.race_line,
        width_left=track.race_width_left,
        width_right=track.race_width_right,
        checkpoints=track.checkpoint_fractions,
        closed=np.bool_(track.closed),
        laps=np.int64(track.laps),
        **extra,
    )
    return path


def load_map(
    spec: str | Path,
    width_m: float = 8.0,
    name: str | None = None,
    laps: int | None = None,
    closed: bool | None = None,
) -> Track:
    """Load a map: a built-in name, 'procedural:<seed>', 'grandprix:<seed>' or a map file.

    `width_m` is the half-width used for a .npy driven line (which carries no widths).
    `laps` / `closed` override what the file says (a circuit's laps; None: the file's).
    """
    track = _load(spec, width_m, name, closed)
    if laps is not None and laps != track.laps:
        track = _with_laps(track, laps)
    return track


def _with_laps(track: Track, laps: int) -> Track:
    """The same map raced over another number of laps (refused for an open line)."""
    return Track.build(
        track.name,
        track.race_line,
        track.race_width_left,
        track.race_width_right,
        checkpoints=track.checkpoint_fractions,
        reference_time_ms=track.reference_time_ms,
        source=track.source or track.name,
        closed=track.closed,
        laps=laps,
        heights=track.race_heights,
    )


def _load(spec: str | Path, width_m: float, name: str | None, closed: bool | None) -> Track:
    text = str(spec)
    if text in builtin_names():
        return builtin_map(text)
    family = generated_family(text)
    if family is not None:
        seed_text = text.split(":", 1)[1]
        try:
            seed = int(seed_text)
        except ValueError:
            raise MapError(f"{text}: {family} seed must be an integer") from None
        return GENERATED_FAMILIES[family](seed)
    path = Path(text)
    if path.suffix not in (".npz", ".csv", ".npy"):
        return builtin_map(text)  # raises the unknown-name error listing the choices
    if not path.is_file():
        raise MapError(f"{path}: map file not found")
    name = name or path.stem
    if path.suffix == ".npz":
        return _load_npz(path, name, closed)
    if path.suffix == ".csv":
        return import_csv(path, name, closed)
    return import_npy(path, width_m, name, closed)


def _load_npz(path: Path, name: str, closed: bool | None = None) -> Track:
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise MapError(f"{path}: not a readable .npz map ({e})") from None
    if str(data.get("format", "")) != FORMAT:
        raise MapError(f"{path}: not a trackmind map (missing format='{FORMAT}')")
    if int(data.get("version", -1)) not in READABLE_VERSIONS:
        raise MapError(f"{path}: unsupported map version {data.get('version')}")
    for key in ("line", "width_left", "width_right"):
        if key not in data:
            raise MapError(f"{path}: missing array '{key}'")
    ref = data.get("reference_time_ms")
    if closed is None and "closed" in data:
        closed = bool(data["closed"])
    laps = int(data["laps"]) if "laps" in data else 1
    return Track.build(
        str(data.get("name", name)),
        data["line"],
        data["width_left"],
        data["width_right"],
        checkpoints=data.get("checkpoints", np.zeros(0)),
        reference_time_ms=None if ref is None else float(ref),
        source=str(path),
        closed=closed,
        laps=laps,
        heights=data.get("heights"),
    )


def import_csv(path: str | Path, name: str | None = None, closed: bool | None = None) -> Track:
    """Import rows of `x,y,width_right,width_left` and an optional height (metres).

    An optional header line and `#` comments are skipped. A closed line (a racing circuit,
    its last point at or near its first) becomes a circuit. The points are smoothed
    (`import_line`).
    """
    path = Path(path)
    rows = read_csv_rows(path)
    heights = rows[:, 4] if rows.shape[1] == 5 else None
    return import_line(
        name or path.stem, rows[:, :2], rows[:, 3], rows[:, 2], str(path), closed, heights
    )


def import_line(
    name: str,
    line: np.ndarray,
    width_left: np.ndarray | float,
    width_right: np.ndarray | float,
    source: str,
    closed: bool | None = None,
    heights: np.ndarray | None = None,
) -> Track:
    """A track from measured points: a smoothing spline through them, then `Track.build`.

    A circuit gets a periodic spline; widths and heights follow the spline's parameter. A
    circuit without heights that crosses itself once, cleanly, gets a bridge
    (`bridge_heights`). The track records how far its line left the raw points.
    """
    line, wl, wr, z = checked_line(line, width_left, width_right, heights, source)
    closed = line_is_closed(line, closed, 1, source)
    smooth = smooth_line(line, wl, wr, *([] if z is None else [z]), closed=closed)
    wl, wr = smooth.values[0], smooth.values[1]
    if z is not None:
        z = smooth.values[2]
    elif closed:
        z = bridge_heights(smooth.points, wl, wr)
    track = Track.build(name, smooth.points, wl, wr, source=source, closed=closed, heights=z)
    log.info("%s: smoothed, %.2f m from its farthest point", source, smooth.max_deviation_m)
    return dataclasses.replace(track, smoothing_deviation_m=smooth.max_deviation_m)


def read_csv_rows(path: Path) -> np.ndarray:
    """The numeric rows of a map CSV, (N, 4 or 5); every problem is one line naming its row."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise MapError(f"{path}: cannot read CSV ({e})") from None
    rows: list[list[float]] = []
    width = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        cells = [c.strip() for c in line.split(",")]
        try:
            values = [float(c) for c in cells]
        except ValueError:
            if not rows and width is None:  # a header line
                width = len(cells)
                continue
            bad = next(c for c in cells if not _is_number(c))
            raise MapError(f"{path}: line {number}: {bad!r} is not a number") from None
        if len(values) not in (4, 5):
            raise MapError(
                f"{path}: line {number}: expected 4 or 5 columns {CSV_COLUMNS}, got {len(values)}"
            )
        if rows and len(values) != len(rows[0]):
            raise MapError(
                f"{path}: line {number}: {len(values)} columns where earlier lines have "
                f"{len(rows[0])}"
            )
        if not all(np.isfinite(values)):
            raise MapError(f"{path}: line {number}: NaN or inf is not a coordinate or width")
        rows.append(values)
    if not rows:
        raise MapError(f"{path}: no rows of {CSV_COLUMNS}")
    return np.asarray(rows, dtype=np.float64)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def import_npy(
    path: str | Path, width_m: float = 8.0, name: str | None = None, closed: bool | None = None
) -> Track:
    """Import an (N, 3) driven line (x, y, z with y up, as Trackmania replays give).

    The ground plane is (x, z); the line becomes the race line with half-width `width_m`,
    and y its heights, so the road may pass over itself where the two roads are apart in
    height (a bridge). A line that ends where it began is a circuit.
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
    return import_line(name or path.stem, line, width_m, width_m, str(path), closed, arr[:, 1])
