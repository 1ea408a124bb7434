"""The shipped defaults: the YAML files of conf/, read where no Hydra config is at hand.

conf/ is installed with the package as `trackmind.conf` (pyproject.toml's package-dir maps
the repository's conf/ there; an editable install reads the repository's files), so code run
without Hydra (``gymnasium.make("trackmind/Race-v0")``, SimGame's zone spacing, the TMInterface
checks) takes its defaults from the very files `scripts/train.py` composes: each default is
written once, in YAML. The game's own step is not one of them: it is the GameInstance
contract's (game/contract.py TICK_MS, TICKS_PER_ACTION).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any, TypeVar

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from trackmind.errors import ConfigError, check_schema, first_line, require

T = TypeVar("T")

# the options that stand for "the defaults" outside Hydra: the built-in simulator seen through
# Linesight's inputs, and Linesight's reward (train.yaml's default reward adds a speed potential)
ENV_OPTION = ("env", "sim")
REWARD_OPTION = ("reward", "linesight")


@cache
def _option(group: str, option: str) -> dict:
    text = files("trackmind.conf").joinpath(group, f"{option}.yaml").read_text()
    return yaml.safe_load(text) or {}


def conf_path() -> Path:
    """The folder of the shipped config groups (the repository's conf/ in a clone)."""
    return Path(str(files("trackmind.conf")))


def conf_option(group: str, option: str) -> dict:
    """conf/<group>/<option>.yaml as a dict (a fresh copy: callers may change it)."""
    return copy.deepcopy(_option(group, option))


def env_defaults() -> dict:
    """The `env` group's defaults (conf/env/sim.yaml)."""
    return conf_option(*ENV_OPTION)


def reward_defaults() -> dict:
    """The `reward` group's defaults outside Hydra (conf/reward/linesight.yaml)."""
    return conf_option(*REWARD_OPTION)


def checked_with_defaults(section: Any, defaults: Mapping, schema: type[T], key: str) -> T:
    """`section` checked against `schema` with the shipped `defaults` under it.

    The given keys win; nested sections are merged key by key, so a user who sets one key of a
    nested section keeps the defaults of the others. Each default stays written once, in YAML.
    """
    require(section is None or isinstance(section, Mapping), key, "must be a mapping")
    merged = OmegaConf.create(dict(defaults))
    for name, value in dict(section or {}).items():  # key by key, so an error names its key
        where = f"{key}.{name}"
        try:
            given = OmegaConf.create({name: value})
            # a merge would fill a "???" with the default: say it is missing instead
            require(not OmegaConf.is_missing(given, name), where, "is missing (???)")
            merged = OmegaConf.merge(merged, given)
        except OmegaConfBaseException as e:  # a scalar where a section belongs, and the like
            raise ConfigError(where, first_line(e)) from None
    return check_schema(OmegaConf.to_container(merged), schema, key)


def exploration_extra(section: Any, name: str, schema: type[T]) -> T:
    """An `exploration.<name>` section with a `share` (mid-track starts, demonstrations)
    checked; keys it leaves out take conf/exploration/fast.yaml's values, and an exploration
    option without the section has it off (share 0)."""
    defaults = conf_option("exploration", "fast")[name]
    if section is None:
        defaults["share"] = 0.0
    return checked_with_defaults(section, defaults, schema, f"exploration.{name}")
