"""Hydra's sweep syntax -> Optuna distributions, and sampled values -> override text.

    choice(a, b, c)  a, b, c         CategoricalDistribution([a, b, c])
    interval(lo, hi)                 FloatDistribution(lo, hi)
    tag(log, interval(lo, hi))       FloatDistribution(lo, hi, log=True)
    tag(int, interval(lo, hi))       IntDistribution(lo, hi)   (tag(int, log, ...) for log)
    range(start, stop, step)         IntDistribution over Hydra's values (stop excluded),
                                     FloatDistribution(step=...) when a bound or step is a float
    tag(log, range(lo, hi))          IntDistribution(lo, hi - 1, log=True) (step 1)

Anything else (`key=value`, `+key=value`, `~key`) is a fixed override passed to every trial.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, RangeSweep
from hydra.errors import CompactHydraException
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)


class SweeperError(CompactHydraException):
    """A mistake in the sweeper's settings or search space: Hydra prints the message alone."""


_SCALARS = (str, int, float, bool)


def parse_search_space(
    params: Mapping[str, Any] | None, arguments: Sequence[str] = ()
) -> tuple[dict[str, BaseDistribution], list[str]]:
    """(distributions by parameter name, fixed overrides) from `hydra.sweeper.params` and the
    command line's overrides (which win for a key both give). A parameter's name is its key
    as written (`learner.lr`, `+extra`): the trial's override is `name=value`."""
    entries = [
        (
            f"{key}={value if isinstance(value, str) else format_value(value)}",
            "hydra.sweeper.params",
        )
        for key, value in _flatten(params or {})
    ]
    entries += [(arg, "command line") for arg in arguments]
    parser = OverridesParser.create()
    space: dict[str, BaseDistribution] = {}
    fixed: dict[str, str] = {}
    names: dict[str, str] = {}  # key identity -> parameter name
    for text, where in entries:
        override = _parse(parser, text, where)
        ident = override.key_or_group + (f"@{override.package}" if override.package else "")
        old = names.pop(ident, None)
        space.pop(old or "", None)
        fixed.pop(ident, None)
        if override.is_sweep_override():
            name = override.get_key_element()
            try:
                space[name] = to_distribution(override.value())
            except ValueError as e:
                raise SweeperError(f"{where}: {text}: {e}") from None
            names[ident] = name
        else:
            fixed[ident] = text
    return space, list(fixed.values())


def to_distribution(sweep: Any) -> BaseDistribution:
    """The Optuna distribution of a parsed Hydra sweep (ValueError with the reason if none)."""
    tags = set(getattr(sweep, "tags", None) or ())
    if isinstance(sweep, ChoiceSweep):
        _only_tags(tags, set(), "choice()")
        values = list(sweep.list)
        for v in values:
            if v is not None and not isinstance(v, _SCALARS):
                raise ValueError(f"choice() values must be numbers, strings or booleans, got {v!r}")
        if not values:
            raise ValueError("choice() needs at least one value")
        return CategoricalDistribution(values)
    if isinstance(sweep, IntervalSweep):
        _only_tags(tags, {"log", "int"}, "interval()")
        low, high, log = sweep.start, sweep.end, "log" in tags
        if low > high:
            raise ValueError(f"interval(): the low bound {low:g} is above the high bound {high:g}")
        if log and low <= 0:
            raise ValueError(f"tag(log, interval()): bounds must be > 0, got {low:g}")
        if "int" in tags:
            if low != int(low) or high != int(high):
                raise ValueError(
                    f"tag(int, interval()): bounds must be integers: {low:g}, {high:g}"
                )
            return IntDistribution(int(low), int(high), log=log)
        return FloatDistribution(float(low), float(high), log=log)
    if isinstance(sweep, RangeSweep):
        _only_tags(tags, {"log"}, "range()")
        return _range_distribution(sweep.start, sweep.stop, sweep.step, "log" in tags)
    kind = type(sweep).__name__
    raise ValueError(f"{kind} cannot be searched by Optuna: use choice(), interval() or range()")


def _range_distribution(start: Any, stop: Any, step: Any, log: bool) -> BaseDistribution:
    if step == 0:
        raise ValueError("range(): step must not be 0")
    if all(isinstance(v, int) and not isinstance(v, bool) for v in (start, stop, step)):
        values = range(start, stop, step)
        if len(values) == 0:
            raise ValueError(f"range({start}, {stop}, {step}) has no values")
        if log and abs(step) != 1:
            raise ValueError("tag(log, range()): the step must be 1")
        if log and min(values) <= 0:
            raise ValueError(f"tag(log, range()): values must be > 0, got {min(values)}")
        return IntDistribution(min(values), max(values), log=log, step=abs(step))
    if log:
        raise ValueError("tag(log, range()) needs integers: use tag(log, interval(a, b))")
    n = math.ceil((stop - start) / step - 1e-9)  # Hydra's float range: stop excluded
    if n <= 0:
        raise ValueError(f"range({start}, {stop}, {step}) has no values")
    ends = (start, start + (n - 1) * step)
    low, high = (float(f"{v:.12g}") for v in (min(ends), max(ends)))
    return FloatDistribution(low, high, step=float(abs(step)))


def _only_tags(tags: set[str], allowed: set[str], what: str) -> None:
    unknown = sorted(tags - allowed)
    if unknown:
        takes = f"it takes {' and '.join(sorted(allowed))}" if allowed else "it takes no tag"
        raise ValueError(f"tag {', '.join(unknown)} does not apply to {what} ({takes})")


def format_value(value: Any) -> str:
    """Override text for a value: Hydra parses `key=<text>` back to the same value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)  # 1e-05, inf, nan: Hydra reads them back as floats
    if isinstance(value, Mapping):
        return (
            "{"
            + ",".join(f"{format_value(str(k))}:{format_value(v)}" for k, v in value.items())
            + "}"
        )
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    text = str(value)
    if _plain_string(text):
        return text
    # a quoted string: escape the quotes and the backslashes that precede a quote or the end
    body = re.sub(r"(\\*)('|$)", lambda m: m.group(1) * 2 + ("\\'" if m.group(2) else ""), text)
    return f"'{body}'"


def _plain_string(text: str) -> bool:
    try:
        override = OverridesParser.create().parse_overrides([f"k={text}"])[0]
    except Exception:
        return False
    return not override.is_sweep_override() and override.value() == text


def _parse(parser: OverridesParser, text: str, where: str) -> Override:
    try:
        return parser.parse_overrides([text])[0]
    except Exception as e:
        lines = [x.strip() for x in str(e).splitlines() if x.strip()]
        lines = [x for x in lines if not x.startswith("See https://")]
        reason = lines[-1] if lines else type(e).__name__
        raise SweeperError(f"{where}: cannot parse {text!r}: {reason}") from None


def _flatten(params: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """`{learner: {kappa: ...}}` (from hydra.sweeper.params.learner.kappa=...) as learner.kappa."""
    for key, value in params.items():
        if isinstance(value, Mapping) and value:
            yield from _flatten(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value
