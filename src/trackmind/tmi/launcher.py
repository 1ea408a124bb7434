"""Restarting a game that hung or closed, from the launch command in the config.

A real Trackmania sometimes freezes, crashes or loses its TMInterface connection; a long
run must survive that. The launch command is a template: `{server}` becomes the TMInterface
server name and `{index}` the game instance, e.g.

    launch_command: '"C:/Games/TMInterface/TMInterface.exe"'
    kill_command: 'taskkill /F /T /PID {pid}'

TMInterface 1.x names servers in start order (TMInterface0, TMInterface1, ...), so a
restarted game gets the first free name again. Only processes this launcher started are
killed; games the user started are left alone.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
from typing import Any, Protocol

log = logging.getLogger(__name__)


class GameLauncher(Protocol):
    """Starts and stops the game behind one TMInterface server."""

    def launch(self) -> None: ...

    def kill(self) -> None: ...

    def restart(self) -> None: ...

    def close(self) -> None: ...


def fill(template: str, posix: bool | None = None, **values: Any) -> list[str]:
    """The command line of a template with {server}, {index}, {pid} filled in, split.

    Windows rules by default on Windows: backslashes stay path separators, and quotes
    around an argument (a path with spaces) are removed from it.
    """
    text = template.format(**values)
    posix = os.name != "nt" if posix is None else posix
    if posix:
        return shlex.split(text)
    return [
        a[1:-1] if len(a) > 1 and a[0] == a[-1] == '"' else a
        for a in shlex.split(text, posix=False)
    ]


class CommandLauncher:
    """Runs the configured launch command; kills what it started (or runs kill_command)."""

    def __init__(
        self, command: str, server: str, index: int, kill_command: str | None = None
    ) -> None:
        self.command, self.kill_command = command, kill_command
        self.server, self.index = server, int(index)
        self.proc: subprocess.Popen | None = None

    def launch(self) -> None:
        args = fill(self.command, server=self.server, index=self.index, pid="")
        log.warning("%s: starting the game: %s", self.server, " ".join(args))
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=os.name != "nt",
        )

    def kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if self.kill_command:
            args = fill(self.kill_command, server=self.server, index=self.index, pid=proc.pid)
            subprocess.run(args, check=False, timeout=30, capture_output=True)
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    def restart(self) -> None:
        self.kill()
        self.launch()

    def close(self) -> None:
        self.kill()


class StandinLauncher:
    """Starts stand-in games (trackmind.tmi.standin) instead of processes."""

    def __init__(self, server: str, settings: dict) -> None:
        self.server, self.settings = server, dict(settings)
        self.launched = 0

    def launch(self) -> None:
        from trackmind.tmi.standin import start_standin

        start_standin(self.server, **self.settings)
        self.launched += 1

    def kill(self) -> None:
        from trackmind.tmi.standin import stop_standin

        stop_standin(self.server)

    def restart(self) -> None:
        self.kill()
        self.launch()

    def close(self) -> None:
        if self.launched:
            self.kill()
