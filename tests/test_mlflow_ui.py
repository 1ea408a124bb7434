"""The MLflow UI against a real store with two runs: served on 127.0.0.1, runs and race times.

The server is the real `mlflow server`; the runs are written with the tracking client as a
training run writes them. With Playwright and a system Chromium present, the page is also
photographed in a headless browser (scripts/mlflow_ui_screenshot.py makes docs/ pictures).
"""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from mlflow_ui_screenshot import (  # noqa: E402
    ML_VIEW,
    find_browser,
    free_port,
    pick_runs,
    screenshots,
    start_ui,
    stop_ui,
)

TIMES = {"fast": [14.0, 12.5, 11.2], "slow": [15.0, 14.1, 13.3]}


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(
        url, json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.status, r.read().decode(errors="replace")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A SQLite store with two runs of race times, as training logs them."""
    from mlflow.tracking import MlflowClient

    tmp = tmp_path_factory.mktemp("ui")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("trackmind", artifact_location=str(tmp / "art"))
    client.set_experiment_tag(exp, *ML_VIEW)
    for name, times in TIMES.items():
        run = client.create_run(exp, run_name=name)
        client.log_param(run.info.run_id, "learner.replay_ratio", "8" if name == "fast" else "4")
        for step, t in enumerate(times):
            client.log_metric(run.info.run_id, "race/starter/time", t, step=100 * step)
            client.log_metric(run.info.run_id, "race/starter/best_time", t, step=100 * step)
        client.set_terminated(run.info.run_id)
    return uri, exp, client


def test_ui_serves_both_runs_and_their_race_times(store, tmp_path):
    uri, exp, client = store
    port = free_port()
    proc = start_ui(uri, port)
    try:
        base = f"http://127.0.0.1:{port}"
        status, html = _get(base + "/")
        assert status == 200 and '<div id="root"' in html  # the UI's single-page app
        found = _post(base + "/api/2.0/mlflow/runs/search", {"experiment_ids": [exp]})["runs"]
        assert sorted(r["info"]["run_name"] for r in found) == ["fast", "slow"]
        for r in found:
            q = f"run_id={r['info']['run_id']}&metric_key=race/starter/time"
            _, body = _get(f"{base}/api/2.0/mlflow/metrics/get-history?{q}")
            hist = [m["value"] for m in json.loads(body)["metrics"]]
            assert hist == TIMES[r["info"]["run_name"]]
        browser = find_browser()
        try:
            import playwright  # noqa: F401
        except ImportError:
            browser = None
        if browser is None:
            pytest.skip("no headless browser here (Playwright + system Chromium): API checked")
        runs = pick_runs(client, exp, ["fast", "slow"])
        files = screenshots(base, exp, runs, tmp_path, browser)
    finally:
        stop_ui(proc)
    from PIL import Image

    for f in files:
        im = Image.open(f).convert("L")
        lo, hi = im.getextrema()
        assert im.size == (1500, 820) and hi - lo > 100  # a rendered page, not a blank one
