"""Frames of the real game: a small FrameCapture interface and its implementations.

The network wants (1, H, W) uint8 grayscale. How the picture is taken depends on the
machine, so the backend only sees `grab()`:
- WindowCapture: the client area of the game window (Windows; pywin32 finds the window,
  mss grabs the screen), the i-th TrackMania window for game instance i.
- RegionCapture: a fixed screen rectangle per instance (any desktop mss supports, also an
  X11 desktop with the game under Wine).
- StandinCapture: the stand-in game's rendered view (tests).
- NullCapture: no frames (float-only networks).
The optional packages (mss, pywin32) are imported only when such a capture is built.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from trackmind.errors import ConfigError
from trackmind.tmi.config import CaptureConfig

GRAY_WEIGHTS = np.array([0.299, 0.587, 0.114])  # ITU-R BT.601 luma of R, G, B


class FrameCapture(Protocol):
    """Takes the current picture of one game as (1, H, W) uint8."""

    shape: tuple[int, int]

    def grab(self) -> np.ndarray: ...

    def close(self) -> None: ...


def to_gray(image: np.ndarray, channels: str = "bgra") -> np.ndarray:
    """(h, w) float luma of an (h, w) gray or (h, w, C) colour image in `channels` order."""
    img = np.asarray(image)
    if img.ndim == 2:
        return img.astype(np.float64)
    if img.ndim != 3 or img.shape[2] != len(channels):
        raise ValueError(f"image of shape {img.shape} does not match channels {channels!r}")
    rgb = np.stack([img[..., channels.index(c)] for c in "rgb"], axis=-1).astype(np.float64)
    return rgb @ GRAY_WEIGHTS


def _bins(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    """Start index and size of each output pixel's input span (size 0 when upscaling)."""
    starts = (np.arange(n_out) * n_in) // n_out
    sizes = np.diff(np.r_[starts, n_in])
    return starts, sizes


def resize_area(gray: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Mean of each output pixel's input rectangle (area resampling); nearest when enlarging."""
    h, w = shape
    rs, rn = _bins(gray.shape[0], h)
    cs, cn = _bins(gray.shape[1], w)
    rows = np.add.reduceat(gray, rs, axis=0) / np.maximum(rn, 1)[:, None]
    return np.add.reduceat(rows, cs, axis=1) / np.maximum(cn, 1)[None, :]


def to_frame(image: np.ndarray, shape: tuple[int, int], channels: str = "bgra") -> np.ndarray:
    """A screenshot as the network's (1, H, W) uint8 grayscale frame."""
    small = resize_area(to_gray(image, channels), shape)
    return np.clip(np.rint(small), 0, 255).astype(np.uint8)[None]


class NullCapture:
    """No frames: (1, 0, 0)."""

    shape = (0, 0)

    def grab(self) -> np.ndarray:
        return np.zeros((1, 0, 0), np.uint8)

    def close(self) -> None:
        pass


class StandinCapture:
    """The view the stand-in game renders for `server`, resized to `shape`."""

    def __init__(self, server: str, shape: tuple[int, int]) -> None:
        self.server = server
        self.shape = tuple(shape)

    def grab(self) -> np.ndarray:
        from trackmind.tmi.standin import find_standin

        game = find_standin(self.server)
        if game is None or game.sim.frame_shape == (0, 0):
            return np.zeros((1, *self.shape), np.uint8)
        frame = game.frame()
        if frame.shape[1:] != self.shape:
            frame = to_frame(frame[0], self.shape)
        return frame

    def close(self) -> None:
        pass


def _mss(key: str) -> Any:
    try:
        import mss
    except ImportError:
        raise ConfigError(
            key, "screen capture needs the optional package mss (pip install mss)"
        ) from None
    return mss.mss()


class RegionCapture:
    """A fixed screen rectangle (left, top, width, height) in pixels."""

    def __init__(
        self, region: tuple[int, int, int, int], shape: tuple[int, int], key: str = "capture"
    ) -> None:
        left, top, width, height = (int(v) for v in region)
        self.monitor = {"left": left, "top": top, "width": width, "height": height}
        self.shape = tuple(shape)
        self._sct = _mss(key)

    def grab(self) -> np.ndarray:
        return to_frame(np.asarray(self._sct.grab(self.monitor)), self.shape, "bgra")

    def close(self) -> None:
        self._sct.close()


class WindowCapture:
    """The client area of the `index`-th game window whose title starts with `title`.

    Windows are ordered by process id, which is the order the games were launched in, so
    instance i (server TMInterface<i>) reads window i. The window is looked up again when
    it moved or was closed.
    """

    def __init__(
        self, title: str, index: int, shape: tuple[int, int], key: str = "capture"
    ) -> None:
        try:
            import win32gui
            import win32process
        except ImportError:
            raise ConfigError(
                key,
                "window capture needs Windows and the optional package pywin32 "
                "(pip install pywin32 mss); elsewhere use method: region",
            ) from None
        self._gui, self._proc = win32gui, win32process
        self.title, self.index, self.shape = title, int(index), tuple(shape)
        self._sct = _mss(key)
        self._hwnd: int | None = None

    def _find(self) -> int:
        found: list[tuple[int, int]] = []

        def visit(hwnd: int, _: Any) -> bool:
            if self._gui.IsWindowVisible(hwnd) and self._gui.GetWindowText(hwnd).startswith(
                self.title
            ):
                found.append((self._proc.GetWindowThreadProcessId(hwnd)[1], hwnd))
            return True

        self._gui.EnumWindows(visit, None)
        found.sort()
        if len(found) <= self.index:
            raise RuntimeError(
                f"found {len(found)} window(s) titled {self.title!r}, need game {self.index}"
            )
        return found[self.index][1]

    def _rect(self) -> dict:
        if self._hwnd is None or not self._gui.IsWindow(self._hwnd):
            self._hwnd = self._find()
        _, _, w, h = self._gui.GetClientRect(self._hwnd)
        left, top = self._gui.ClientToScreen(self._hwnd, (0, 0))
        return {"left": left, "top": top, "width": w, "height": h}

    def grab(self) -> np.ndarray:
        return to_frame(np.asarray(self._sct.grab(self._rect())), self.shape, "bgra")

    def close(self) -> None:
        self._sct.close()


def make_capture(
    cfg: CaptureConfig,
    frame_shape: tuple[int, int] | None,
    instance: int,
    server: str,
    key: str,
) -> FrameCapture:
    """The capture `cfg` (env.tminterface.capture) asks for, for game `instance`."""
    method = cfg.method
    if frame_shape is None or method == "none":
        return NullCapture()
    if method == "standin":
        return StandinCapture(server, frame_shape)
    if method == "region":
        regions = cfg.regions or []
        if not regions:
            raise ConfigError(f"{key}.regions", "method region needs [[left, top, w, h], ...]")
        return RegionCapture(regions[instance % len(regions)], frame_shape, key)
    if method == "window":
        return WindowCapture(cfg.window_title, instance, frame_shape, key)
    raise ConfigError(f"{key}.method", f"unknown method {method!r} (window, region, standin, none)")
