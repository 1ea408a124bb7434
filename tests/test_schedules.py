"""Schedules: values by hand for the three kinds, the edges, and bad points."""

import math

import pytest

from trackmind.errors import ConfigError
from trackmind.schedules import Schedule, schedule_value

EPS = [(0, 1.0), (300_000, 0.1), (3_000_000, 0.03)]


def test_linear_by_hand():
    assert schedule_value(EPS, 150_000, "linear") == pytest.approx(0.55)  # halfway 1 -> 0.1
    assert schedule_value(EPS, 300_000, "linear") == pytest.approx(0.1)
    # 1,650,000 is halfway from 300k to 3M: (0.1 + 0.03) / 2
    assert schedule_value(EPS, 1_650_000, "linear") == pytest.approx(0.065)


def test_exponential_is_geometric():
    lr = [(0, 1e-3), (100, 1e-5)]
    assert schedule_value(lr, 50, "exponential") == pytest.approx(1e-4)  # sqrt(1e-3 * 1e-5)
    assert schedule_value(lr, 25, "exponential") == pytest.approx(10**-3.5)


def test_staircase_holds_the_last_reached_value():
    pts = [(0, 1.0), (100, 0.5), (200, 0.25)]
    assert schedule_value(pts, 99.9, "staircase") == 1.0
    assert schedule_value(pts, 100, "staircase") == 0.5
    assert schedule_value(pts, 199, "staircase") == 0.5
    assert schedule_value(pts, 200, "staircase") == 0.25


@pytest.mark.parametrize("kind", ["linear", "exponential", "staircase"])
def test_edges_clamp_to_first_and_last(kind):
    pts = [(1000, 2.0), (2000, 4.0)]
    assert schedule_value(pts, 0, kind) == 2.0
    assert schedule_value(pts, 1000, kind) == 2.0
    assert schedule_value(pts, 2000, kind) == 4.0
    assert schedule_value(pts, 1e12, kind) == 4.0
    assert schedule_value([(0, 7.0)], 123, kind) == 7.0


def test_schedule_class_from_config():
    s = Schedule.from_config([[0, 1.0], [300_000, 0.1], [3_000_000, 0.03]], "linear")
    assert s(150_000) == pytest.approx(0.55)
    assert Schedule.from_config(0.5)(1e9) == 0.5  # a bare number is a constant


@pytest.mark.parametrize(
    ("points", "kind", "fragment"),
    [
        ([], "linear", "at least one"),
        ([[100, 1.0], [50, 0.5]], "linear", "increase strictly"),
        ([[0, 1.0], [0, 0.5]], "linear", "increase strictly"),
        ([[0, 1.0], [10, 0.0]], "exponential", "positive values"),
        ([[0, 1.0, 3]], "linear", "[frames, value] pairs"),
        ("fast", "linear", "[frames, value] pairs"),
        ([[0, math.nan]], "linear", "not finite"),
        ([[-5, 1.0]], "linear", "negative frames"),
    ],
)
def test_bad_points_name_the_key(points, kind, fragment):
    with pytest.raises(ConfigError, match=r"^exploration\.epsilon: ") as e:
        Schedule.from_config(points, kind, key="exploration.epsilon")
    assert e.value.key == "exploration.epsilon"
    assert fragment in str(e.value)


def test_bad_kind_names_the_kind_key():
    with pytest.raises(ConfigError) as e:
        Schedule.from_config([[0, 1.0]], "cosine", key="trainer.lr")
    assert e.value.key == "trainer.lr_kind"
