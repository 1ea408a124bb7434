"""Command-line parsing for the scripts: every bad flag ends in one line and exit status 2.

argparse prints its usage line and then the error; a user needs the error, and `--help`
still shows the usage.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from typing import NoReturn


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line: `<script>: <flag>: <problem>`."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message}", file=sys.stderr)
        sys.exit(2)


def _number(kind: type, low: float | None, high: float | None, what: str) -> Callable:
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
        out = value != value  # NaN
        out = out or (low is not None and value < low) or (high is not None and value > high)
        if out:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in some messages
    return parse


def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer >= low."""
    return _number(int, low, None, f"an integer >= {low}")


def positive_float() -> Callable[[str], float]:
    """An argparse type: a number > 0 (NaN and infinity refused)."""
    parse = _number(float, None, None, "a number > 0")

    def positive(text: str) -> float:
        value = parse(text)
        if not (0.0 < value < float("inf")):
            raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
        return value

    return positive


def name_equals_number(text: str) -> tuple[str, float]:
    """An argparse type: NAME=VALUE with a finite number, as (NAME, VALUE)."""
    name, sep, value = text.partition("=")
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if not sep or not name or not math.isfinite(number):
        raise argparse.ArgumentTypeError(f"must be NAME=NUMBER, got {text!r}")
    return name, number


def share() -> Callable[[str], float]:
    """An argparse type: a share in (0, 1]."""
    parse = positive_float()

    def in_unit(text: str) -> float:
        value = parse(text)
        if value > 1.0:
            raise argparse.ArgumentTypeError(f"must be a share in (0, 1], got {text!r}")
        return value

    return in_unit


def float_in(low: float, high: float) -> Callable[[str], float]:
    """An argparse type: a number in [low, high]."""
    return _number(float, low, high, f"a number in [{low:g}, {high:g}]")
