"""One error type for bad configuration, so every entry point can print it as one line.

A ConfigError names the config key (``network.n_quantiles_train``) or the file at fault and
says what is wrong; scripts catch it before any process starts and exit with status 2.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from omegaconf import OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

T = TypeVar("T")


class ConfigError(ValueError):
    """A config value, key or file that trackmind cannot use."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}")


def first_line(e: BaseException) -> str:
    """An exception's first line (or its type's name), to quote inside a one-line error."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def require(condition: bool, key: str, message: str) -> None:
    """Raise ConfigError(key, message) unless condition holds."""
    if not condition:
        raise ConfigError(key, message)


def check_known_keys(given: dict, known: set[str] | list[str], prefix: str) -> None:
    """Reject keys a constructor does not take, naming the first unknown one."""
    for k in given:
        if k not in known:
            allowed = ", ".join(sorted(known))
            raise ConfigError(f"{prefix}.{k}", f"unknown key (allowed: {allowed})")


def check_schema(section: Mapping | None, schema: type[T], key: str) -> T:
    """The section as a validated `schema` instance; ConfigError naming `key.<field>`
    (`<field>` alone when `key` is "", for the config's top-level keys).

    The one way a config group is checked: the group's dataclass (its fields are the keys,
    mirroring what it configures) is merged with the composed section by OmegaConf (unknown
    keys and wrong types are refused, "30" becomes 30), then instantiated, so that its
    `__post_init__` checks ranges and relations (naming a field alone is enough: the error
    comes out under `key`).
    """
    require(section is None or isinstance(section, Mapping), key, "must be a mapping")
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), dict(section or {}))
        return OmegaConf.to_object(merged)  # type: ignore[return-value]
    except ConfigError as e:  # from __post_init__: a bare field name goes under `key`
        if not key or e.key == key or e.key.startswith((f"{key}.", f"{key}[")):
            raise
        raise ConfigError(f"{key}.{e.key}", e.message) from None
    except OmegaConfBaseException as e:
        sub = getattr(e, "full_key", None) or ""
        if not key:  # top-level keys: the key itself
            key, sub = sub, ""
        msg = (getattr(e, "msg", None) or str(e)).splitlines()[0]
        if isinstance(e, MissingMandatoryValue):
            msg = "missing: this key is required"
        elif "not in" in msg and sub:  # an unknown key: list the known ones
            known = ", ".join(sorted(schema.__dataclass_fields__))  # type: ignore[attr-defined]
            msg = f"unknown key (allowed: {known})"
        raise ConfigError(f"{key}.{sub}" if sub else key, msg) from None
