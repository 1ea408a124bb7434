"""Regenerate every table and plot of the docs site from its result files.

    python scripts/make_docs.py            # write the tables into docs/*.md, draw docs/img/
    python scripts/make_docs.py --check    # exit 1 if a page is not what its results give
    make docs                              # this, then `mkdocs build --strict`

No table in docs/ is kept by hand. A page holds a generated table between
`<!-- table: NAME -->` and `<!-- /table -->`, where NAME names its source:
- `config-groups`: the Hydra groups and options found in conf/, with what each group is for
  (docs/results/config-groups.json);
- a file docs/results/NAME.json: `scripts/drive.py --json` output (a map table),
  `trackmind-evaluate --json` output (greedy races of a checkpoint),
  `{"checkpoints": {label: NAME}}` (several such outputs side by side),
  `{"seeds": {seed: {label: NAME}}}` (one recipe's checkpoints over its seeds, summed up), a
  `scripts/bench_learning.py --results` file of short screening runs (a lever table, each
  lever's seeds side by side), `{"pairs": [[arm run, control run], ...]}` (an arm beside
  its same-day control, seed by seed, drawn from docs/bench_learning.json), or
  `{"columns": [...], "rows": [[...]]}` (a measurement recorded as a result file).
The learning benchmark's tables (docs/benchmarks.md, from docs/bench_learning.json) are
written by scripts/bench_learning.py's own table code, and docs/gpu.md's by
scripts/gpu_check.py --report. Plots: a learning curve per map and the lever comparison,
from docs/bench_learning.json.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

import bench_learning
import gpu_check

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RESULTS = DOCS / "results"
IMG = DOCS / "img"
MARK = re.compile(r"(<!-- table: (?P<name>[\w./-]+) -->\n)(?P<body>.*?)(<!-- /table -->)", re.S)


def markdown_table(columns: list[str], rows: list[list]) -> str:
    """A Markdown table; None is shown as '-'."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join("-" if c is None else str(c) for c in row) + " |")
    return "\n".join(lines)


def drive_table(result: dict) -> str:
    """scripts/drive.py --json output: each map's geometry, race and ratio."""
    rows = [
        [
            r["map"],
            f"{r['length_m']:,.0f} m",
            "-" if r["fit_m"] is None else f"{r['fit_m']:.2f} m",
            "yes" if r["bridge"] else "",
            "yes" if r["finished"] else "no",
            f"{r['time_s']:.2f} s",
            f"{r['reference_s']:.2f} s",
            f"{r['ratio']:.3f}",
        ]
        for r in result["maps"]
    ]
    columns = ["map", "length", "fit", "bridge", "finished", "race time", "reference", "ratio"]
    return markdown_table(columns, rows)


def evaluation_table(result: dict) -> str:
    """trackmind-evaluate --json output: each map's greedy races, and where the last ended."""
    rows = []
    for r in result["maps"]:
        finished = r["best_s"] is not None
        rows.append(
            [
                Path(r["map"]).name,  # a map file by its name: where it lay is no matter
                f"{r['finish_rate']:.0%}",
                f"{r['best_s']:.2f} s" if finished else "-",
                f"{r['reference_s']:.2f} s",
                f"{r['ratio']:.3f}" if finished else "-",
                "finished" if finished else f"{r['progress']:.0%} ({', '.join(r['end'])})",
            ]
        )
    columns = ["map", "finished", "best time", "reference", "ratio", "last race"]
    return markdown_table(columns, rows)


def races(name: str) -> list[dict]:
    """The maps of a `trackmind-evaluate --json` result file under docs/results."""
    return json.loads((RESULTS / f"{name}.json").read_text())["maps"]


def checkpoints_table(data: dict) -> str:
    """Several checkpoints raced on the same maps (`{"checkpoints": {label: evaluation result
    file under docs/results}}`): a column per checkpoint, its ratio or where its race ended,
    and the count each finished of the maps of each kind (generated, imported)."""
    results = {label: {r["map"]: r for r in races(f)} for label, f in data["checkpoints"].items()}
    maps = list(dict.fromkeys(m for by_map in results.values() for m in by_map))

    def cell(r: dict | None) -> str:
        if r is None:
            return "-"
        return f"{r['ratio']:.3f}" if r["best_s"] is not None else f"stop at {r['progress']:.0%}"

    rows = [[Path(m).name, *(cell(by_map.get(m)) for by_map in results.values())] for m in maps]
    for kind, is_kind in (("generated", lambda m: ":" in m), ("imported", lambda m: ":" not in m)):
        counts = []
        for by_map in results.values():
            mine = [r for m, r in by_map.items() if is_kind(m)]
            counts.append(f"**{sum(r['best_s'] is not None for r in mine)} of {len(mine)}**")
        rows.append([f"finished, {kind} maps", *counts])
    return markdown_table(["map", *results], rows)


def seeds_table(data: dict) -> str:
    """One recipe over several seeds (`{"seeds": {seed: {label: NAME}}, "exclude": [names],
    "generated": [maps]}`): per seed and checkpoint, the imported maps finished (less the
    excluded map files), their median ratio, where each other race stopped, and the listed
    generated maps finished; a last row of the medians over the seeds. The figure an issue
    asks of a recipe, drawn from the same files as each seed's own table."""
    exclude, generated = set(data.get("exclude", [])), data.get("generated", [])
    labels = list(dict.fromkeys(label for by_label in data["seeds"].values() for label in by_label))
    shown = ["circuits finished", "median ratio", "stops"] + ["generated"] * bool(generated)
    counts, medians, gen_counts = ({label: [] for label in labels} for _ in range(3))
    rows = []
    for seed, by_label in data["seeds"].items():
        row = [seed]
        for label in labels:
            if label not in by_label:
                row += ["-"] * len(shown)
                continue
            maps = races(by_label[label])
            real = [r for r in maps if ":" not in r["map"] and Path(r["map"]).name not in exclude]
            done = [r["ratio"] for r in real if r["best_s"] is not None]
            stops = [
                f"{Path(r['map']).stem} {r['progress']:.0%}" for r in real if r["best_s"] is None
            ]
            gen = [r for r in maps if r["map"] in generated]
            gen_done = sum(r["best_s"] is not None for r in gen)
            median = statistics.median(done) if done else None
            counts[label].append(len(done))
            gen_counts[label].append(gen_done)
            if median is not None:
                medians[label].append(median)
            row += [f"{len(done)} of {len(real)}", "-" if median is None else f"{median:.3f}"]
            row += [", ".join(stops) or "none"]
            row += [f"{gen_done} of {len(gen)}"] * bool(generated)
        rows.append(row)
    last = ["median"]
    for label in labels:
        median = statistics.median(medians[label]) if medians[label] else None
        last += [f"{statistics.median(counts[label]):g}" if counts[label] else "-"]
        last += ["-" if median is None else f"{median:.3f}", ""]
        if generated:
            last += [f"{statistics.median(gen_counts[label]):g}" if gen_counts[label] else "-"]
    rows.append(last)
    columns = ["seed", *(f"{label}: {c}" for label in labels for c in shown)]
    return markdown_table(columns, rows)


def config_groups_table() -> str:
    """Every Hydra group of conf/ with its options, as they are on disk."""
    what = json.loads((RESULTS / "config-groups.json").read_text())
    conf = ROOT / "conf"
    groups = sorted(p.name for p in conf.iterdir() if p.is_dir())
    missing = [g for g in groups if g not in what]
    if missing:
        raise SystemExit(f"error: docs/results/config-groups.json: no description of {missing}")
    rows = [
        [f"`{g}`", ", ".join(sorted(p.stem for p in (conf / g).glob("*.yaml"))), what[g]]
        for g in sorted(groups, key=list(what).index)
    ]
    return markdown_table(["group", "options", "what"], rows)


def seed_of(overrides: str) -> int:
    """The seed= override of a bench_learning row (none: the config's seed, 0)."""
    m = re.search(r"(?:^|\s)seed=(\d+)", overrides)
    return int(m[1]) if m else 0


def screen_table(saved: dict[str, list[dict]]) -> str:
    """bench_learning rows of short screening runs, one line per lever over its seeds: the
    mean share of the map the closing window's greedy races covered (late_progress) seed by
    seed and its median, the median first finish (a run with none counts as its budget), the
    median finish rate of the closing window, the median learner speed, and the days the
    runs were made (a lever is compared with a control of the same day and checkout)."""
    levers: dict[tuple, list[dict]] = {}
    for rows in saved.values():
        for r in rows:
            lever = bench_learning.without_seed(r["overrides"]) or "defaults"
            levers.setdefault((r["map"], r["minutes"], lever), []).append(r)
    out = []
    for (name, minutes, lever), rs in levers.items():
        rs.sort(key=lambda r: seed_of(r["overrides"]))
        progress = [r["late_progress"] for r in rs]
        firsts = [minutes if r["first_finish_min"] is None else r["first_finish_min"] for r in rs]
        never = sum(r["first_finish_min"] is None for r in rs)
        speeds = [r["samples_per_s"] for r in rs if r.get("samples_per_s")]
        out.append(
            [
                name,
                f"{minutes:g} min",
                f"`{lever}`" if lever != "defaults" else lever,
                ", ".join(str(seed_of(r["overrides"])) for r in rs),
                " / ".join(f"{p:.0%}" for p in progress),
                f"{statistics.median(progress):.0%}",
                f"{statistics.median(firsts):.1f} min" + (f" ({never} never)" if never else ""),
                f"{statistics.median(r['finish_rate'] for r in rs):.0%}",
                f"{statistics.median(speeds):,.0f}" if speeds else None,
                ", ".join(sorted({r["date"] for r in rs})),
            ]
        )
    columns = [
        "map",
        "budget",
        "lever",
        "seeds",
        "map covered, last third, by seed",
        "median",
        "first greedy finish (median)",
        "finished, last third (median)",
        "samples/s (median)",
        "measured",
    ]
    return markdown_table(columns, out)


def pairs_table(data: dict, saved: dict[str, list[dict]]) -> str:
    """An arm beside its control, seed by seed, from docs/bench_learning.json: `pairs` lists
    [arm run, control run or null] by run id (a prefix will do: ids outlive a re-keying of
    the rows), and `control` may name the control's columns. A map with two or more pairs
    gets a median line (first finish: a run that never finished counts as its budget; the
    control's medians only where every seed has one). `"drift": true` adds each run's value
    drift (bench_learning.value_drift: a diverging run shows several units).
    `"equal_actions": true` adds each side's finish rate over the same actions collected (the
    last third of what both runs of the pair reached, bench_learning.equal_actions_window):
    on a machine whose speed swings, equal minutes are not equal experience."""
    drift = bool(data.get("drift"))
    equal = bool(data.get("equal_actions"))
    by_run = {r["run_id"]: r for rows in saved.values() for r in rows if r["option"] == r["map"]}

    def row_of(prefix: str | None) -> dict | None:
        if prefix is None:
            return None
        found = [r for rid, r in by_run.items() if rid.startswith(prefix)]
        if len(found) != 1:
            raise SystemExit(f"error: pairs: run {prefix!r} matches {len(found)} rows")
        return found[0]

    def first(r: dict) -> str:
        if r["first_finish_min"] is None:
            return "never"
        acts = r.get("first_finish_actions")
        return f"{r['first_finish_min']:.1f} min" + (
            f" ({acts / 1000:.0f}k actions)" if acts else ""
        )

    def drift_cell(value: float | None) -> list[str]:
        if not drift:
            return []
        return ["-" if value is None else f"{value:+.2f}"]

    def cells(r: dict | None) -> list[str]:
        if r is None:
            return ["-"] * (5 if drift else 4)
        ratio = "-" if r["median_ratio"] is None else f"{r['median_ratio']:.3f}"
        return [
            f"{r['finish_rate']:.0%}",
            first(r),
            ratio,
            *drift_cell(r.get("q_drift")),
            r["run_id"][:8],
        ]

    def medians(rs: list[dict]) -> list[str]:
        m = bench_learning.medians(rs)
        ratio = "-" if m["median_ratio"] is None else f"{m['median_ratio']:.3f}"
        drifts = [r.get("q_drift") for r in rs]
        mid = statistics.median(drifts) if None not in drifts else None
        return [
            f"**{m['finish_rate']:.0%}**",
            f"{m['first_finish_min']:.1f} min",
            ratio,
            *drift_cell(mid),
            "",
        ]

    def at_equal_actions(a: dict, c: dict | None) -> tuple[list[str], list[float | None]]:
        """The pair's window of actions and each side's finish rate in it."""
        window = bench_learning.equal_actions_window([a, c] if c else [a])
        if window is None:
            return ["-", "-", "-"], [None, None]
        lo, hi = window
        rates = [
            None if r is None else bench_learning.rate_in_bins(r["action_bins"], lo, hi)
            for r in (a, c)
        ]
        k = bench_learning.ACTION_BIN // 1000
        return [f"{lo * k}k-{hi * k}k", *(percent(x) for x in rates)], rates

    def percent(x: float | None) -> str:
        return "-" if x is None else f"{x:.0%}"

    def median_of(xs: list[float | None]) -> str:
        return "-" if not xs or None in xs else f"**{statistics.median(xs):.0%}**"

    by_map: dict[str, list[tuple[dict, dict | None]]] = {}
    for arm, control in data["pairs"]:
        a = row_of(arm)
        by_map.setdefault(a["map"], []).append((a, row_of(control)))
    out = []
    by_rows = [a for pairs in by_map.values() for a, _ in pairs]
    for name, pairs in by_map.items():
        rates = []
        for a, c in pairs:
            row = [name, str(seed_of(a["overrides"])), *cells(a), *cells(c)]
            if equal:
                shown_cells, pair_rates = at_equal_actions(a, c)
                rates.append(pair_rates)
                row += shown_cells
            out.append(row)
        if len(pairs) > 1:
            controls = [c for _, c in pairs]
            ctrl = medians(controls) if all(controls) else ["-"] * (5 if drift else 4)
            row = [name, "median", *medians([a for a, _ in pairs]), *ctrl]
            if equal:
                row += ["", median_of([x for x, _ in rates]), median_of([y for _, y in rates])]
            out.append(row)
    shown = ["first finish", "median ratio", *(["value drift"] if drift else []), "run"]
    late_min = bench_learning.window_s(min(r["minutes"] for r in by_rows)) / 60.0
    control = data.get("control", "control")
    columns = ["map", "seed", f"finished, last {late_min:.3g} min", *shown]
    columns += [f"{control}: finished", *shown]
    if equal:
        columns += ["equal actions: races ending at", "finished", f"{control}: finished"]
    return markdown_table(columns, out)


def is_screen(data: dict) -> bool:
    """A bench_learning results file: {"option|minutes|overrides": [row, ...], ...}."""
    rows = [r for v in data.values() if isinstance(v, list) for r in v]
    return bool(rows) and all(isinstance(r, dict) and "late_progress" in r for r in rows)


def render(name: str) -> str:
    if name == "config-groups":
        return config_groups_table()
    path = RESULTS / f"{name}.json"
    if not path.is_file():
        raise SystemExit(f"error: a table names {name}, but {path.relative_to(ROOT)} is missing")
    data = json.loads(path.read_text())
    if "checkpoint" in data:
        return evaluation_table(data)
    if "checkpoints" in data:
        return checkpoints_table(data)
    if "seeds" in data:
        return seeds_table(data)
    if "maps" in data:
        return drive_table(data)
    if is_screen(data):
        return screen_table(data)
    if "pairs" in data:
        return pairs_table(data, json.loads((DOCS / "bench_learning.json").read_text()))
    return markdown_table(data["columns"], data["rows"])


def fill_tables(text: str) -> str:
    return MARK.sub(lambda m: f"{m[1]}{render(m['name'])}\n{m[4]}", text)


def benchmarks_block(page_text: str) -> str:
    """docs/benchmarks.md with bench_learning.py's tables of every saved row."""
    rows = bench_learning.ordered_rows(json.loads((DOCS / "bench_learning.json").read_text()))
    return bench_learning.learning_block(page_text, rows)


def gpu_block(page_text: str) -> str:
    """docs/gpu.md with each gpu-check table remade from the result folder its block names
    (the folder a `gpu_check.py --report DIR --docs` last wrote it from)."""
    return gpu_check.with_tables(page_text)


def pages() -> dict[Path, str]:
    """Every docs page as the result files make it."""
    out = {}
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text()
        new = fill_tables(text)
        if page.name == "benchmarks.md":
            new = benchmarks_block(new)
        if page.name == "gpu.md":
            new = gpu_block(new)
        out[page] = new
    return out


def is_default(row: dict) -> bool:
    """A row of the defaults (a seed at most among its overrides)."""
    return re.fullmatch(r"(seed=\d+)?", row["overrides"].strip()) is not None


def learning_curves(rows: list[dict], path: Path) -> None:
    """One panel per map: the share of greedy races finished in each tenth of the budget,
    the defaults' runs in colour (a line per seed), every other setting in grey."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_map: dict[str, list[dict]] = {}
    for r in rows:
        if r.get("curve") and r["option"] == r["map"]:
            by_map.setdefault(r["map"], []).append(r)
    maps = sorted(by_map)
    fig, axes = plt.subplots(1, len(maps), figsize=(5.5 * len(maps), 3.8), squeeze=False)
    for ax, name in zip(axes.flat, maps):
        grey = False
        for r in sorted(by_map[name], key=is_default):
            x = [(i + 1) * r["minutes"] / len(r["curve"]) for i in range(len(r["curve"]))]
            y = [None if c is None else 100 * c for c in r["curve"]]
            if is_default(r):
                label = f"defaults, {r['overrides'] or 'seed=0'}, {r['minutes']:g} min"
                ax.plot(x, y, marker=".", lw=1.6, label=label)
            else:
                ax.plot(x, y, color="0.75", lw=0.8, label=None if grey else "other settings")
                grey = True
        ax.axhline(90, color="grey", lw=0.8, ls="--")
        ax.set_title(name)
        ax.set_ylim(-3, 103)
        ax.set_xlabel("minutes of training")
        ax.set_ylabel("greedy races finished, %")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def lever_figure(rows: list[dict], path: Path, maps: tuple[str, ...] = ("technical", "hairpins")):
    """Every 30-minute row of the hard maps: the last window's finish rate, a dot per seed."""
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = []
    for name in maps:
        levers: dict[str, list[float]] = {}
        for r in rows:
            if r["map"] == name and r["option"] == name and r["minutes"] == 30:
                tag = re.sub(r"\s*seed=\d+", "", r["overrides"]).strip() or "defaults"
                levers.setdefault(tag, []).append(100 * r["finish_rate"])
        panels.append((name, levers))
    heights = [max(2, len(levers)) for _, levers in panels]
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(12, 0.5 * sum(heights) + 1.5), height_ratios=heights
    )
    for ax, (name, levers) in zip(axes, panels):
        names = sorted(levers, key=lambda k: statistics.median(levers[k]))
        for i, k in enumerate(names):
            ax.scatter(levers[k], [i] * len(levers[k]), color="C0", zorder=3)
            ax.plot([statistics.median(levers[k])] * 2, [i - 0.3, i + 0.3], color="C3")
        labels = [textwrap.fill(n, 48) for n in names]
        ax.set_yticks(range(len(names)), labels, fontsize=7)
        ax.axvline(90, color="grey", lw=0.8, ls="--")
        ax.set_xlim(-3, 103)
        ax.set_title(f"{name}, 30 minutes on 2 cores")
    axes[-1].set_xlabel(
        "greedy races finished in the last 10 minutes, % (dot: a seed, bar: median)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only check that the pages are current")
    args = ap.parse_args(argv)
    stale = []
    for page, text in pages().items():
        if page.read_text() != text:
            stale.append(page.relative_to(ROOT))
            if not args.check:
                page.write_text(text)
    if args.check:
        if stale:
            names = ", ".join(map(str, stale))
            print(f"make_docs: {names} differ from their result files: run scripts/make_docs.py")
            return 1
        return 0
    IMG.mkdir(exist_ok=True)
    rows = bench_learning.ordered_rows(json.loads((DOCS / "bench_learning.json").read_text()))
    learning_curves(rows, IMG / "learning_curves.png")
    lever_figure(rows, IMG / "levers.png")
    for p in stale:
        print(f"make_docs: wrote {p}")
    print(f"make_docs: drew {IMG.relative_to(ROOT)}/learning_curves.png and levers.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
