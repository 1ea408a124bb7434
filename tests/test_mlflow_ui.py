"""The MLflow UI against a real store with two runs: served on 127.0.0.1, runs and race times.

The server is the real `mlflow server`; the runs are written with the tracking client as a
training run writes them. With Playwright and a system Chromium present, the page is also
photographed in a headless browser (scripts/mlflow_ui_screenshot.py makes docs/ pictures).
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from trackmind.tracking.mlflow_run import ML_VIEW

ROOT = Path(__file__).resolve().parents[1]

from mlflow_ui_screenshot import (  # noqa: E402
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


@pytest.fixture(scope="module")
def server(store):
    """A real `mlflow server` on 127.0.0.1 over the store; its base URL."""
    port = free_port()
    proc = start_ui(store[0], port)
    yield f"http://127.0.0.1:{port}"
    stop_ui(proc)


def test_ui_serves_both_runs_and_their_race_times(store, server, tmp_path):
    _, exp, client = store
    base = server
    status, html = _get(base + "/")
    assert status == 200 and '<div id="root"' in html  # the UI's single-page app
    found = _post(base + "/api/2.0/mlflow/runs/search", {"experiment_ids": [exp]})["runs"]
    assert sorted(r["info"]["run_name"] for r in found) == ["fast", "slow"]
    for r in found:  # the endpoint the UI's charts read (plain get-history without
        # max_results returns nothing on MLflow 3.4-3.13: mlflow/mlflow#23916)
        q = urllib.parse.urlencode(
            {"run_ids": r["info"]["run_id"], "metric_key": "race/starter/time", "max_results": 100}
        )
        _, body = _get(f"{base}/ajax-api/2.0/mlflow/metrics/get-history-bulk-interval?{q}")
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
    from PIL import Image

    for f in files:
        im = Image.open(f).convert("L")
        lo, hi = im.getextrema()
        assert im.size == (1500, 820) and hi - lo > 100  # a rendered page, not a blank one


def test_parallel_jobs_share_one_store_through_the_server(store, server, tmp_path):
    """Two training jobs at once, as a parallel launcher runs them, with logger=mlflow_server:
    both create-or-find the same new experiment, the server serialises their writes, and
    both runs end complete in the store."""
    client = store[2]
    jobs: list[subprocess.Popen] = []
    try:
        jobs = [
            subprocess.Popen(
                [
                    sys.executable,
                    str(ROOT / "scripts" / "train.py"),
                    "debug=smoke",
                    "logger=mlflow_server",
                    f"logger.tracking_uri={server}",
                    "logger.experiment_name=parallel",
                    f"logger.artifact_location={tmp_path / 'artifacts'}",
                    "logger.system_metrics_every_s=0",
                    f"hydra.run.dir={tmp_path / f'job{i}'}",
                    f"seed={i}",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(2)
        ]
        outs = [job.communicate(timeout=400) for job in jobs]
    finally:
        for job in jobs:
            if job.poll() is None:
                job.kill()
    for job, (_, err) in zip(jobs, outs, strict=True):
        assert job.returncode == 0, err[-3000:]
    exp = client.get_experiment_by_name("parallel")
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 2 and {r.info.status for r in runs} == {"FINISHED"}
    assert sorted(r.data.params["seed"] for r in runs) == ["0", "1"]
    for r in runs:
        assert client.get_metric_history(r.info.run_id, "train/loss")
        assert "race/starter/time" in r.data.metrics or "race/starter/progress" in r.data.metrics


@pytest.mark.parametrize("pre_existing", [False, True])
def test_concurrent_jobs_find_or_create_one_tagged_experiment(store, server, pre_existing):
    """Eight jobs at once ask for one experiment through the server (the race a parallel
    launcher makes, which once failed a job on the experiment tag's unique key): all get the
    same id, no error, and the experiment opens in the training view. With an experiment
    made elsewhere without the tag, the jobs race to add it and none fails."""
    from concurrent.futures import ThreadPoolExecutor

    from trackmind.tracking.mlflow_run import ensure_experiment

    name = f"race-{pre_existing}"
    client = store[2]
    if pre_existing:
        from mlflow.tracking import MlflowClient

        MlflowClient(tracking_uri=server).create_experiment(name)
    with ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(lambda _: ensure_experiment(server, name, None), range(8)))
    exp = client.get_experiment_by_name(name)
    assert set(ids) == {exp.experiment_id}
    assert exp.tags[ML_VIEW[0]] == ML_VIEW[1]
