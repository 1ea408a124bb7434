"""probe: does anything answer at host:port? A plain TCP connection with a time limit.

A server that cannot be reached (a Ray head, an MLflow tracking server) must be named in one
line within seconds, before any process starts, instead of the minutes of retries their
clients spend.
"""

from __future__ import annotations

import socket


def probe(host: str, port: int, timeout_s: float) -> str | None:
    """None when a TCP connection to host:port opens within timeout_s, else the reason."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except TimeoutError:
        return f"no answer within {timeout_s:g} s"
    except OSError as e:
        return e.strerror or type(e).__name__
