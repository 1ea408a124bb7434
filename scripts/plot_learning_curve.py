"""Plot a run's learning curve from the MLflow store: greedy race time / reference vs wall time.

    python scripts/plot_learning_curve.py                       # latest run of `trackmind`
    python scripts/plot_learning_curve.py --run-id <id> --out docs/learning_curve.png

Reads the metric history of race/<map>/ratio (each greedy race) and prints the ratio
reached at given wall-clock marks (10, 20, 30 minutes by default).
"""

from __future__ import annotations

import sys

import matplotlib

from trackmind.cli import OneLineParser, positive_float

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402


def history(client: MlflowClient, run_id: str, key: str) -> list[tuple[float, float]]:
    """(seconds since the run started, value) of one metric."""
    run = client.get_run(run_id)
    t0 = run.info.start_time
    return [((m.timestamp - t0) / 1000.0, m.value) for m in client.get_metric_history(run_id, key)]


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(description=__doc__)
    ap.add_argument("--tracking-uri", default="sqlite:///outputs/mlflow.db")
    ap.add_argument("--experiment", default="trackmind")
    ap.add_argument("--run-id", default=None)
    ap.add_argument("--out", default="docs/learning_curve.png")
    ap.add_argument("--marks-min", type=positive_float(), nargs="+", default=[10, 20, 30])
    args = ap.parse_args(argv)
    client = MlflowClient(tracking_uri=args.tracking_uri)
    run_id = args.run_id
    if run_id is None:
        exp = client.get_experiment_by_name(args.experiment)
        if exp is None:
            print(f"no experiment {args.experiment!r} in {args.tracking_uri}", file=sys.stderr)
            return 2
        runs = client.search_runs([exp.experiment_id], order_by=["start_time DESC"], max_results=1)
        if not runs:
            print("no runs", file=sys.stderr)
            return 2
        run_id = runs[0].info.run_id
    run = client.get_run(run_id)
    maps = sorted({k.split("/")[1] for k in run.data.metrics if k.startswith("race/")})
    fig, ax = plt.subplots(figsize=(7, 4))
    for m in maps:
        ratio = history(client, run_id, f"race/{m}/ratio")
        finish = history(client, run_id, f"race/{m}/finish_rate")
        if ratio:
            ax.plot(
                [t / 60 for t, _ in ratio], [v for _, v in ratio], ".-", label=f"{m}: greedy race"
            )
        best = history(client, run_id, f"race/{m}/best_ratio")
        if best:
            ax.plot(
                [t / 60 for t, _ in best], [v for _, v in best], "-", alpha=0.6, label=f"{m}: best"
            )
        for mark in args.marks_min:
            before = [v for t, v in ratio if t <= mark * 60]
            rate = [v for t, v in finish if t <= mark * 60]
            shown = f"{before[-1]:.3f}" if before else "not finished"
            fr = f"{rate[-1]:.2f}" if rate else "-"
            print(f"{m} at {mark:g} min: greedy ratio {shown}, finish rate {fr}")
    ax.axhline(1.25, color="grey", ls="--", lw=0.8, label="1.25x target")
    ax.set_xlabel("wall time (min)")
    ax.set_ylabel("race time / reference time")
    ax.set_title(f"run {run.info.run_name or run_id[:8]}")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out} (run {run_id})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
