"""Open the MLflow UI in a headless browser against a real store and photograph two runs.

    python scripts/mlflow_ui_screenshot.py                      # outputs/mlflow.db, 2 latest
    python scripts/mlflow_ui_screenshot.py --runs make-train-5min make-train-5min-b

Checks through the tracking API that both runs carry race-time metrics, starts the UI on
127.0.0.1 (a free port), and writes docs/mlflow_runs.png (the runs table) and
docs/mlflow_race_time.png (the race/<map>/* charts of both runs). Needs Playwright
(`pip install playwright`) and a Chromium binary from the system (e.g. the Debian package
chromium-headless-shell): Playwright's own browser download is not used.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

from trackmind.cli import OneLineParser

BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")


def find_browser() -> str | None:
    """A Chromium binary on PATH, or None."""
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_ui(tracking_uri: str, port: int, timeout_s: float = 180.0) -> subprocess.Popen:
    """`mlflow server` bound to 127.0.0.1; returns once /health answers (or raises)."""
    mlflow_bin = Path(sys.executable).with_name("mlflow")
    proc = subprocess.Popen(
        [str(mlflow_bin), "server", "--backend-store-uri", tracking_uri]
        + ["--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"mlflow server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.5)
    stop_ui(proc)
    raise TimeoutError(f"mlflow server did not answer on 127.0.0.1:{port} in {timeout_s:.0f} s")


def stop_ui(proc: subprocess.Popen) -> None:
    """Stop the server and its workers (its own process group)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(5)


def pick_runs(client, experiment_id: str, wanted: list[str] | None) -> list:
    """The runs to show: by name or id, else the two latest with race-time metrics."""
    runs = client.search_runs([experiment_id], order_by=["attributes.start_time DESC"])
    if wanted:
        chosen = [r for w in wanted for r in runs if w in (r.info.run_id, r.info.run_name)][:2]
    else:
        chosen = [r for r in runs if race_time_keys(r)][:2]
    if len(chosen) != 2:
        raise SystemExit(f"error: need 2 runs with race-time metrics, found {len(chosen)}")
    for r in chosen:
        if not race_time_keys(r):
            raise SystemExit(f"error: run {r.info.run_name} has no race/<map>/time metric")
    return chosen


def race_time_keys(run) -> list[str]:
    return sorted(
        k for k in run.data.metrics if k.startswith("race/") and k.endswith(("/time", "best_time"))
    )


def screenshots(base: str, experiment_id: str, runs: list, out_dir: Path, browser: str) -> list:
    """Runs table and race charts of `runs`, as PNG files in out_dir."""
    from playwright.sync_api import sync_playwright

    ids = ", ".join(f"'{r.info.run_id}'" for r in runs)
    query = urllib.parse.quote(f"attributes.run_id IN ({ids})")
    names = [r.info.run_name for r in runs]
    out_dir.mkdir(parents=True, exist_ok=True)
    files = []
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=browser, args=["--no-sandbox"])
        page = b.new_page(viewport={"width": 1500, "height": 820})
        for mode, name in (("TABLE", "mlflow_runs.png"), ("CHART", "mlflow_race_time.png")):
            url = f"{base}/#/experiments/{experiment_id}/runs?searchFilter={query}"
            page.goto(f"{url}&compareRunsMode={mode}")
            for n in names:
                page.wait_for_selector(f"text={n}", timeout=60_000)
            _close_assistant(page)
            if mode == "CHART":
                page.get_by_placeholder("Search metric charts").fill("race/")
                page.wait_for_selector("text=race/", timeout=30_000)
                time.sleep(6)  # the chart data arrive after the layout
            else:
                time.sleep(2)
            path = out_dir / name
            page.screenshot(path=str(path))
            files.append(path)
        b.close()
    return files


def _close_assistant(page) -> None:
    """The MLflow Assistant side panel hides half the page: close it when it is there."""
    panel = page.locator("text=MLflow Assistant")
    if panel.count():
        buttons = page.locator("button[aria-label*='lose']")
        if buttons.count():
            buttons.last.click()
            time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tracking-uri", default="sqlite:///outputs/mlflow.db")
    ap.add_argument("--experiment", default="trackmind")
    ap.add_argument("--runs", nargs=2, default=None, help="two run names or ids")
    ap.add_argument("--out-dir", default="docs")
    args = ap.parse_args(argv)
    browser = find_browser()
    if browser is None:
        print(
            "error: no Chromium on PATH (apt-get install chromium-headless-shell)", file=sys.stderr
        )
        return 2
    from mlflow.tracking import MlflowClient

    from trackmind.tracking.mlflow_run import ML_VIEW

    client = MlflowClient(tracking_uri=args.tracking_uri)
    exp = client.get_experiment_by_name(args.experiment)
    if exp is None:
        print(f"error: no experiment {args.experiment!r} in {args.tracking_uri}", file=sys.stderr)
        return 2
    runs = pick_runs(client, exp.experiment_id, args.runs)
    if exp.tags.get(ML_VIEW[0]) != ML_VIEW[1]:
        client.set_experiment_tag(exp.experiment_id, *ML_VIEW)
    port = free_port()
    proc = start_ui(args.tracking_uri, port)
    try:
        files = screenshots(
            f"http://127.0.0.1:{port}", exp.experiment_id, runs, Path(args.out_dir), browser
        )
    finally:
        stop_ui(proc)
    for r in runs:
        print(f"run {r.info.run_name}: " + ", ".join(race_time_keys(r)))
    for f in files:
        print(f"wrote {f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
