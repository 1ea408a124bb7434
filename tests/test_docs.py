"""The front door and the docs site: README short and linked, every result table generated."""

from __future__ import annotations

import re

from test_scripts import ROOT, load_script

DOCS = ROOT / "docs"
GENERATED = (
    r"<!-- table: [\w./-]+ -->.*?<!-- /table -->",
    r"<!-- bench-learning:begin -->.*?<!-- bench-learning:end -->",
    r"<!-- gpu-check table: begin -->.*?<!-- gpu-check table: end -->",
    r"```.*?```",
)
# reference tables (formats, terms, map specs) describe the code; no figure is measured in them
REFERENCE_TABLES = {
    "| term | shape | what |",
    "| slice | term | features | in the sim |",
    "| term | value | default |",
    "| term | outcome | fires when |",
    "| spec | what |",
    "| key | type | meaning |",
    "| key | meaning |",
}


def hand_tables(text: str) -> list[str]:
    """The header lines of the Markdown tables outside generated blocks and code."""
    for pattern in GENERATED:
        text = re.sub(pattern, "", text, flags=re.S)
    lines = text.splitlines()
    return [lines[i - 1] for i, ln in enumerate(lines) if re.fullmatch(r"\|[-| :]+\|", ln)]


def test_docs_pages_are_what_their_result_files_give():
    assert load_script("make_docs").main(["--check"]) == 0


def test_no_result_table_is_kept_by_hand():
    for page in sorted(DOCS.glob("*.md")):
        for header in hand_tables(page.read_text()):
            assert header in REFERENCE_TABLES, f"{page.name}: a table kept by hand: {header}"
    assert hand_tables("a\n\n| x | y |\n|---|---|\n| 1 | 2 |\n") == ["| x | y |"]
    assert hand_tables("<!-- table: a -->\n| x |\n|---|\n<!-- /table -->\n") == []


def test_readme_is_a_short_front_door_whose_links_resolve():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    assert "make train" in text and "make test" in text and "trackmind-train" in text
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if not link.startswith("http")]
    assert len(local) >= 10
    for link in local:
        assert (ROOT / link).exists(), link


def test_tables_render_by_hand():
    docs = load_script("make_docs")
    assert docs.markdown_table(["a", "b"], [[1, None], ["x", 2.5]]) == (
        "| a | b |\n|---|---|\n| 1 | - |\n| x | 2.5 |"
    )
    row = {
        "map": "oval",
        "length_m": 551.4,
        "fit_m": 0.031,
        "bridge": True,
        "finished": True,
        "time_s": 20.0,
        "reference_s": 16.0,
        "ratio": 1.25,
    }
    lines = docs.drive_table({"maps": [row, {**row, "fit_m": None, "bridge": False}]}).split("\n")
    assert lines[2] == "| oval | 551 m | 0.03 m | yes | yes | 20.00 s | 16.00 s | 1.250 |"
    assert lines[3] == "| oval | 551 m | - |  | yes | 20.00 s | 16.00 s | 1.250 |"


def test_the_config_groups_table_is_read_from_conf():
    table = load_script("make_docs").config_groups_table()
    groups = sorted(p.name for p in (ROOT / "conf").iterdir() if p.is_dir())
    for group in groups:
        options = sorted(p.stem for p in (ROOT / "conf" / group).glob("*.yaml"))
        assert f"| `{group}` | {', '.join(options)} |" in table


def test_evaluation_table_by_hand():
    docs = load_script("make_docs")
    done = {"finish_rate": 1.0, "best_s": 100.0, "reference_s": 90.0, "ratio": 1.11}
    lost = {"finish_rate": 0.0, "best_s": None, "reference_s": 30.0, "ratio": None}
    maps = [
        {"map": "db/tracks/Austin.csv", **done, "progress": 1.0, "end": ["finish"]},
        {"map": "procedural:3", **lost, "progress": 0.42, "end": ["no_progress"]},
    ]
    lines = docs.evaluation_table({"checkpoint": "best.pt", "maps": maps}).split("\n")
    assert lines[2] == "| Austin.csv | 100% | 100.00 s | 90.00 s | 1.110 | finished |"
    assert lines[3] == "| procedural:3 | 0% | - | 30.00 s | - | 42% (no_progress) |"


def test_screen_table_by_hand():
    """A bench_learning results file of screening runs: one line per lever, seeds in order,
    medians by hand; a run that never finished counts as its whole budget."""
    docs = load_script("make_docs")

    def row(overrides, progress, first, rate, speed, day="2026-11-27"):
        return {
            "date": day,
            "map": "technical",
            "minutes": 10.0,
            "overrides": overrides,
            "late_progress": progress,
            "first_finish_min": first,
            "finish_rate": rate,
            "samples_per_s": speed,
        }

    saved = {
        "technical|10|x=1 seed=2": [row("x=1 seed=2", 0.5, None, 0.0, 7000.0)],
        "technical|10|x=1": [row("x=1", 0.25, 6.0, 0.1, 6000.0)],
        "technical|10|seed=1": [row("seed=1", 0.2, 9.0, 0.02, 6500.0)],
        "technical|10|x=1 seed=1": [row("x=1 seed=1", 0.3, 8.0, 0.2, 5000.0, "2026-11-26")],
    }
    assert docs.is_screen(saved) and not docs.is_screen({"columns": [], "rows": []})
    lines = docs.screen_table(saved).splitlines()
    assert lines[2] == (
        "| technical | 10 min | `x=1` | 0, 1, 2 | 25% / 30% / 50% | 30% | 8.0 min (1 never) "
        "| 10% | 6,000 | 2026-11-26, 2026-11-27 |"
    )
    assert lines[3].startswith("| technical | 10 min | defaults | 1 | 20% | 20% | 9.0 min |")


def pairs_row(run, overrides, rate, first, actions, ratio):
    """A technical row of docs/bench_learning.json with the fields a pairs table reads."""
    return {
        "run_id": run + "0" * 24,
        "map": "technical",
        "option": "technical",
        "minutes": 30.0,
        "overrides": overrides,
        "finish_rate": rate,
        "first_finish_min": first,
        "first_finish_actions": actions,
        "median_ratio": ratio,
    }


def test_pairs_table_by_hand():
    """An arm beside its control by run id: seed by seed, then the medians of a map with two
    or more pairs; a run that never finished counts as its budget, a missing control is '-'."""
    docs = load_script("make_docs")
    row = pairs_row

    saved = {
        "a": [row("aaaaaaa0", "x=1", 0.82, 5.0, 301_000, 1.111)],
        "b": [row("bbbbbbb0", "x=1 seed=1", 0.6, None, None, None)],
        "c": [row("ccccccc0", "", 0.5, 7.3, 461_000, 1.176)],
        "d": [row("ddddddd0", "seed=1", 0.48, 6.3, 394_000, 1.118)],
    }
    lines = docs.pairs_table({"pairs": [["aaaa", "cccc"], ["bbbb", "dddd"]]}, saved)
    lines = lines.splitlines()
    assert lines[2] == (
        "| technical | 0 | 82% | 5.0 min (301k actions) | 1.111 | aaaaaaa0 | 50% "
        "| 7.3 min (461k actions) | 1.176 | ccccccc0 |"
    )
    assert lines[3] == (
        "| technical | 1 | 60% | never | - | bbbbbbb0 | 48% | 6.3 min (394k actions) | 1.118 "
        "| ddddddd0 |"
    )
    # medians of two: the mean of the pair; the never-finished run counts as 30 minutes
    assert (
        lines[4]
        == "| technical | median | **71%** | 17.5 min | 1.111 |  | **49%** | 6.8 min | 1.147 |  |"
    )
    one = docs.pairs_table({"pairs": [["aaaa", None]]}, saved).splitlines()
    assert one[2].endswith("| aaaaaaa0 | - | - | - | - |") and len(one) == 3


def test_pairs_table_at_equal_actions_by_hand():
    """`"equal_actions": true`: each pair's shared window of actions and both sides' finish
    rates in it, and their medians on the median line."""
    docs = load_script("make_docs")

    def row(run, overrides, bins):
        return {
            **pairs_row(run, overrides, 0.5, 3.0, None, 1.1),
            "action_bins": bins,
            "actions": 100_000 * len(bins) - 1,
        }

    saved = {
        "a": [row("aaaaaaa0", "x=1", [[0, 2], [1, 2], [3, 4], [4, 4]])],  # 4 bins: 3 whole
        "b": [row("bbbbbbb0", "x=1 seed=1", [[0, 2], [1, 2], [2, 4]])],  # 3 bins: 2 whole
        "c": [row("ccccccc0", "", [[0, 2], [0, 2], [1, 4]])],  # 2 whole
        "d": [row("ddddddd0", "seed=1", [[0, 2], [1, 1], [2, 2], [1, 1]])],
    }
    table = {"pairs": [["aaaa", "cccc"], ["bbbb", "dddd"]], "equal_actions": True}
    lines = docs.pairs_table(table, saved).splitlines()
    assert lines[0].endswith("| equal actions: races ending at | finished | control: finished |")
    # both pairs share 2 whole bins; the last third of 2 is one bin: 100k-200k actions
    assert lines[2].endswith("| ccccccc0 | 100k-200k | 50% | 0% |")
    assert lines[3].endswith("| ddddddd0 | 100k-200k | 50% | 100% |")
    assert lines[4].endswith("|  | **50%** | **50%** |")


def test_pairs_table_shows_the_value_drift_when_asked():
    """`"drift": true`: each run's value drift beside its ratio, their median on the median
    line, '-' for a run saved without one."""
    docs = load_script("make_docs")

    def row(run, overrides, drift):
        r = {
            "run_id": run + "0" * 24,
            "map": "hairpins",
            "option": "hairpins",
            "minutes": 30.0,
            "overrides": overrides,
            "finish_rate": 0.9,
            "first_finish_min": 3.0,
            "first_finish_actions": None,
            "median_ratio": 1.1,
        }
        return r if drift is None else {**r, "q_drift": drift}

    saved = {
        "a": [row("aaaaaaa0", "x=1", 0.4)],
        "b": [row("bbbbbbb0", "x=1 seed=1", 14.5)],
        "c": [row("ccccccc0", "", 0.2)],
        "d": [row("ddddddd0", "seed=1", None)],
    }
    table = {"pairs": [["aaaa", "cccc"], ["bbbb", "dddd"]], "drift": True}
    lines = docs.pairs_table(table, saved).splitlines()
    assert lines[0].count("value drift") == 2
    assert lines[2] == (
        "| hairpins | 0 | 90% | 3.0 min | 1.100 | +0.40 | aaaaaaa0 | 90% | 3.0 min | 1.100 "
        "| +0.20 | ccccccc0 |"
    )
    assert lines[3].endswith("| +14.50 | bbbbbbb0 | 90% | 3.0 min | 1.100 | - | ddddddd0 |")
    # the arms' median drift is (0.4 + 14.5) / 2; the controls lack one
    assert lines[4] == (
        "| hairpins | median | **90%** | 3.0 min | 1.100 | +7.45 |  | **90%** | 3.0 min | 1.100 "
        "| - |  |"
    )


def test_seeds_table_by_hand(tmp_path, monkeypatch):
    """A recipe over seeds: circuits finished (an excluded file and generated maps apart), their
    median ratio, the stops, the listed generated maps, and the medians over the seeds."""
    docs = load_script("make_docs")
    monkeypatch.setattr(docs, "RESULTS", tmp_path)

    def race(name, ratio=None, progress=1.0):
        done = ratio is not None
        best = 100.0 * ratio if done else None
        return {"map": name, "best_s": best, "ratio": ratio, "progress": progress}

    runs = {
        "a3": [race("db/A.csv", 1.1), race("db/B.csv", 1.3), race("maps/circuit.csv", None, 0.2)],
        "a4": [race("db/A.csv", None, 0.31), race("db/B.csv", 1.2), race("procedural:6", 1.0)],
        "b3": [race("db/A.csv", None, 0.5), race("db/B.csv", None, 0.9)],
    }
    for name, maps in runs.items():
        (tmp_path / f"{name}.json").write_text(docs.json.dumps({"checkpoint": name, "maps": maps}))
    data = {
        "seeds": {"3": {"a": "a3", "b": "b3"}, "4": {"a": "a4"}},
        "exclude": ["circuit.csv"],
        "generated": ["procedural:6"],
    }
    lines = docs.seeds_table(data).splitlines()
    assert lines[0].startswith("| seed | a: circuits finished | a: median ratio | a: stops |")
    assert lines[2] == "| 3 | 2 of 2 | 1.200 | none | 0 of 0 | 0 of 2 | - | A 50%, B 90% | 0 of 0 |"
    assert lines[3] == "| 4 | 1 of 2 | 1.200 | A 31% | 1 of 1 | - | - | - | - |"
    assert lines[4] == "| median | 1.5 | 1.200 |  | 0.5 | 0 | - |  | 0 |"
