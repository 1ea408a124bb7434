"""The MLflow tracking URI, checked when the run is planned.

MLflow accepts a URI of an unknown scheme until its first call, then fails in two
tracebacks; a tracking server that does not answer makes its client retry for minutes. Both
are named here in one line, in seconds, before any process starts.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from trackmind.errors import ConfigError
from trackmind.netprobe import probe

KEY = "logger.tracking_uri"
# MLflow's stores: a file folder, a database (SQLAlchemy dialects, with or without a driver:
# postgresql+psycopg2), a tracking server, Databricks
SCHEMES = ("file", "sqlite", "postgresql", "mysql", "mssql", "http", "https", "databricks")
HINT = "use sqlite:///outputs/mlflow.db, or http://HOST:PORT of a running `mlflow server`"


def uri_scheme(uri: str) -> str:
    """The store kind of a tracking URI: its scheme without a driver ('' for a bare path)."""
    return urlsplit(uri).scheme.split("+", 1)[0].lower() if "://" in uri else ""


def check_tracking_uri(uri: str, timeout_s: float = 3.0) -> None:
    """ConfigError at logger.tracking_uri for an unknown scheme, or a tracking server that
    does not answer within `timeout_s` (a TCP connection to its host and port)."""
    scheme = uri_scheme(uri)
    if scheme and scheme not in SCHEMES and not scheme.startswith("databricks"):
        raise ConfigError(KEY, f"{uri!r}: MLflow has no store of scheme {scheme!r}; {HINT}")
    if scheme not in ("http", "https"):
        return
    parts = urlsplit(uri)
    if not parts.hostname:
        raise ConfigError(KEY, f"{uri!r}: no host in the URI; {HINT}")
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError as e:
        raise ConfigError(KEY, f"{uri!r}: {e}; {HINT}") from None
    why = probe(parts.hostname, port, timeout_s)
    if why is not None:
        raise ConfigError(
            KEY,
            f"no MLflow tracking server answers at {parts.hostname}:{port} ({why}): start it "
            "(make mlflow-ui) or log to sqlite:///outputs/mlflow.db",
        )
