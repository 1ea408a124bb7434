"""Connecting a RaceClient to a TMInterface server (the real one or the stand-in).

The interface object is made by a factory so that the stand-in can replace
`tminterface.interface.TMInterface` (Windows named shared memory, unreachable elsewhere).
A server that does not register the client within the timeout is reported in one line;
the half-open interface is stopped so that its thread does not spin on after the failure.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

InterfaceFactory = Callable[[str], Any]
S_RESPONSE_READY = 1 | 0xFF00  # what TMInterface writes when it answers a call


class GameUnavailable(RuntimeError):
    """No game answers on a TMInterface server; the message is one line saying which."""


def tminterface_factory() -> InterfaceFactory:
    """The real TMInterface 1.x interface (tminterface package; Windows or Wine)."""
    from tminterface.interface import TMInterface

    return lambda server: TMInterface(server)


def standin_factory(autostart: dict | None = None) -> InterfaceFactory:
    """Stand-in interfaces; with `autostart` a missing stand-in game is started."""
    from trackmind.tmi.standin import StandinInterface

    return lambda server: StandinInterface(server, autostart)


def abandon(iface: Any) -> None:
    """Stop an interface whose server never answered or went silent, so that its thread
    does not spin or wait on after the failure."""
    try:
        iface.close()
    except Exception:  # a half-open interface may fail to deregister: it is dropped anyway
        pass
    iface.running = False
    mfile = getattr(iface, "mfile", None)
    if mfile is not None:  # the real interface waits on its shared memory: answer for it
        try:
            mfile.seek(0)
            mfile.write(struct.pack("i", S_RESPONSE_READY))
        except (OSError, ValueError):
            pass


def connect(make_iface: InterfaceFactory, server: str, client: Any, timeout_s: float) -> Any:
    """Register `client` on `server`; GameUnavailable when it does not answer in time."""
    iface = make_iface(server)
    iface.register(client)
    if client.wait_registered(timeout_s):
        return iface
    abandon(iface)
    detail = f" (last error: {client.last_exception})" if client.last_exception else ""
    raise GameUnavailable(
        f"TMInterface server {server!r} did not answer within {timeout_s:g} s{detail}"
    )
