"""logger.tracking_uri checked when the run is planned: a store MLflow knows, and a tracking
server that answers, each refused in one line within seconds."""

from __future__ import annotations

import socket
import time

import pytest

from trackmind.errors import ConfigError
from trackmind.tracking.tracking_uri import check_tracking_uri, uri_scheme


def test_scheme_of_each_kind_of_store():
    assert uri_scheme("sqlite:///outputs/mlflow.db") == "sqlite"
    assert uri_scheme("postgresql+psycopg2://u@h/db") == "postgresql"
    assert uri_scheme("HTTP://127.0.0.1:5000") == "http"
    assert uri_scheme("outputs/mlruns") == ""  # a bare folder: MLflow's file store
    for ok in ("sqlite:///x.db", "file:///tmp/mlruns", "mlruns", "databricks", "databricks-uc"):
        check_tracking_uri(ok)


def test_an_unknown_scheme_is_one_line_naming_the_key():
    with pytest.raises(ConfigError, match=r"^logger.tracking_uri: 'foo://x': MLflow has no store"):
        check_tracking_uri("foo://x")


def test_a_server_that_answers_passes_and_one_that_does_not_is_named_in_seconds():
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        check_tracking_uri(f"http://127.0.0.1:{port}")
    t0 = time.monotonic()  # the socket is closed: nothing answers there now
    with pytest.raises(ConfigError, match=f"no MLflow tracking server answers at 127.0.0.1:{port}"):
        check_tracking_uri(f"http://127.0.0.1:{port}", timeout_s=2.0)
    assert time.monotonic() - t0 < 3.0
    with pytest.raises(ConfigError, match="no host"):
        check_tracking_uri("http://:5000")
    with pytest.raises(ConfigError, match="^logger.tracking_uri: 'http://h:99999'"):
        check_tracking_uri("http://h:99999")
