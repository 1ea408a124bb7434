"""Track building, validation, zone centers, map files."""

import numpy as np
import pytest

from trackmind.sim.driver import PurePursuitDriver, drive_races
from trackmind.sim.game import SimGame
from trackmind.sim.mapio import import_csv, import_npy, load_map, save_map
from trackmind.sim.maps import (
    MAX_SEED_RANGE,
    builtin_map,
    builtin_names,
    chicane_map,
    expand_seed_range,
    grandprix_map,
    hairpin_map,
    line_from_recipe,
    narrow_map,
    procedural_map,
)
from trackmind.sim.reference import reference_time_ms
from trackmind.sim.track import RUN_UP_M, MapError, Track, curvature


def straight(n=50, step=2.0):
    return np.stack([np.arange(n) * step, np.zeros(n)], axis=1)


@pytest.mark.parametrize(
    "spec, names",
    [
        ("narrow:3-5", ["narrow:3", "narrow:4", "narrow:5"]),
        ("procedural:7-7", ["procedural:7"]),
        ("grandprix:0-1", ["grandprix:0", "grandprix:1"]),
        ("procedural:7", ["procedural:7"]),  # one map
        ("starter", ["starter"]),
        ("maps/a-b.csv", ["maps/a-b.csv"]),  # a file, whatever its name
        ("nowhere:1-3", ["nowhere:1-3"]),  # not a family: load_map names the problem
    ],
)
def test_a_seed_range_names_every_seed_in_it(spec, names):
    assert expand_seed_range(spec) == names


def test_a_bad_seed_range_is_refused():
    with pytest.raises(MapError, match="from the lower seed to the higher"):
        expand_seed_range("narrow:5-3")
    with pytest.raises(MapError, match=f"at most {MAX_SEED_RANGE}"):
        expand_seed_range(f"narrow:0-{MAX_SEED_RANGE}")


def test_builtin_maps_have_distinct_character():
    names = builtin_names()
    assert len(names) >= 6
    for required in ("starter", "hairpins", "chicanes", "flow", "technical"):
        assert required in names
    lengths = {n: builtin_map(n).length_m for n in names}
    assert lengths["starter"] < 600
    assert lengths["technical"] >= 3000
    assert lengths["flow"] > 2000


def test_procedural_maps_are_valid_and_seeded():
    a, b, c = procedural_map(3), procedural_map(3), procedural_map(4)
    np.testing.assert_array_equal(a.points, b.points)
    assert a.points.shape != c.points.shape or not np.allclose(a.points, c.points)
    # Track.build rejects self-intersecting or touching lines; 51 and 149 once drew such lines
    for seed in [*range(20), 51, 149, 162]:
        t = procedural_map(seed)
        assert t.length_m > 1000


def test_grandprix_maps_brake_from_a_long_straight_into_a_tight_corner():
    """Grand-prix maps have what real circuits have and procedural maps lack (narrow roads,
    a straight of 300 m or more that ends in a corner tighter than 2.5 x (half-width + 4 m))."""
    a, b = grandprix_map(7), grandprix_map(7)
    np.testing.assert_array_equal(a.points, b.points)
    for seed in range(8):
        t = grandprix_map(seed)
        half_width = float(t.width_left[len(t.width_left) // 2])
        assert 4.5 <= half_width <= 9.0
        assert t.length_m > 2400
        radius = 1.0 / np.maximum(np.abs(curvature(t.points)), 1e-9)
        step = float(np.median(np.diff(t.s)))
        straight = np.convolve(radius > 1e4, np.ones(int(300 / step)), mode="valid")
        ends = np.flatnonzero(straight == int(300 / step)) + int(300 / step)
        ahead = int(60 / step)
        tight = (half_width + 4.0) * 3.0 + 0.5
        assert any(radius[e : e + ahead].min() <= tight for e in ends if e + ahead < len(radius))


def test_narrow_maps_have_real_road_widths_and_chicanes():
    """Narrow maps: the procedural map's 1.5 km on a half-width of 3.5-7.5 m, with chicanes
    (a turn one way then the other, both tighter than 3 x (half-width + 4 m), within 80 m)."""
    a, b = narrow_map(7), narrow_map(7)
    np.testing.assert_array_equal(a.points, b.points)
    for seed in [*range(6), *range(101, 113)]:
        t = narrow_map(seed)
        half_width = float(t.width_left[len(t.width_left) // 2])
        assert 3.5 <= half_width <= 7.5
        assert t.length_m > 1000
        kappa = curvature(t.points)
        step = float(np.median(np.diff(t.s)))
        tight = 1.0 / ((half_width + 4.0) * 3.0 + 0.5)
        sharp = np.flatnonzero(np.abs(kappa) >= tight * 0.99)
        window = int(80 / step)
        flips = [i for i in sharp if np.any(kappa[i : i + window] * kappa[i] <= -(tight**2) * 0.98)]
        assert flips, f"narrow:{seed} has no chicane"


def test_hairpin_maps_have_real_hairpins_that_the_scripted_driver_takes():
    """Hairpin maps reach the apex radii of real circuits' tightest corners (5.5-9 m, below
    the grand-prix family's half-width + 4 m), on a grand-prix road; the road stays drivable."""
    a, b = hairpin_map(7), hairpin_map(7)
    np.testing.assert_array_equal(a.points, b.points)
    apexes = []
    for seed in range(8):
        t = hairpin_map(seed)
        half_width = float(t.width_left[len(t.width_left) // 2])
        assert 4.5 <= half_width <= 9.0
        assert t.length_m > 2400
        kappa = np.convolve(np.abs(curvature(t.points)), np.ones(5) / 5, mode="same")
        apexes.append(1.0 / kappa.max())
        assert apexes[-1] > 5.0  # the apex arcs' 5.5 m, less the join's smoothing
    assert min(apexes) < 7.0 and np.median(apexes) < 8.5 + 1e-9  # grand-prix maps: >= 10.5 m
    track = hairpin_map(1)
    game = SimGame(1, maps=[track], frame_shape=None)
    (result,) = drive_races(game, PurePursuitDriver([track], speed_share=0.8))
    assert result["finished"]
    assert 1.1 < result["race_time_ms"] / reference_time_ms(track) < 1.4


def chicanes_after_straights(track: Track, straight_m: float = 300.0) -> list[float]:
    """Arclengths of the chicanes a track has after a straight of straight_m or more: two sharp
    arcs (centreline radius under 20 m) of opposite turn under 40 m apart, the first turning
    in under 40 m after straight_m of centreline straighter than 400 m radius."""
    kappa = np.convolve(curvature(track.points), np.ones(3) / 3, mode="same")
    sharp = np.flatnonzero(np.abs(kappa) > 1 / 20)
    bends = np.flatnonzero(np.abs(kappa) >= 1 / 400)
    found = []
    for i, j in zip(sharp[:-1], sharp[1:]):
        if np.sign(kappa[i]) == np.sign(kappa[j]) or track.s[j] - track.s[i] > 40:
            continue
        start = i  # back to where the first arc turns in
        while start > 0 and abs(kappa[start - 1]) >= 1 / 400:
            start -= 1
        before = bends[bends < start]
        run = track.s[start] - (track.s[before[-1]] if before.size else 0.0)
        if run >= straight_m and track.s[i] - track.s[start] < 40:
            found.append(float(track.s[j]))
    return found


def test_chicane_maps_have_narrow_chicanes_after_long_straights_that_the_driver_takes():
    """Chicane maps put real chicanes (7-18 m arcs) at the end of 300-1200 m straights on a
    road of 3.5-5 m half-width. Of hairpin_set's twelve maps, only hairpin:103 has such a
    sequence (twice: a hairpin into an opposite bend, on a 5.9 m half-width)."""
    a, b = chicane_map(7), chicane_map(7)
    np.testing.assert_array_equal(a.points, b.points)
    for seed in [*range(6), 101, 102, 103]:
        t = chicane_map(seed)
        assert 3.5 <= float(t.width_left[len(t.width_left) // 2]) <= 5.0
        assert chicanes_after_straights(t), f"chicane:{seed} has no chicane after a straight"
    hairpin_set = [procedural_map(s) for s in (101, 102, 103)]
    hairpin_set += [hairpin_map(s) for s in (102, 103, 104)]
    hairpin_set += [narrow_map(s) for s in range(101, 107)]
    found = {t.name: len(chicanes_after_straights(t)) for t in hairpin_set}
    assert {name: n for name, n in found.items() if n} == {"hairpin:103": 2}
    track = chicane_map(101)
    game = SimGame(1, maps=[track], frame_shape=None)
    (result,) = drive_races(game, PurePursuitDriver([track], speed_share=0.8))
    assert result["finished"]
    assert 1.1 < result["race_time_ms"] / reference_time_ms(track) < 1.4


def test_generated_map_specs_load_by_family():
    assert load_map("grandprix:3").name == "grandprix:3"
    assert load_map("hairpin:3").name == "hairpin:3"
    assert load_map("chicane:3").name == "chicane:3"
    assert load_map("procedural:3").name == "procedural:3"
    assert load_map("narrow:3").name == "narrow:3"
    with pytest.raises(MapError, match="grandprix:x: grandprix seed must be an integer"):
        load_map("grandprix:x")
    with pytest.raises(MapError, match="grandprix map seed must be >= 0"):
        grandprix_map(-1)


def test_geometry_of_a_straight():
    t = Track.build("s", straight(), 6.0, 5.0, checkpoints=2)
    assert t.start_s == pytest.approx(RUN_UP_M)
    assert t.length_m == pytest.approx(98.0)
    np.testing.assert_allclose(t.point_at(t.start_s), [0.0, 0.0], atol=1e-9)
    np.testing.assert_allclose(t.normals[10], [0.0, 1.0])  # left of +x is +y
    np.testing.assert_allclose(t.checkpoints_s - t.start_s, [98 / 3, 2 * 98 / 3])
    assert t.width_left[20] == 6.0 and t.width_right[20] == 5.0


def test_zone_centers_every_spacing_and_extended():
    t = Track.build("s", straight(), 6.0, 6.0)
    zc, zs = t.zone_centers(10.0, n_before=1, n_after=40)
    # one zone behind the start, zones every 10 m, one exactly on the finish, 40 beyond
    assert zs[0] == pytest.approx(t.start_s - 10)
    np.testing.assert_allclose(np.diff(zs[:11]), 10.0)
    assert t.finish_s in zs
    assert zs[-1] == pytest.approx(t.finish_s + 400)
    np.testing.assert_allclose(zc[-1], [98.0 + 400.0, 0.0], atol=1e-9)  # straight extension
    np.testing.assert_allclose(zc[0], [-10.0, 0.0], atol=1e-9)


def test_inner_width_is_fitted_to_tight_turns():
    line = line_from_recipe([("S", 40), ("L", 10, 90), ("S", 40)])
    t = Track.build("tight", line, 12.0, 12.0)
    mid = np.argmin(np.abs(t.s - (t.start_s + 40 + 10 * np.pi / 4)))
    assert t.width_left[mid] < 10.0  # inner (left) wall stays outside the turn centre
    assert t.width_right[mid] == 12.0


@pytest.mark.parametrize(
    "line, wl, msg",
    [
        (np.array([[0, 0], [1, np.nan], [2, 0], [3, 0]]), 5.0, "NaN or inf"),
        (np.array([[0, 0], [np.inf, 0], [2, 0]]), 5.0, "NaN or inf"),
        (np.array([[0, 0], [50, 0]]), 5.0, "at least 3 points"),
        (straight(), 0.0, "width_left must be > 0"),
        (straight(), -3.0, "width_left must be > 0"),
        (straight()[:, :1], 5.0, "shape (N, 2)"),
    ],
)
def test_bad_maps_give_one_line_errors(line, wl, msg):
    with pytest.raises(MapError) as e:
        Track.build("bad", line, wl, 5.0, source="bad.csv")
    text = str(e.value)
    assert msg in text and text.startswith("bad.csv:") and "\n" not in text


def test_self_intersecting_line_is_rejected():
    # a figure that crosses itself: out along x, loop back across the first straight
    line = line_from_recipe([("S", 100), ("L", 30, 270), ("S", 120)])
    with pytest.raises(MapError, match="crosses itself|touches itself"):
        Track.build("x", line, 6.0, 6.0)


def test_unknown_map_name_lists_choices():
    with pytest.raises(MapError, match="unknown map name 'nope'.*starter.*'chicane:<seed>'"):
        load_map("nope")
    with pytest.raises(MapError, match="procedural seed must be an integer"):
        load_map("procedural:abc")
    with pytest.raises(MapError, match="map file not found"):
        load_map("missing.csv")


def test_csv_import(tmp_path):
    path = tmp_path / "mine.csv"
    rows = ["x,y,width_right,width_left"] + [f"{2.0 * i},0,4,7" for i in range(40)]
    path.write_text("\n".join(rows))
    t = import_csv(path)
    assert t.name == "mine" and t.length_m == pytest.approx(78.0)
    assert t.width_left[20] == 7.0 and t.width_right[20] == 4.0
    assert load_map(path).fingerprint() == t.fingerprint()


def test_csv_with_bad_values(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("0,0,4,4\n1,0,4,4\n2,0,-1,4\n3,0,4,4\n")
    with pytest.raises(MapError, match=r"bad.csv: width_right must be > 0"):
        import_csv(path)


def test_npy_import_uses_ground_plane(tmp_path):
    # a Trackmania-style driven line: y is up (constant here), x and z on the ground
    n = 60
    xyz = np.stack([np.arange(n) * 2.0, np.full(n, 9.0), np.arange(n) * 0.5], axis=1)
    path = tmp_path / "run.npy"
    np.save(path, xyz)
    t = import_npy(path, width_m=10.0)
    assert t.length_m == pytest.approx(np.hypot(2.0, 0.5) * (n - 1), rel=1e-6)
    assert t.width_left[30] == 10.0
    np.save(path, xyz[:, :2])
    with pytest.raises(MapError, match="N x 3"):
        import_npy(path)


def test_npz_round_trip(tmp_path):
    t = builtin_map("chicanes")
    path = save_map(t, tmp_path / "chicanes.npz")
    u = load_map(path)
    assert u.fingerprint() == t.fingerprint() and u.name == "chicanes"
    np.testing.assert_allclose(u.checkpoints_s, t.checkpoints_s)


def test_npz_that_is_not_a_map(tmp_path):
    path = tmp_path / "other.npz"
    np.savez(path, a=np.zeros(3))
    with pytest.raises(MapError, match="not a trackmind map"):
        load_map(path)
    path.write_bytes(b"garbage")
    with pytest.raises(MapError, match="not a readable .npz map"):
        load_map(path)


@pytest.mark.parametrize(
    "text, msg",
    [
        ("0,0,4\n1,0,4\n", "line 1: expected 4 or 5 columns"),
        ("x,y,wr,wl\n0,0,4,4\n1,0\n", "line 3: expected 4 or 5 columns .*got 2$"),
        ("0,0,4,4\n1,0,4,4\nnan,0,4,4\n", "line 3: NaN or inf"),
        ("0,0,4,4\n1,zero,4,4\n", "line 2: 'zero' is not a number"),
        ("# nothing here\n\n", "no rows of x,y,width_right,width_left"),
    ],
)
def test_csv_problems_name_the_line(tmp_path, text, msg):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(MapError, match="bad.csv: " + msg):
        import_csv(path)
