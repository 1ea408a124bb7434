"""Train an IQN agent: trackmind-train [group=option ...] [key=value ...].

(`python scripts/train.py` in a clone runs the same.)

    python scripts/train.py                          # defaults: starter map, iqn_cpu, sim
    python scripts/train.py debug=smoke              # the whole loop in under a minute
    python scripts/train.py map=hairpins learner.lr.points='[[0,5e-4]]'
    python scripts/train.py -m learner.replay_ratio=16,32   # a sweep, one MLflow run each
    python scripts/train.py -m hparams_search=optuna        # an Optuna search
    python scripts/train.py resume=outputs/2026-11-22/10-00-00   # continue a run (or a
                                                 # .ckpt file, or an MLflow run id)

The config is validated before any process starts: a bad value prints one line naming
the key and exits with status 2. Returns the objective (mean best greedy race time over the
reference time, lower is better) for sweepers.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import shutil
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from trackmind.defaults import conf_path
from trackmind.errors import ConfigError
from trackmind.sim.track import MapError

log = logging.getLogger("trackmind")


# the shipped config groups by their absolute path: hydra-core 1.3.0 (the declared minimum)
# reads an absolute config_path, but not a pkg:// one
@hydra.main(version_base="1.3", config_path=str(conf_path()), config_name="train")
def main(cfg: DictConfig) -> float:
    from trackmind.training.factory import plan_run, to_plain
    from trackmind.training.run import train

    hc = HydraConfig.get()
    overrides = list(hc.overrides.task)
    resume = None
    try:
        if cfg.get("resume"):
            resume, cfg = resumed_config(to_plain(cfg), overrides)
        plan = plan_run(cfg)
    except (ConfigError, MapError) as e:
        print(f"config error: {e}", file=sys.stderr)
        discard_empty_run_dir(hc)
        sys.exit(2)
    # the run name says what differs between runs; where results are stored does not
    named = [o for o in overrides if not o.lstrip("+~").startswith(("logger.", "hydra."))]
    run_name = plan.run.run_name or (",".join(named) if named else "defaults")
    tags = {"overrides": " ".join(overrides) or "(defaults)", "hydra_output": hc.runtime.output_dir}
    if hc.mode is not None and hc.mode.name == "MULTIRUN":  # a sweep: group its jobs
        tags.update(sweep_dir=str(hc.sweep.dir), sweep_job=str(hc.job.num))
    try:
        return train(plan, hc.runtime.output_dir, run_name[:250], tags=tags, resume=resume)
    except ConfigError as e:  # found once the parts exist (e.g. a checkpoint's network shape)
        print(f"config error: {e}", file=sys.stderr)
        discard_empty_run_dir(hc)
        sys.exit(2)


def resumed_config(composed: dict, overrides: list[str]):
    """(checkpoint path, config): the saved run's config with this command's key overrides."""
    from trackmind.errors import check_schema
    from trackmind.tracking.logger_config import LoggerConfig
    from trackmind.training.checkpoint import find_checkpoint, merge_resume_config, read_checkpoint
    from trackmind.training.schema import TrainConfig

    top = check_schema(composed, TrainConfig, "")
    logger = check_schema(top.logger, LoggerConfig, "logger")  # its store holds the run
    uri = logger.tracking_uri if logger.backend == "mlflow" else None
    path = find_checkpoint(str(top.resume), uri)
    saved = read_checkpoint(path)["trackmind"]["config"]
    return path, {**merge_resume_config(saved, composed, overrides), "resume": str(path)}


def unknown_group_option(argv: list[str], conf_dir: Path) -> str | None:
    """One line for a `group=option` override whose option does not exist, else None.

    Hydra reports a missing option in many lines (and exit status 1); this check runs first
    and names the group's options instead. A map file or a procedural map is no option of
    the map group: it goes in the cycle (`map.cycle='[{map: path.csv}]'`).
    """
    groups = {p.name for p in conf_dir.iterdir() if p.is_dir()}
    for arg in argv:
        key, eq, value = arg.lstrip("+").partition("=")
        if not eq or key not in groups or value in ("null", "") or "(" in value:
            continue  # not a group choice (or a sweep function: Hydra checks it)
        missing = [v for v in value.split(",") if not (conf_dir / key / f"{v}.yaml").is_file()]
        if not missing:
            continue  # an option, or a sweep over options (a,b) that all exist
        value = missing[0]
        options = ", ".join(sorted(p.stem for p in (conf_dir / key).glob("*.yaml")))
        hint = ""
        if key == "map":
            hint = (
                "; a map file or procedural:<seed> goes in the cycle: "
                "map.cycle='[{map: path/to/map.csv}]' or map.cycle='[{map: procedural:7}]'"
            )
        return f"config error: {arg}: no {key} option {value!r} (options: {options}){hint}"
    return None


def discard_empty_run_dir(hc) -> None:
    """Remove the output dir Hydra made for a run refused before it started.

    Hydra creates it (its .hydra/ copy of the config and the job's log) before main() runs;
    a typo should not leave an empty run behind. A sweep's job dirs are the sweeper's.
    """
    if hc.mode is not None and hc.mode.name == "MULTIRUN":
        return
    out = Path(hc.runtime.output_dir)
    if not out.is_dir() or any(p.name != ".hydra" and p.suffix != ".log" for p in out.iterdir()):
        return
    shutil.rmtree(out, ignore_errors=True)
    with contextlib.suppress(OSError):
        out.parent.rmdir()  # the day's folder, if this was its only run


def missing_extra(argv: list[str]) -> str | None:
    """One line when an override needs an optional feature that is not installed."""
    wants_optuna = any(
        a.endswith(("hparams_search=optuna", "hydra/sweeper=trackmind_optuna")) for a in argv
    )
    if wants_optuna and importlib.util.find_spec("optuna") is None:
        return (
            "config error: hparams_search=optuna needs Optuna, an optional feature: "
            "pip install 'trackmind[sweep]'"
        )
    return None


def override_problem(argv: list[str], conf_dir: Path) -> str | None:
    """One line for an override Hydra cannot apply (Hydra's own report is many lines).

    Composes the config once with the command's overrides and prints Hydra's own words, which
    name the key, on one line. A sweep (-m, hydra.mode=MULTIRUN) or any other flag is left to
    Hydra, whose sweep syntax composes only job by job.
    """
    if any(a.startswith(("-", "hydra.mode=")) for a in argv):
        return None
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    try:
        with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
            compose("train", overrides=argv)
        return None
    except Exception as e:  # Hydra's and OmegaConf's errors share no base class
        said = one_line(e)
        bad = unparsable_override(argv)  # the grammar's message does not name the override
        return (
            f"config error: {bad}: not a valid override ({said})"
            if bad
            else f"config error: {said}"
        )
    finally:
        GlobalHydra.instance().clear()


def one_line(e: BaseException) -> str:
    """Hydra's message on one line: its first two lines, and the first of its cause's."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()][:2]
    cause = [ln.strip() for ln in str(e.__cause__ or "").splitlines() if ln.strip()]
    return " ".join(lines) + (f" ({cause[0]})" if cause else "")


def unparsable_override(argv: list[str]) -> str | None:
    """The first override Hydra's grammar cannot read, else None."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for arg in argv:
        try:
            parser.parse_overrides([arg])
        except Exception:
            return arg
    return None


def precheck(argv: list[str], conf_dir: Path) -> str | None:
    """The command line's problem in one line, before Hydra starts a run, else None."""
    return (
        unknown_group_option(argv, conf_dir)
        or missing_extra(argv)
        or override_problem(argv, conf_dir)
    )


def cli() -> None:
    """`trackmind-train` and `python scripts/train.py`: the precheck, then Hydra's run."""
    problem = precheck(sys.argv[1:], conf_path())
    if problem:
        print(problem, file=sys.stderr)
        sys.exit(2)
    main()


if __name__ == "__main__":
    cli()
