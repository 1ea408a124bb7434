"""Learning benchmark: train a fixed budget per map with the defaults, table the results.

    python scripts/bench_learning.py --minutes 30                       # the six built-in maps
    python scripts/bench_learning.py --minutes 10 --maps hairpins speedway
    python scripts/bench_learning.py --minutes 60 --maps builtin_cycle  # one row per map
    python scripts/bench_learning.py --minutes 30 --no-page             # rows only
    python scripts/bench_learning.py --minutes 10 -- learner.replay_ratio=16   # extra overrides
    python scripts/bench_learning.py --table-only        # the page's tables from the results
    python scripts/bench_learning.py --minutes 30 --maps technical --seeds 0 1 2  # the scatter
    python scripts/bench_learning.py --defaults-were learner.target_tau=0.02 --defaults-are \
        learner.target_tau=0.005    # after a change of defaults: re-key the saved rows
    python scripts/bench_learning.py --defaults-of hairpins --defaults-were \
        map.cycle.0.demos=null --defaults-are map.cycle.0.demos=0.25   # one map's own default

Each item of --maps is a conf/map option (every built-in map has one); each runs
`scripts/train.py map=<option> trainer.max_time_s=<minutes * 60>`, one run at a time, with
the defaults and the overrides after `--`. A row is read back from the run's MLflow record
(its summary.json artifact: every greedy race with its wall time) and saved at once in the
results file (docs/bench_learning.json, committed with the table), so an interrupted
benchmark resumes at the next missing row, in a later session too (--force reruns).
The table of every saved row (the defaults first, then the rows with overrides) goes into
docs/benchmarks.md between the bench-learning markers, with the dates and machine.

A row is keyed by its map option, budget and overrides, which mean the settings only under
the defaults it ran with. When the defaults change, `--defaults-were` and `--defaults-are`
restate every saved row for the new ones: a defaults row gets the old values as overrides,
an arm that became the defaults becomes a defaults row, and each moved row keeps the
overrides it ran with in `overrides_as_run`. A map option's own default (a key of
conf/map/<option>.yaml) is restated for that option's rows alone, with `--defaults-of`.

Columns: minutes to the first greedy finish; greedy finish rate and median ratio (finished
greedy races, race time / reference time) in the last 10 minutes (the last third of shorter
budgets); best greedy ratio. Targets (docs/design): first finish <= 5 min, >= 90% finished
and median <= 1.15x in the last 10 minutes.

Single runs of a long map scatter widely between seeds, so a lever is ranked on several:
`--seeds` runs each map once per seed (`seed=<s>`; the config's own seed adds no override,
so it is the defaults' row), and the page gets a second table, the medians over the seeds of
every row measured with more than one.

A third table gives each run's learning curve: the share of greedy races finished in each
tenth of the budget (3-minute windows at 30 minutes), which shows whether a run was still
climbing when it stopped and how far it swings between windows. Its last column is the
lag-1 autocorrelation of the closing window's greedy race outcomes in time order: about 0
when races are independent, higher when the policy churns between weight versions. The
next is the value drift: the closing window's median `train/q_mean` less the lowest
minute's median of the run. A mini-race's Q is a sum over a few seconds of driving, so it
settles; a drift of several reward units says the values diverged (the bootstrapped targets
chase the network's own growing estimates) even where the greedy argmax still drives. Rows
saved before these existed get them from MLflow when the run is still in the tracking store.

Each row also counts its greedy races per 100k actions collected (`action_bins`, by the
`frames` counter at each race's end). A machine whose speed swings by a third between runs
gives one arm more experience than its control in the same minutes, so a pairs table
(scripts/make_docs.py, `"equal_actions": true`) also compares the two over the same actions.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import date
from pathlib import Path

from trackmind.cli import OneLineParser, int_at_least, positive_float

ROOT = Path(__file__).resolve().parents[1]
MAP_CONF = ROOT / "conf" / "map"
BUILTIN = ["starter", "hairpins", "chicanes", "flow", "speedway", "technical"]
BEGIN, END = "<!-- bench-learning:begin -->", "<!-- bench-learning:end -->"
COMMAND = "python scripts/bench_learning.py --minutes <m> --maps <option> [-- <overrides>]"
TARGETS = {"first_finish_min": 5.0, "finish_rate": 0.90, "median_ratio": 1.15}
CYCLE_FINISH_RATE = 0.80  # a map's target inside a cycle of maps (60 minutes for the six)
START_SHARE = 0.05  # a greedy race that ended within the first 5% of the map stalled at the start
CURVE_WINDOWS = 10  # the learning curve's windows: tenths of the budget
NEAR_RATIO = 1.05  # "regular, near the reference": the second milestone Linesight reports
SAMPLES_PER_S = "throughput/samples_per_s"  # the learner's rate, logged at a steady cadence
Q_MEAN = "train/q_mean"
DRIFT_BIN_S = 60.0  # the value drift's floor: the lowest median over one-minute bins
ACTION_BIN = 100_000  # actions collected (all cars) per bin of the equal-actions counts
EQUAL_ACTIONS_SHARE = 1 / 3  # the equal-actions window: the last third of the shared actions


def window_s(minutes: float) -> float:
    """The closing window the rates are read over: 10 minutes, a third of shorter budgets."""
    return 60.0 * min(10.0, minutes / 3.0)


def actions_until(history: list[dict], reference_ms: float, ratio: float | None) -> int | None:
    """Actions collected (all cars, the `frames` counter) when the first greedy race
    finished, within `ratio` x the reference if given; None if none did (or rows saved
    before races recorded the counter)."""
    ok = [
        h["frames"]
        for h in history
        if h["time_ms"] is not None
        and h.get("frames") is not None
        and (ratio is None or h["time_ms"] <= ratio * reference_ms)
    ]
    return min(ok) if ok else None


def summarise(history: list[dict], reference_ms: float, minutes: float, end_s: float) -> dict:
    """One map's figures from its greedy races ({wall_s, time_ms or None, frames} each).

    `end_s`: when the run ended (seconds, the clock of wall_s); the closing window is
    window_s(minutes) long and ends there.
    """
    finished = [h for h in history if h["time_ms"] is not None]
    first = min((h["wall_s"] for h in finished), default=None)
    near = [h["wall_s"] for h in finished if h["time_ms"] <= NEAR_RATIO * reference_ms]
    start = end_s - window_s(minutes)
    late = late_races(history, start)
    late_done = [h["time_ms"] / reference_ms for h in late if h["time_ms"] is not None]
    best = min((h["time_ms"] for h in finished), default=None)
    # unfinished late races: where they ended (share of the map), and how many never left the
    # start (rows measured before races recorded their progress have no such figures)
    lost = [h.get("progress") for h in late if h["time_ms"] is None]
    lost = [p for p in lost if p is not None]
    covered = [1.0 if h["time_ms"] is not None else h.get("progress") for h in late]
    covered = [p for p in covered if p is not None]
    return {
        "greedy_races": len(history),
        "first_finish_min": None if first is None else first / 60.0,
        "first_finish_actions": actions_until(history, reference_ms, None),
        "near_min": min(near) / 60.0 if near else None,  # first finish within NEAR_RATIO
        "near_actions": actions_until(history, reference_ms, NEAR_RATIO),
        "late_races": len(late),
        "finish_rate": len(late_done) / len(late) if late else 0.0,
        "median_ratio": statistics.median(late_done) if late_done else None,
        "best_ratio": None if best is None else best / reference_ms,
        "lost_median_progress": statistics.median(lost) if lost else None,
        "lost_at_start": sum(p < START_SHARE for p in lost) / len(late) if lost else None,
        # the mean share of the map the late greedy races covered (a finish covers all of it):
        # a graded figure for short screening runs, where few races finish yet
        "late_progress": statistics.fmean(covered) if covered else None,
        "curve": finish_curve(history, minutes),
        "actions": actions_collected(history),
        "action_bins": action_bins(history),
        "late_autocorr": outcome_autocorrelation([h["time_ms"] is not None for h in late]),
    }


def finish_curve(
    history: list[dict], minutes: float, windows: int = CURVE_WINDOWS
) -> list[float | None]:
    """Share of greedy races finished in each of `windows` equal parts of the budget (None
    where no greedy race ended); a race ending after the budget counts in the last part."""
    span = 60.0 * minutes / windows
    done, seen = [0] * windows, [0] * windows
    for h in history:
        i = min(int(h["wall_s"] // span), windows - 1)
        seen[i] += 1
        done[i] += h["time_ms"] is not None
    return [d / n if n else None for d, n in zip(done, seen)]


def actions_collected(history: list[dict]) -> int | None:
    """The `frames` counter (actions collected, all cars) at the last greedy race's end."""
    return max((h["frames"] for h in history if h.get("frames") is not None), default=None)


def action_bins(history: list[dict], size: int = ACTION_BIN) -> list[list[int]]:
    """[finished, ended] greedy races per bin of `size` actions collected, by the `frames`
    counter at each race's end: how a run learned per action, not per minute, so that runs
    on a machine whose speed swings compare at equal experience. [] without the counter."""
    last = actions_collected(history)
    if last is None:
        return []
    bins = [[0, 0] for _ in range(last // size + 1)]
    for h in history:
        if h.get("frames") is None:
            continue
        b = bins[h["frames"] // size]
        b[0] += h["time_ms"] is not None
        b[1] += 1
    return bins


def equal_actions_window(
    rows: Sequence[dict], share: float = EQUAL_ACTIONS_SHARE
) -> tuple[int, int] | None:
    """The bins [lo, hi) every row reached: the last `share` (at least one bin) of the whole
    bins of the row that collected the fewest actions (a row's last bin is the partial one
    its count stopped in). None when a row has no counts or none has a whole bin."""
    if not rows or any(not r.get("action_bins") for r in rows):
        return None
    hi = min(len(r["action_bins"]) for r in rows) - 1
    if hi < 1:
        return None
    return hi - max(1, round(share * hi)), hi


def rate_in_bins(bins: Sequence[Sequence[int]], lo: int, hi: int) -> float | None:
    """The share of greedy races finished among those that ended in bins [lo, hi); None if
    none did."""
    done = sum(b[0] for b in bins[lo:hi])
    seen = sum(b[1] for b in bins[lo:hi])
    return done / seen if seen else None


def outcome_autocorrelation(finished: Sequence[bool], lag: int = 1) -> float | None:
    """Autocorrelation at `lag` of greedy races' outcomes in time order (1 finished, 0 not).

    Independent races give about 0 (+- 1/sqrt(n)); a policy that churns between weight
    versions makes races close in time succeed or fail together, so the figure rises. None
    with fewer than lag + 2 races or one outcome only.
    """
    x = [1.0 if f else 0.0 for f in finished]
    if len(x) < lag + 2:
        return None
    mean = statistics.fmean(x)
    var = sum((v - mean) ** 2 for v in x)
    if var == 0.0:
        return None
    cov = sum((x[i] - mean) * (x[i + lag] - mean) for i in range(len(x) - lag))
    return cov / var


def value_drift(points: Sequence[tuple[float, float]], start_s: float) -> float | None:
    """Median of the values from start_s on, less the lowest median of DRIFT_BIN_S bins.

    `points`: (seconds since the run's first point, value) of `train/q_mean`. About 0 for a
    run whose values settled at their lowest, a few tenths for one still moving, several
    units for one that diverged. None without a point in the closing window.
    """
    late = [v for t, v in points if t >= start_s]
    if not late:
        return None
    bins: dict[int, list[float]] = {}
    for t, v in points:
        bins.setdefault(int(t // DRIFT_BIN_S), []).append(v)
    return statistics.median(late) - min(statistics.median(b) for b in bins.values())


def counter_rate(points: Sequence[tuple[float, float]]) -> float | None:
    """The mean rate of a counter that only grows: (last value - first) / (last t - first t).

    `points`: (seconds, value). The collectors' logged rate counts transitions as races and
    chunks arrive, so with long chunks many logging intervals read 0 and its median is no
    rate at all; the slope of the `frames` counter (actions collected, all cars) is. None
    under two points or a zero span.
    """
    if len(points) < 2:
        return None
    (t0, v0), (t1, v1) = min(points), max(points)
    return (v1 - v0) / (t1 - t0) if t1 > t0 else None


def late_races(history: list[dict], start_s: float) -> list[dict]:
    """The greedy races ending from start_s on, in time order."""
    return sorted((h for h in history if h["wall_s"] >= start_s), key=lambda h: h["wall_s"])


def late_outcomes(history: list[dict], start_s: float) -> list[bool]:
    """Finished or not, in time order, for the greedy races ending from start_s on."""
    return [h["time_ms"] is not None for h in late_races(history, start_s)]


def without_seed(overrides: str) -> str:
    """A row's overrides less its `seed=` one: the lever the seeds repeat."""
    return " ".join(t for t in overrides.split() if not t.startswith("seed="))


def override_pairs(tokens: Sequence[str], what: str) -> dict[str, str]:
    """`key=value` override tokens as a dict, in their order; a token without `=` is an
    error naming `what` (the option it came from)."""
    pairs: dict[str, str] = {}
    for t in tokens:
        key, eq, value = t.partition("=")
        if not eq or not key:
            raise ValueError(f"{what}: {t!r} is not key=value")
        pairs[key] = value
    return pairs


def rebased_tag(tag: str, was: dict[str, str], now: dict[str, str]) -> str:
    """A row's overrides restated for new defaults: the run's settings (the defaults it ran
    under, `was`, with its overrides on top) less what the defaults are `now`. The old
    defaults a row kept come first, then its own overrides that still differ; `seed=` stays
    last, so the seeds of one lever still group."""
    tokens = tag.split()
    # Hydra's deletions (`~key`, `~key=value`) stay as they ran; a deleted key gains no default
    deleted = {t[1:].partition("=")[0] for t in tokens if t.startswith("~")}
    own = override_pairs([t for t in tokens if not t.startswith("~")], "overrides")
    kept = [f"{k}={v}" for k, v in was.items() if k not in {*own, *deleted} and v != now[k]]
    for t in tokens:
        key, _, value = t.partition("=")
        if t.startswith("~") or now.get(key) != value:
            kept.append(t)
    seeds = [t for t in kept if t.startswith("seed=")]
    return " ".join([t for t in kept if not t.startswith("seed=")] + seeds)


def rebase(
    saved: dict[str, list[dict]],
    was: dict[str, str],
    now: dict[str, str],
    options: Sequence[str] | None = None,
) -> dict:
    """The saved rows keyed for new defaults (`was` -> `now`, the same keys): a row run
    under the old defaults with no override becomes `k=<old> ...`, a row whose overrides
    were the new defaults becomes a defaults row. Each moved row keeps `overrides_as_run`.
    `options`: the map options whose defaults changed (None: every one); the others' rows
    keep their keys. Two rows landing on one key (the same settings run twice) are an error
    naming both."""
    if set(was) != set(now):
        raise ValueError(f"the changed defaults differ: {sorted(set(was) ^ set(now))}")
    out: dict[str, list[dict]] = {}
    for key, rows in saved.items():
        option, minutes, tag = key.split("|", 2)
        mine = options is None or option in options
        new_tag = rebased_tag(tag, was, now) if mine else tag
        new_key = f"{option}|{minutes}|{new_tag}"
        if new_key in out:
            raise ValueError(f"rows {key!r} and another both become {new_key!r}")
        moved = []
        for r in rows:
            r = dict(r)
            if new_tag != tag:
                r.setdefault("overrides_as_run", r.get("overrides", ""))
                r["overrides"] = new_tag
            moved.append(r)
        out[new_key] = moved
    return out


def defaults_problem(was: dict[str, str], now: dict[str, str], config) -> str | None:
    """One line when the stated change is not the config's: a `now` value that is not what
    the config composes to, or a `was` value that still is (the two swapped)."""
    from omegaconf import OmegaConf

    def plain(node):
        return OmegaConf.to_container(node) if OmegaConf.is_config(node) else node

    def parsed(text: str):
        return plain(OmegaConf.create(f"x: {text}")["x"])

    missing = object()
    for key, text in now.items():
        have = OmegaConf.select(config, key, default=missing)
        if have is missing:
            return f"--defaults-are: no config key {key!r}"
        if parsed(text) != plain(have):
            return f"--defaults-are: {key}={text}, but the config's default is {plain(have)!r}"
        if parsed(was[key]) == plain(have):
            return f"--defaults-were: {key}={was[key]} is still the config's default"
    return None


def seed_groups(rows: list[dict]) -> list[dict]:
    """Rows of the same map, budget and lever over several seeds, summarised: the medians of
    first finish (a run that never finished counts as the whole budget), finish rate and
    median ratio, the spread of the finish rate, and how many of the runs met the targets."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        key = (r["map"], r["option"], r["minutes"], without_seed(r.get("overrides", "")))
        groups.setdefault(key, []).append(r)
    out = []
    for (name, option, minutes, lever), rs in groups.items():
        if len(rs) < 2:
            continue
        rates = [r["finish_rate"] for r in rs]
        out.append(
            {
                "map": name,
                "option": option,
                "minutes": minutes,
                "overrides": lever,
                "seeds": len(rs),
                **medians(rs),
                "finish_rate_range": (min(rates), max(rates)),
                "met": sum(meets(r) for r in rs),
            }
        )
    return out


def medians(rows: list[dict]) -> dict:
    """The medians over runs of first finish (a run that never finished counts as its whole
    budget), finish rate and median ratio (of the runs that finished; None if none did)."""
    firsts = [
        r["minutes"] if r["first_finish_min"] is None else r["first_finish_min"] for r in rows
    ]
    ratios = [r["median_ratio"] for r in rows if r["median_ratio"] is not None]
    return {
        "first_finish_min": statistics.median(firsts),
        "finish_rate": statistics.median(r["finish_rate"] for r in rows),
        "median_ratio": statistics.median(ratios) if ratios else None,
    }


def meets(row: dict) -> bool:
    """The single-map targets; a map raced in a cycle (option != map): its finish rate."""
    if row.get("option", row.get("map")) != row.get("map"):
        return row["finish_rate"] >= CYCLE_FINISH_RATE
    ff, med = row["first_finish_min"], row["median_ratio"]
    return (
        ff is not None
        and ff <= TARGETS["first_finish_min"]
        and row["finish_rate"] >= TARGETS["finish_rate"]
        and med is not None
        and med <= TARGETS["median_ratio"]
    )


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {model}"


def config_seed() -> int:
    """train.yaml's seed: a run with it needs no seed override."""
    from omegaconf import OmegaConf

    return int(OmegaConf.load(ROOT / "conf" / "train.yaml")["seed"])


def maps_of(option: str) -> list[str]:
    """The map names a conf/map option races."""
    from omegaconf import OmegaConf

    cycle = OmegaConf.to_container(OmegaConf.load(MAP_CONF / f"{option}.yaml"))["cycle"]
    return [e if isinstance(e, str) else e["map"] for e in cycle]


def store_uri(uri: str) -> str:
    """A relative SQLite store (sqlite:///outputs/mlflow.db) made absolute against the
    repository, where the training runs start: the read-back then opens the same file from
    any working directory. Other URIs are returned as they are."""
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri.startswith(prefix + "/"):
        return prefix + str(ROOT / uri[len(prefix) :])
    return uri


def run_training(
    option: str, minutes: float, extra: list[str], out_dir: Path, tracking_uri: str
) -> Path:
    """One training run (a subprocess, as a user runs it) recorded in the tracking store its
    row is read back from (so --tracking-uri never shows in a row's overrides); returns its
    output dir."""
    args = [
        sys.executable,
        str(ROOT / "scripts" / "train.py"),
        f"map={option}",
        f"trainer.max_time_s={int(minutes * 60)}",
        f"run_name=bench-{option}-{minutes:g}min",
        f"hydra.run.dir={out_dir}",
        "trainer.progress_bar=false",
        f"logger.tracking_uri={tracking_uri}",
        *extra,
    ]
    print(f"[bench] {' '.join(args[1:])}", flush=True)
    subprocess.run(args, cwd=ROOT, check=True)
    return out_dir


def read_run(out_dir: Path, tracking_uri: str) -> tuple[str, list[dict]]:
    """(MLflow run id, greedy race history) of a finished run, read back from MLflow."""
    local = json.loads((out_dir / "summary.json").read_text())
    run_id = local.get("mlflow_run_id")
    if not run_id:
        raise SystemExit(f"error: {out_dir}: the run has no MLflow record (logger=mlflow needed)")
    return run_id, greedy_history(run_id, tracking_uri)


@functools.lru_cache(maxsize=4)
def _client(tracking_uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri)


def greedy_history(run_id: str, tracking_uri: str) -> list[dict]:
    """Every greedy race of an MLflow run (its summary.json artifact)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = _client(tracking_uri).download_artifacts(run_id, "summary.json", tmp)
        return json.loads(Path(path).read_text())["greedy_races"]


def samples_per_s(run_id: str, tracking_uri: str) -> float | None:
    """The learner's samples/s over a run: the median of its logged rate, from MLflow."""
    values = [m.value for m in _client(tracking_uri).get_metric_history(run_id, SAMPLES_PER_S)]
    return statistics.median(values) if values else None


def transitions_per_s(history: list[dict]) -> float | None:
    """The collectors' transitions/s over a run: the slope of the `frames` counter its greedy
    races recorded (counter_rate), from the first to the last; None without the counter."""
    return counter_rate(
        [(h["wall_s"], h["frames"]) for h in history if h.get("frames") is not None]
    )


def q_mean_drift(run_id: str, tracking_uri: str, minutes: float) -> float | None:
    """value_drift of a run's `train/q_mean`, its closing window ending at the last point."""
    history = _client(tracking_uri).get_metric_history(run_id, Q_MEAN)
    if not history:
        return None
    t0 = min(m.timestamp for m in history)
    points = [((m.timestamp - t0) / 1000.0, m.value) for m in history]
    return value_drift(points, max(t for t, _ in points) - window_s(minutes))


def add_missing_curves(saved: dict[str, list[dict]], tracking_uri: str) -> bool:
    """Give rows saved before curves (or the outcome autocorrelation, the value drift or the
    equal-actions counts) existed theirs, from their MLflow run where it is still there
    (else None or [], so it is not asked again); True when a row changed. The
    autocorrelation's window then ends at the run's last greedy race (the run's own end is
    not in its history)."""
    changed = False
    for rows in saved.values():
        for r in rows:
            if "q_drift" not in r:
                try:
                    r["q_drift"] = q_mean_drift(r["run_id"], tracking_uri, r["minutes"])
                except Exception:  # the run is gone from this tracking store
                    r["q_drift"] = None
                changed = True
            if "curve" in r and "late_autocorr" in r and "action_bins" in r:
                continue
            try:
                history = greedy_history(r["run_id"], tracking_uri)
            except Exception:  # the run is gone from this tracking store
                history = None
            mine = None if history is None else [h for h in history if h["map"] == r["map"]]
            if "curve" not in r:
                r["curve"] = None if mine is None else finish_curve(mine, r["minutes"])
            if "action_bins" not in r:
                r["action_bins"] = [] if mine is None else action_bins(mine)
                r["actions"] = None if mine is None else actions_collected(mine)
            r["late_autocorr"] = None
            if mine:
                end_s = max(h["wall_s"] for h in mine)
                start = end_s - window_s(r["minutes"])
                r["late_autocorr"] = outcome_autocorrelation(late_outcomes(mine, start))
            changed = True
    return changed


def lost_end(row: dict) -> str:
    """'41% of the map, 9% of races' for the unfinished races of the closing window."""
    if row.get("lost_median_progress") is None:
        return "-"
    return f"{row['lost_median_progress']:.0%} of the map, {row['lost_at_start']:.0%} of races"


def row_name(r: dict) -> str:
    """A row's map, its cycle option when it was raced in one, and its overrides."""
    name = r["map"] if r["option"] == r["map"] else f"{r['map']} ({r['option']})"
    return f"{name} `{r['overrides']}`" if r.get("overrides") else name


def table(rows: list[dict]) -> str:
    def num(v, fmt):
        return "-" if v is None else format(v, fmt)

    lines = [
        "| map | budget | first greedy finish | finished (last window) | median ratio "
        "(last window) | unfinished: median end, stalled at start | best ratio | greedy races "
        "| targets met | MLflow run |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        name = row_name(r)
        ff = r["first_finish_min"]
        first = "never" if ff is None else f"{ff:.1f} min"
        lines.append(
            f"| {name} "
            f"| {r['minutes']:g} min | {first} "
            f"| {r['finish_rate']:.0%} of {r['late_races']} | {num(r['median_ratio'], '.3f')} "
            f"| {lost_end(r)} | {num(r['best_ratio'], '.3f')} | {r['greedy_races']} "
            f"| {'yes' if meets(r) else 'no'} | `{r['run_id'][:8]}` |"
        )
    return "\n".join(lines)


def curves_table(rows: list[dict]) -> str:
    """Each row's learning curve: % of greedy races finished per tenth of the budget, the
    lag-1 autocorrelation of the closing window's race outcomes (churn) and the value drift
    (divergence)."""
    lines = [
        "| map | budget | finished in each tenth of the budget, % | outcome autocorrelation, "
        "last window | value drift, last window | MLflow run |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        if not r.get("curve"):
            continue
        name = row_name(r)
        cells = " ".join("-" if c is None else f"{100 * c:.0f}" for c in r["curve"])
        ac = r.get("late_autocorr")
        ac = "-" if ac is None else f"{ac:+.2f}"
        drift = "-" if r.get("q_drift") is None else f"{r['q_drift']:+.2f}"
        lines.append(
            f"| {name} | {r['minutes']:g} min | {cells} | {ac} | {drift} | `{r['run_id'][:8]}` |"
        )
    return "\n".join(lines)


def seeds_table(groups: list[dict]) -> str:
    lines = [
        "| map | budget | seeds | first greedy finish (median) | finished, last window "
        "(median, range) | median ratio (median) | runs meeting the targets |",
        "|---|---|---|---|---|---|---|",
    ]
    for g in groups:
        name = row_name(g)
        lo, hi = g["finish_rate_range"]
        ratio = "-" if g["median_ratio"] is None else f"{g['median_ratio']:.3f}"
        lines.append(
            f"| {name} | {g['minutes']:g} min | {g['seeds']} | {g['first_finish_min']:.1f} min "
            f"| {g['finish_rate']:.0%} ({lo:.0%}-{hi:.0%}) | {ratio} | {g['met']} of {g['seeds']} |"
        )
    return "\n".join(lines)


def ordered_rows(saved: dict[str, list[dict]]) -> list[dict]:
    """Every saved row for the docs: the defaults first (built-in maps in order, then cycles,
    shorter budgets first), then the rows with overrides, map by map."""

    def rank(key: str) -> tuple:
        option, minutes, tag = key.split("|", 2)
        known = BUILTIN.index(option) if option in BUILTIN else len(BUILTIN)
        return (tag != "", float(minutes) if not tag else 0.0, known)

    keys = sorted(saved, key=rank)  # stable: override rows keep their order
    return [r for k in keys for r in saved[k]]


def write_page(page: Path, rows: list[dict]) -> None:
    """Write the tables of every saved row into a docs page, between BEGIN and END."""
    page.write_text(learning_block(page.read_text(), rows))


def learning_block(text: str, rows: list[dict]) -> str:
    """A page's text with the learning benchmark's block made of `rows` (scripts/make_docs.py
    builds docs/benchmarks.md with it too)."""
    if BEGIN not in text or END not in text:
        raise SystemExit(f"error: no {BEGIN} ... {END} markers to write the table")
    dates = sorted({r["date"] for r in rows})
    machines = sorted({r["machine"] for r in rows})
    groups = seed_groups(rows)
    across = (
        f"\n\nThe rows measured with several seeds (`--seeds`), summarised:\n\n"
        f"{seeds_table(groups)}"
        if groups
        else ""
    )
    if any(r.get("curve") for r in rows):
        across += (
            "\n\nHow each run learned (from its MLflow record; older runs no longer in the "
            "tracking store have no curve). The outcome autocorrelation is the lag-1 "
            "autocorrelation of the closing window's greedy race outcomes in time order: about "
            "0 (+- 0.07 at 200 races) for independent races, higher when races close in time "
            "succeed or fail together, as a policy churning between weight versions makes "
            "them. The value drift is the closing window's median `train/q_mean` less the "
            "lowest one-minute median of the run: a few tenths for a run whose values "
            "settled, several units for one whose values diverged:\n\n"
            f"{curves_table(rows)}"
        )
    block = (
        f"{BEGIN}\n`{COMMAND}` ({', '.join(dates)}; {'; '.join(machines)}; one run at a time, "
        "nothing else running; rates over the last 10 minutes, the last third of shorter "
        f"budgets; a map in a cycle meets its target at 80% finished):\n\n{table(rows)}"
        f"{across}\n{END}"
    )
    head, rest = text.split(BEGIN, 1)
    return head + block + rest.split(END, 1)[1]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    ap = OneLineParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--minutes", type=positive_float(), default=30.0, help="training budget per row"
    )
    ap.add_argument("--maps", nargs="+", default=BUILTIN, help="conf/map options")
    ap.add_argument("--results", default="docs/bench_learning.json", help="rows (committed)")
    ap.add_argument(
        "--tracking-uri",
        default="sqlite:///outputs/mlflow.db",
        help="the MLflow store the runs are recorded in and read back from",
    )
    ap.add_argument("--page", default="docs/benchmarks.md", help="the docs page of the tables")
    ap.add_argument("--no-page", action="store_true", help="do not write the page")
    ap.add_argument("--force", action="store_true", help="rerun rows already in the results")
    ap.add_argument(
        "--seeds", nargs="+", type=int_at_least(0), help="a run per seed (default: the config's)"
    )
    ap.add_argument(
        "--table-only", action="store_true", help="only write the page's tables from the results"
    )
    ap.add_argument(
        "--defaults-were",
        nargs="+",
        metavar="KEY=VALUE",
        help="after a change of defaults: the old values of the changed keys; every saved row "
        "is re-keyed for the defaults now (--defaults-are), then the tables are written",
    )
    ap.add_argument(
        "--defaults-are", nargs="+", metavar="KEY=VALUE", help="the new values of those keys"
    )
    ap.add_argument(
        "--defaults-of",
        nargs="+",
        metavar="OPTION",
        help="the changed defaults are these map options' own (conf/map/<option>.yaml): only "
        "their rows are re-keyed, and the change is checked against map=<option>",
    )
    args = ap.parse_args(argv)
    args.tracking_uri = store_uri(args.tracking_uri)
    try:
        was = override_pairs(args.defaults_were or [], "--defaults-were")
        now = override_pairs(args.defaults_are or [], "--defaults-are")
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if set(was) != set(now):
        keys = ", ".join(sorted(set(was) ^ set(now)))
        print(f"error: --defaults-were and --defaults-are name other keys: {keys}", file=sys.stderr)
        return 2
    if args.defaults_of and not was:
        print("error: --defaults-of needs --defaults-were and --defaults-are", file=sys.stderr)
        return 2
    for option in args.defaults_of or []:
        if not (MAP_CONF / f"{option}.yaml").is_file():
            print(f"error: --defaults-of: no conf/map option {option!r}", file=sys.stderr)
            return 2
    if was:
        from hydra import compose, initialize_config_dir

        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            for over in [[f"map={o}"] for o in args.defaults_of or []] or [[]]:
                problem = defaults_problem(was, now, compose("train", overrides=over))
                if problem:
                    where = f" (map={over[0][4:]})" if over else ""
                    print(f"error: {problem}{where}", file=sys.stderr)
                    return 2
    if not args.minutes > 0:
        print(f"error: --minutes must be > 0, got {args.minutes:g}", file=sys.stderr)
        return 2
    for option in args.maps:
        if not (MAP_CONF / f"{option}.yaml").is_file():
            known = ", ".join(sorted(p.stem for p in MAP_CONF.glob("*.yaml")))
            msg = f"error: --maps: no conf/map option {option!r} (options: {known})"
            print(msg, file=sys.stderr)
            return 2
    from trackmind.sim.mapio import load_map
    from trackmind.sim.reference import reference_time_ms

    results_path = ROOT / args.results
    results_path.parent.mkdir(parents=True, exist_ok=True)
    saved = json.loads(results_path.read_text()) if results_path.is_file() else {}
    if was:
        try:
            saved = rebase(saved, was, now, args.defaults_of)
        except ValueError as e:
            print(f"error: {args.results}: {e}", file=sys.stderr)
            return 2
        results_path.write_text(json.dumps(saved, indent=1))
        print(f"[bench] re-keyed the rows of {args.results} for the defaults now")
        args.table_only = True
    default_seed = config_seed()
    runs = [
        (option, [*extra, *([] if s in (None, default_seed) else [f"seed={s}"])])
        for option in args.maps
        for s in dict.fromkeys(args.seeds or [None])
    ]
    for option, run_extra in [] if args.table_only else runs:
        tag = " ".join(run_extra)
        key = f"{option}|{args.minutes:g}|{tag}"
        if key in saved and not args.force:
            was = saved[key][0]
            print(
                f"[bench] {key}: already measured on {was.get('date', '?')} (run "
                f"{was['run_id'][:8]}), skipped; for a new row beside it, name a default as an "
                "override of its own (e.g. a control of this session), or --force to replace it"
            )
            continue
        stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
        out_dir = ROOT / "outputs" / "bench_learning" / f"{stamp}_{option}_{args.minutes:g}min"
        run_training(option, args.minutes, run_extra, out_dir, args.tracking_uri)
        run_id, history = read_run(out_dir, args.tracking_uri)
        rows = []
        end_s = max((h["wall_s"] for h in history), default=0.0)
        speed = {
            "samples_per_s": samples_per_s(run_id, args.tracking_uri),
            "transitions_per_s": transitions_per_s(history),
        }
        drift = q_mean_drift(run_id, args.tracking_uri, args.minutes)
        for name in maps_of(option):
            ref = reference_time_ms(load_map(name))
            mine = [h for h in history if h["map"] == name]
            row = summarise(mine, ref, args.minutes, end_s)
            row.update(
                map=name,
                option=option,
                minutes=args.minutes,
                overrides=tag,
                run_id=run_id,
                date=date.today().isoformat(),
                machine=machine(),
                q_drift=drift,
                **speed,
            )
            rows.append(row)
        saved[key] = rows
        results_path.write_text(json.dumps(saved, indent=1))  # row by row: resumable
        print(table(rows))
    wanted = [f"{o}|{args.minutes:g}|{' '.join(e)}" for o, e in runs]
    print(table([r for k in wanted for r in saved.get(k, [])]))
    if not args.no_page and add_missing_curves(saved, args.tracking_uri):
        results_path.write_text(json.dumps(saved, indent=1))
    rows = ordered_rows(saved)
    if not args.no_page and rows:
        write_page(ROOT / args.page, rows)
        print(f"[bench] wrote the tables into {args.page} (scripts/make_docs.py draws the plots)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
