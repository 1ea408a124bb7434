"""scripts/lap_sections.py: where a race loses its time to the reference, checked by hand."""

import math

import numpy as np
from lap_sections import (
    crossing_times,
    pedal_counts,
    reference_clock,
    section_losses,
    sections,
    span_speeds,
)
from test_acting import _notes_table_of


def test_reference_clock_takes_each_step_at_its_mean_speed():
    # steps of 10 m and 20 m: at (10 + 30) / 2 = 20 m/s and (30 + 10) / 2 = 20 m/s
    line = np.array([[0.0, 0.0], [10.0, 0.0], [30.0, 0.0]])
    clock = reference_clock(np.array([0.0, 10.0, 30.0]), line, np.array([10.0, 30.0, 10.0]))
    assert np.allclose(clock, [0.0, 0.5, 1.5])


def test_crossing_times_interpolate_and_take_the_first_crossing():
    progress = np.array([0.0, 10.0, 20.0, 30.0])
    clock = np.array([0.0, 1.0, 2.0, 3.0])
    got = crossing_times(progress, clock, np.array([0.0, 5.0, 25.0, 40.0]))
    assert np.allclose(got[:3], [0.0, 0.5, 2.5]) and math.isnan(got[3])
    # a car thrown back by a wall: 12 m is first passed between 5 m (t=2) and 15 m (t=3)
    back = crossing_times(np.array([0.0, 10.0, 5.0, 15.0]), clock, np.array([12.0]))
    assert np.allclose(back, [2.7])
    # a stop: the clock of the first sample at the mark, not of the last
    stop = crossing_times(np.array([0.0, 10.0, 10.0]), np.array([0.0, 1.0, 5.0]), [10.0])
    assert np.allclose(stop, [1.0])


def test_section_losses_difference_the_clock_gaps():
    car = np.array([0.0, 5.5, 12.0, 20.0])
    ref = np.array([0.0, 5.0, 11.0, 18.5])
    # gaps 0, 0.5, 1.0, 1.5: each section lost 0.5 s
    assert np.allclose(section_losses(car, ref), [0.5, 0.5, 0.5])


def test_span_speeds_top_between_ends_and_low_near_the_corner():
    progress = np.arange(0.0, 200.0, 10.0)
    speed = np.interp(progress, [0, 100, 150, 190], [30, 60, 20, 40])
    top, low = span_speeds(progress, speed, 0.0, 150.0, 150.0)
    assert (top, low) == (60.0, 20.0)
    assert all(math.isnan(x) for x in span_speeds(progress, speed, 500.0, 600.0, 600.0))


def test_pedal_counts_put_any_brake_first_then_throttle_then_coast():
    # accel, accel+left, nothing, left, brake, accel+brake, accel+brake+right
    assert pedal_counts(np.array([0, 1, 3, 4, 6, 9, 11])) == (2, 2, 3)
    assert pedal_counts(np.array([], dtype=np.int64)) == (0, 0, 0)


def test_sections_run_from_the_start_through_each_zone_to_the_finish():
    assert list(sections([{"s": 120.0}, {"s": 300.0}], 500.0)) == [0.0, 120.0, 300.0, 500.0]


def test_lap_sections_races_a_checkpoint_and_writes_its_notes_table(tmp_path, capsys):
    import lap_sections as script

    table = _notes_table_of(script, tmp_path, "technical")
    assert len(table["columns"]) == 3 and table["columns"][2].startswith("untrained (")
    assert table["columns"][2].endswith("throttle/coast/brake steps")
    *zones, lap = table["rows"]
    assert zones[-1][0].startswith("finish, ") and lap[0] == "lap"
    # the reference's sections add up to its lap, technical's 68.7 s
    ref = sum(float(r[1].split(",")[0]) for r in zones)
    assert abs(ref - float(lap[1])) < 0.05 and 68.0 < float(lap[1]) < 69.5
    assert capsys.readouterr().out.startswith("section, to (m) | ")
