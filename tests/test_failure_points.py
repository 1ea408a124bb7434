"""scripts/failure_points.py: braking zones of a speed profile, checked by hand."""

import json

import numpy as np
from test_scripts import load_script

fp = load_script("failure_points")
braking_zones, outside, stop_rates, stop_zone = (
    fp.braking_zones,
    fp.outside,
    fp.stop_rates,
    fp.stop_zone,
)


def _profile():
    """A 10 m grid: 50 m/s to 100 m, braking to 20 m/s at 200 m, back to 50 at 300 m;
    then a gentle dip to 47 m/s at 400 m (less than 5 m/s: not a zone). Left at 190-200 m
    (radius 20 m), right at 210 m (25 m): a chicane. Half-width 6 m, 4 m at 200 m."""
    s = np.arange(0.0, 510.0, 10.0)
    speed = np.interp(s, [0, 100, 200, 300, 400, 500], [50, 50, 20, 50, 47, 50])
    kappa = np.zeros_like(s)
    kappa[19:21] = 1 / 20
    kappa[21] = -1 / 25
    half = np.full_like(s, 6.0)
    half[20] = 4.0
    return s, speed, kappa, half


def test_a_braking_zone_by_hand():
    (zone,) = braking_zones(*_profile())
    assert zone["s"] == 200.0
    assert zone["start_speed"] == 50.0 and zone["corner_speed"] == 20.0 and zone["drop"] == 30.0
    assert zone["braking_m"] == 100.0  # from the end of the 50 m/s plateau, not its start
    assert zone["radius"] == 20.0  # the tightest within 25 m
    assert zone["half_width"] == 4.0
    assert zone["straight_m"] == 100.0  # 0-100 m, straight (kappa 0)
    assert zone["chicane"]


def test_the_stop_zone_and_what_lies_outside_training():
    zones = [{"s": 200.0}, {"s": 600.0}]
    assert stop_zone(zones, 150.0) == {"s": 200.0}
    assert stop_zone(zones, 210.0) == {"s": 200.0}  # 10 m past its minimum: still that zone
    assert stop_zone(zones, 250.0) == {"s": 600.0}
    assert stop_zone(zones, 700.0) is None
    (zone,) = braking_zones(*_profile())
    extremes = {
        "start_speed": 60.0,  # harder above: 50 is inside
        "drop": 25.0,  # 30 is outside
        "braking_m": 500.0,
        "radius": 25.0,  # harder below: 20 is outside
        "half_width": 7.5,  # 4 is outside
        "straight_m": 400.0,
    }
    assert outside(zone, extremes) == ["drop", "radius", "half_width"]


def test_stop_rates_count_the_zones_met():
    chicane = {"chicane": True, "half_width": 4.0, "radius": 20.0, "straight_m": 800.0}
    # 180 m of straight, then 150 m of braking: 330 m after the last bend
    braked = {"chicane": True, "half_width": 6.0, "radius": 15.0, "straight_m": 180.0}
    short = {"chicane": True, "half_width": 6.0, "radius": 20.0, "straight_m": 100.0}
    plain = {"chicane": False, "half_width": 8.0, "radius": 30.0, "straight_m": 500.0}
    hairpin = {"chicane": False, "half_width": 8.0, "radius": 9.0, "straight_m": 50.0}
    for zone, braking in ((chicane, 100), (braked, 150), (short, 80), (plain, 200), (hairpin, 60)):
        zone["braking_m"] = float(braking)
    rates = stop_rates(
        [chicane, hairpin],
        [chicane, plain, plain, hairpin, short, braked],
        trained_width=7.5,
        trained_radius=12,
    )
    assert rates["radius under 12.0 m"] == "1 / 2 (50.0%)"
    assert rates["radius 12.0 m or more"] == "1 / 6 (16.7%)"
    assert rates["chicane"] == "1 / 4 (25.0%)"
    assert rates["not a chicane"] == "1 / 4 (25.0%)"
    assert rates["chicane, 300 m or more after the last bend"] == "1 / 3 (33.3%)"
    assert rates["chicane, under 300 m after the last bend"] == "0 / 1 (0.0%)"
    assert rates["half-width under 5 m"] == "1 / 2 (50.0%)"
    assert rates["chicane, half-width under 7.5 m"] == "1 / 4 (25.0%)"
    assert rates["chicane, half-width 7.5 m or more"] == "0 / 0"


def test_results_of_several_evaluations_are_pooled(tmp_path, capsys):
    """Two evaluation files of the same map: one race finished, one stopped at 40%; the
    pooled table has both rows, and the stop counts as one of the zones met twice."""
    files = []
    for i, (rate, progress) in enumerate([(1.0, 1.0), (0.0, 0.4)]):
        result = {"map": "procedural:1", "finish_rate": rate, "progress": progress}
        files.append(tmp_path / f"eval{i}.json")
        files[-1].write_text(json.dumps({"checkpoint": f"c{i}", "maps": [result]}))
    out = tmp_path / "points.json"
    argv = [*map(str, files), "--training", "procedural:2", "--json", str(out)]
    assert fp.main(argv) == 0
    table = json.loads(out.read_text())
    assert [row[1] for row in table["rows"]] == ["finished", "40%"]
    rates = table["medians"]["stops per zone met"]
    counts = [
        [int(x) for x in rates[k].split(" (")[0].split(" / ")] for k in ("chicane", "not a chicane")
    ]
    assert sum(c[0] for c in counts) == 1 and sum(c[1] for c in counts) > 2
