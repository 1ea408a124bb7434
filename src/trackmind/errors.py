"""One error type for bad configuration, so every entry point can print it as one line.

A ConfigError names the config key (``network.n_quantiles_train``) or the file at fault and
says what is wrong; scripts catch it before any process starts and exit with status 2.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A config value, key or file that trackmind cannot use."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
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
