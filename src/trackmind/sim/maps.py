"""Built-in maps and the seeded generators (procedural and grand-prix maps).

Maps are written as recipes of straights and constant-radius arcs (the way Trackmania blocks
combine), turned into a race line and handed to `Track.build`, which validates them like any
user map.
"""

from __future__ import annotations

import numpy as np

from trackmind.sim.track import (
    MapError,
    Track,
    _check_no_overlap,
    _resample,
    with_run_up_and_off,
)

# A recipe item is ("S", length_m) or ("L"/"R", radius_m, angle_deg).
Recipe = list[tuple]


def line_from_recipe(recipe: Recipe, step_m: float = 2.0, heading_deg: float = 0.0) -> np.ndarray:
    """Polyline (N, 2) of a recipe, starting at the origin with the given heading."""
    pos = np.zeros(2)
    heading = np.deg2rad(heading_deg)
    out = [pos.copy()]
    for item in recipe:
        kind = item[0]
        if kind == "S":
            n = max(1, int(np.ceil(item[1] / step_m)))
            d = np.array([np.cos(heading), np.sin(heading)])
            for i in range(1, n + 1):
                out.append(pos + d * item[1] * i / n)
            pos = out[-1].copy()
        elif kind in ("L", "R"):
            radius, angle = float(item[1]), np.deg2rad(float(item[2]))
            sign = 1.0 if kind == "L" else -1.0
            center = pos + radius * np.array([-np.sin(heading), np.cos(heading)]) * sign
            n = max(2, int(np.ceil(radius * angle / step_m)))
            start = heading - sign * np.pi / 2
            for i in range(1, n + 1):
                a = start + sign * angle * i / n
                out.append(center + radius * np.array([np.cos(a), np.sin(a)]))
            heading += sign * angle
            pos = out[-1].copy()
        else:
            raise MapError(f"recipe: unknown item {item!r} (use S, L or R)")
    return np.asarray(out)


# name -> (description, recipe, half-width left, half-width right, checkpoints)
_BUILTIN: dict[str, tuple[str, Recipe, float, float, int]] = {
    "starter": (
        "short smoke-test map: a straight, two 90 degree turns (about 400 m)",
        [("S", 80), ("R", 45, 90), ("S", 70), ("L", 40, 90), ("S", 110)],
        9.0,
        9.0,
        1,
    ),
    "hairpins": (
        "zig-zag of 180 degree hairpins joined by short straights (hard braking, slow turns)",
        [("S", 70)]
        + [("L", 18, 180), ("S", 90), ("R", 18, 180), ("S", 90)] * 2
        + [("L", 18, 180), ("S", 80)],
        8.0,
        8.0,
        3,
    ),
    "chicanes": (
        "S-chicanes: quick left-right direction changes at medium speed",
        [("S", 90)] + [("L", 35, 50), ("R", 35, 100), ("L", 35, 50), ("S", 80)] * 5 + [("S", 40)],
        8.0,
        8.0,
        3,
    ),
    "flow": (
        "fast flowing map: long sweepers of large radius, near top speed (about 2.6 km)",
        [
            ("S", 150),
            ("L", 220, 60),
            ("R", 260, 80),
            ("S", 120),
            ("L", 180, 70),
            ("R", 300, 50),
            ("L", 240, 50),
            ("S", 200),
            ("R", 200, 60),
            ("S", 150),
        ],
        11.0,
        11.0,
        4,
    ),
    "speedway": (
        "city blocks: long straights and 90 degree corners of medium radius (braking points)",
        [
            ("S", 220),
            ("L", 30, 90),
            ("S", 160),
            ("R", 35, 90),
            ("S", 200),
            ("R", 30, 90),
            ("S", 120),
            ("L", 45, 90),
            ("S", 180),
        ],
        10.0,
        10.0,
        3,
    ),
    "technical": (
        "long technical map (> 3 km): hairpins, chicanes, sweepers and braking zones mixed",
        [
            ("S", 120),
            ("R", 60, 90),
            ("S", 80),
            ("L", 25, 120),
            ("R", 30, 60),
            ("S", 150),
            ("L", 120, 45),
            ("R", 20, 180),
            ("S", 160),
            ("L", 40, 90),
            ("R", 40, 90),
            ("S", 100),
            ("L", 80, 60),
            ("S", 200),
            ("R", 25, 150),
            ("L", 60, 60),
            ("S", 120),
            ("L", 200, 40),
            ("R", 35, 80),
            ("L", 35, 80),
            ("S", 180),
            ("R", 150, 90),
            ("S", 130),
            ("L", 22, 170),
            ("S", 150),
            ("R", 45, 100),
            ("L", 30, 100),
            ("S", 160),
            ("R", 70, 60),
            ("S", 90),
            ("L", 50, 90),
            ("S", 140),
        ],
        8.0,
        8.0,
        8,
    ),
}

DEFAULT_MAP = "starter"


def builtin_names() -> list[str]:
    return list(_BUILTIN)


def describe_builtin(name: str) -> str:
    return _BUILTIN[name][0]


def builtin_map(name: str) -> Track:
    if name not in _BUILTIN:
        raise MapError(
            f"unknown map name {name!r}: built-in maps are {', '.join(_BUILTIN)}; or use "
            + ", ".join(f"'{family}:<seed>'" for family in GENERATED_FAMILIES)
            + " or a path to a .npz/.csv/.npy file"
        )
    _, recipe, wl, wr, cps = _BUILTIN[name]
    return Track.build(
        name, line_from_recipe(recipe), wl, wr, checkpoints=cps, source=name, closed=False
    )


def procedural_map(seed: int, length_m: float = 1500.0) -> Track:
    """A random valid map for any seed: straights and arcs drawn until `length_m` is reached.

    Each piece is checked against the road laid so far and redrawn when it would touch it;
    after too many failures the generator backtracks one piece. The 2 m pre-check can miss a
    contact that the full validation finds: such a draw is discarded and the next attempt of
    the same seed is used, so every seed gives a valid map. Same seed, same map.
    """
    return _generated_map("procedural", seed, length_m, 7.0, 11.0, _procedural_pieces)


def grandprix_map(seed: int, length_m: float = 2500.0) -> Track:
    """A random map shaped like a real racing circuit, for agents that race real tracks.

    Real circuits (a public database of 25) have narrower roads than `procedural_map`
    (half-width 4.4-7.6 m against 7-11 m), straights of up to 1.1 km and, at their end, a
    hairpin or a chicane taken after braking from top speed. A generalist trained only on
    procedural maps stalls at exactly those places, so this family draws half-widths of
    4.5-9 m, straights of 300-1200 m that end in a braking corner or chicane, and the
    procedural map's arcs and short straights in between. Same seed, same map.
    """
    return _generated_map("grandprix", seed, length_m, 4.5, 9.0, _grandprix_pieces)


def narrow_map(seed: int, length_m: float = 1500.0) -> Track:
    """A procedural map on a real circuit's road, with its chicanes.

    Zero-shot races on real circuits stop at chicanes (scripts/failure_points.py: 8.7% of
    the chicanes met against 1.0% of other braking zones), most of them on roads narrower
    than any procedural map. This family keeps the procedural map's length and pieces but
    draws half-widths of 3.5-7.5 m, as the database's roads, and makes a quarter of its
    draws a chicane (two opposite arcs of (half-width + 4 m) x 1-3 radius).
    Same seed, same map.
    """
    return _generated_map("narrow", seed, length_m, 3.5, 7.5, _narrow_pieces)


def hairpin_map(seed: int, length_m: float = 2500.0) -> Track:
    """A grand-prix map whose braking corners are as tight as real hairpins.

    A quarter of the zero-shot failures on real circuits stop within 160 m of a corner whose
    centreline radius is under 8 m (Shanghai, Sochi, Spa, Spielberg, Melbourne, YasMarina:
    5.8-6.5 m on half-widths of 5-9 m), which make up under 2% of those circuits; the
    grand-prix family's corners start at the half-width plus 4 m (8.5-13 m). This family draws
    the grand-prix map with half of its long straights, and some shorter pieces, ending in a
    real hairpin: an apex radius of 5.5-9 m between wider entry and exit arcs, 40-170 degrees
    in all, taken on the full road width. Same seed, same map.
    """
    return _generated_map("hairpin", seed, length_m, 4.5, 9.0, _hairpin_pieces)


def chicane_map(seed: int, length_m: float = 2500.0) -> Track:
    """A grand-prix map on a real circuit's narrowest road, its long straights ending in a chicane.

    With real hairpins trained, the zero-shot stops on real circuits are at chicanes after a
    long straight on a narrow road (Monza's first chicane, 930 m after the last bend, half-width
    3.9-4.0 m, racing-line radius 9 m; Montreal's, 3.8-4.3 m). In
    hairpin_set, two sharp arcs (under 20 m) of opposite turn right after a straight of 300 m
    or more occur twice, both on hairpin:103 (a hairpin into an opposite bend, half-width
    5.9 m). This family draws half-widths of 3.5-5 m; 30% of its draws are a straight of
    300-1200 m into a real chicane, 10% a real chicane on its own, the rest
    grand-prix draws. A real chicane: an arc of 7-14 m radius turning 40-95 degrees, at most
    30 m of link, then an opposite arc of 7-18 m turning back 0.7-1.3 times as far (28-120
    degrees). Same seed, same map.
    """
    return _generated_map("chicane", seed, length_m, 3.5, 5.0, _chicane_pieces)


# Generated map families: spec prefix -> generator (seed -> Track).
GENERATED_FAMILIES = {
    "procedural": procedural_map,
    "grandprix": grandprix_map,
    "narrow": narrow_map,
    "hairpin": hairpin_map,
    "chicane": chicane_map,
}


def generated_family(spec: str) -> str | None:
    """The family of a generated-map spec ("grandprix:3" -> "grandprix"), else None."""
    family, sep, _ = spec.partition(":")
    return family if sep and family in GENERATED_FAMILIES else None


MAX_SEED_RANGE = 10_000  # maps one range may name (each loads in about 0.1 s)


def expand_seed_range(spec: str) -> list[str]:
    """The maps a spec names: "narrow:301-420" is narrow:301 ... narrow:420 (inclusive), any
    other spec itself. Hundreds of generated maps are how a generalist sees more roads than it
    can memorise; a range keeps that a one-line config. MapError on an empty or huge range."""
    family = generated_family(spec)
    seeds = spec.partition(":")[2]
    first, dash, last = seeds.partition("-")
    if family is None or not dash or not (first.isdigit() and last.isdigit()):
        return [spec]
    a, b = int(first), int(last)
    if b < a:
        raise MapError(f"{spec}: a seed range runs from the lower seed to the higher")
    if b - a + 1 > MAX_SEED_RANGE:
        raise MapError(f"{spec}: {b - a + 1} maps, at most {MAX_SEED_RANGE} in one range")
    return [f"{family}:{seed}" for seed in range(a, b + 1)]


def _generated_map(
    family: str, seed: int, length_m: float, narrowest: float, widest: float, next_pieces
) -> Track:
    """A valid map of a family: a half-width drawn in [narrowest, widest], then pieces drawn
    by `next_pieces(rng, width)`; a draw the full validation refuses is drawn again."""
    if seed < 0:
        raise MapError(f"{family} map seed must be >= 0, got {seed}")
    name = f"{family}:{seed}"
    for attempt in range(100):
        rng = np.random.default_rng([seed, attempt])
        try:
            width = float(rng.uniform(narrowest, widest))
            pieces, total = _draw_pieces(rng, length_m, width, next_pieces)
            return Track.build(
                name,
                line_from_recipe(pieces),
                width,
                width,
                checkpoints=max(1, int(total // 300)),
                source=name,
                closed=False,
            )
        except MapError:
            continue
    raise MapError(f"{name}: no valid map after 100 attempts (length_m={length_m})")


_MAX_DRAWS = 500  # candidate pieces per draw before it counts as boxed in


def _draw_pieces(
    rng: np.random.Generator, length_m: float, width: float, next_pieces
) -> tuple[Recipe, float]:
    """Pieces and race length of one draw (pre-checked, not yet validated): a first
    straight, then `next_pieces(rng, width)` until `length_m`, backtracking when boxed in."""
    pieces: Recipe = [("S", float(rng.uniform(60, 120)))]
    total = pieces[0][1]
    sizes = [1]  # pieces added per accepted draw, to backtrack a whole group
    fails = 0
    for _ in range(_MAX_DRAWS):
        if total >= length_m:
            break
        cand = next_pieces(rng, width)
        trial = pieces + cand
        if _recipe_ok(trial, width):
            pieces = trial
            sizes.append(len(cand))
            total += sum(_piece_length(p) for p in cand)
            fails = 0
        else:
            fails += 1
            if fails > 25 and len(sizes) > 1:
                for _ in range(sizes.pop()):
                    total -= _piece_length(pieces.pop())
                fails = 0
    else:
        raise MapError("procedural draw did not reach its length (boxed in)")
    pieces.append(("S", 60.0))
    if not _recipe_ok(pieces, width):  # the closing straight can touch: shorten it
        pieces[-1] = ("S", 30.0)
    return pieces, total


def _procedural_pieces(rng: np.random.Generator, width: float) -> Recipe:
    """One draw of a procedural map: a straight or an arc."""
    if rng.random() < 0.35:
        return [("S", float(rng.uniform(30, 180)))]
    radius = float(
        rng.choice([1.0, 1.6, 2.5, 5.0, 10.0, 20.0]) * (width + 8.0) * rng.uniform(1, 1.5)
    )
    max_angle = 180.0 if radius < 40 else 90.0
    angle = float(rng.uniform(30.0, max_angle))
    return [(_side(rng), radius, angle)]


def _narrow_pieces(rng: np.random.Generator, width: float) -> Recipe:
    """One draw of a narrow map: a chicane a quarter of the time, else a procedural piece."""
    if rng.random() < 0.25:
        return _chicane(rng, width)
    return _procedural_pieces(rng, width)


def _grandprix_pieces(rng: np.random.Generator, width: float) -> Recipe:
    """One draw of a grand-prix map: a long straight into a braking corner, or a short piece.

    Corner radii start at the half-width plus 4 m (8.5-13 m), as tight as real hairpins.
    """
    u = rng.random()
    if u < 0.3:  # a long straight, braking from top speed into a hairpin or a chicane
        straight = ("S", float(rng.uniform(300, 1200)))
        return [straight, *_braking_corner(rng, width)]
    if u < 0.45:
        return _chicane(rng, width)
    if u < 0.65:
        return [("S", float(rng.uniform(30, 250)))]
    radius = float(rng.choice([1.0, 1.6, 2.5, 5.0, 10.0]) * (width + 4.0) * rng.uniform(1, 1.5))
    angle = float(rng.uniform(30.0, 180.0 if radius < 40 else 90.0))
    return [(_side(rng), radius, angle)]


def _hairpin_pieces(rng: np.random.Generator, width: float) -> Recipe:
    """One draw of a hairpin map: a long straight into a real hairpin (20%), a real hairpin
    after a short piece (15%), else a grand-prix draw: half of the long straights end in one."""
    u = rng.random()
    if u < 0.2:
        return [("S", float(rng.uniform(300, 1200))), *_real_hairpin(rng)]
    if u < 0.35:
        return _real_hairpin(rng)
    return _grandprix_pieces(rng, width)


def _real_hairpin(rng: np.random.Generator) -> Recipe:
    """A corner shaped as real circuits' tightest: an apex arc of 5.5-9 m radius taking 30-60%
    of a 40-170 degree turn, between entry and exit arcs 1.5-3 times wider (real corners
    tighten and open again, constant-radius arcs do not)."""
    side = _side(rng)
    apex = float(rng.uniform(5.5, 9.0))
    total = float(rng.uniform(40.0, 170.0))
    at_apex = total * float(rng.uniform(0.3, 0.6))
    entry = (total - at_apex) * float(rng.uniform(0.3, 0.7))
    exit_ = total - at_apex - entry
    return [
        (side, apex * float(rng.uniform(1.5, 3.0)), entry),
        (side, apex, at_apex),
        (side, apex * float(rng.uniform(1.5, 3.0)), exit_),
    ]


def _chicane_pieces(rng: np.random.Generator, width: float) -> Recipe:
    """One draw of a chicane map: a long straight into a real chicane (30%), a real chicane
    on its own (10%), else a grand-prix draw."""
    u = rng.random()
    if u < 0.3:
        return [("S", float(rng.uniform(300, 1200))), *_real_chicane(rng, width)]
    if u < 0.4:
        return _real_chicane(rng, width)
    return _grandprix_pieces(rng, width)


def _real_chicane(rng: np.random.Generator, width: float) -> Recipe:
    """A chicane as real circuits brake into from top speed: a tight first arc (7-14 m, at
    least the half-width + 3 m) turning 40-95 degrees, at most 30 m of link, then an opposite
    arc of 7-18 m turning back 0.7-1.3 times as far, so the road leaves near its old heading."""
    first = _side(rng)
    second = "R" if first == "L" else "L"
    tightest = max(7.0, width + 3.0)
    r1 = float(rng.uniform(tightest, 14.0))
    r2 = float(rng.uniform(tightest, 18.0))
    a1 = float(rng.uniform(40.0, 95.0))
    a2 = float(min(120.0, a1 * rng.uniform(0.7, 1.3)))
    gap = float(rng.uniform(0.0, 30.0))
    middle = [("S", gap)] if gap > 5.0 else []
    return [(first, r1, a1), *middle, (second, r2, a2)]


def _braking_corner(rng: np.random.Generator, width: float) -> Recipe:
    if rng.random() < 0.4:
        return _chicane(rng, width)
    radius = float((width + 4.0) * rng.uniform(1.0, 2.5))
    return [(_side(rng), radius, float(rng.uniform(60.0, 180.0)))]


def _chicane(rng: np.random.Generator, width: float) -> Recipe:
    """Two opposite tight arcs, sometimes with a short straight between them."""
    first = _side(rng)
    second = "R" if first == "L" else "L"
    r1, r2 = (float((width + 4.0) * rng.uniform(1.0, 3.0)) for _ in range(2))
    a1, a2 = (float(rng.uniform(30.0, 80.0)) for _ in range(2))
    gap = float(rng.uniform(0.0, 40.0))
    middle = [("S", gap)] if gap > 5.0 else []
    return [(first, r1, a1), *middle, (second, r2, a2)]


def _side(rng: np.random.Generator) -> str:
    return "L" if rng.random() < 0.5 else "R"


def _piece_length(p: tuple) -> float:
    return p[1] if p[0] == "S" else p[1] * np.deg2rad(p[2])


def _recipe_ok(recipe: Recipe, width: float) -> bool:
    """Cheap overlap check of a partial recipe (2 m samples, with run-up and run-off)."""
    line = line_from_recipe(recipe)
    pts, _, _ = _resample(line, 2.0)
    pts, _, _ = with_run_up_and_off(pts, 2.0)
    s = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(pts, axis=0), axis=1))])
    try:
        _check_no_overlap(pts, s, np.full(len(pts), width), "procedural")
    except MapError:
        return False
    return True


def circuit_line(seed: int, length_m: float = 4500.0, harmonics: int = 6) -> np.ndarray:
    """A closed racing circuit (M, 2), the same for the same seed: a smooth star-shaped loop.

    The radius around the centre is a mean plus a few random Fourier harmonics, so the loop
    never crosses itself (one radius per direction) and mixes long sweepers with tighter
    corners; it is scaled to `length_m`. The last point lies one step before the first.
    """
    rng = np.random.default_rng([seed, 7919])
    theta = np.linspace(0.0, 2.0 * np.pi, 4000, endpoint=False)
    k = np.arange(2, 2 + harmonics)
    amp = rng.uniform(0.0, 0.22, harmonics) / np.sqrt(k - 1)
    phase = rng.uniform(0.0, 2.0 * np.pi, harmonics)
    r = 1.0 + (amp[:, None] * np.cos(k[:, None] * theta[None, :] + phase[:, None])).sum(axis=0)
    pts = np.stack([r * np.cos(theta), r * np.sin(theta)], axis=1)
    closed = np.vstack([pts, pts[:1]])
    scale = length_m / float(np.sum(np.linalg.norm(np.diff(closed, axis=0), axis=1)))
    pts = pts * scale
    s = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(pts, axis=0), axis=1))])
    keep = np.searchsorted(s, np.arange(0.0, s[-1], 5.0))  # a point every ~5 m
    return pts[keep] - pts[0]
