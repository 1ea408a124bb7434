"""StateStore: every race state (frame, floats, potential) stored once, in a FIFO ring.

Frames can live on the learner's GPU (``device="cuda"``): they are 99% of a state's bytes,
and a batch of 512 mini-races gathers 1,024 of them (20 MB at 1x120x160), a host copy and a
pin on every batch. On the GPU the gather is one index_select and nothing large crosses the
bus at sampling time (docs/gpu.md); floats and potentials stay on the host, where the
mini-race collate reads them.

States get global ids (gid) in the order they are written; a transition refers to its state
by gid and to its next state by gid + n_steps. Row of a gid: (gid - base) % rows, where base
is the gid stored in row 0 when this layout was made. A gid is live while fewer than
``rows`` states were written after it; the buffer drops transitions whose state is no
longer live (see TransitionBuffer), so nobody reads an overwritten row.
"""

from __future__ import annotations

import numpy as np
import torch


def _as_array(x: np.ndarray | torch.Tensor, dtype: type) -> np.ndarray:
    a = x.cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    return a.astype(dtype, copy=False)


NO_FRAMES = (0,)  # frame shape of a store for networks without an image


class StateStore:
    """Ring of ``rows`` states: frames (rows, *frame_shape) uint8, floats (rows, F) float32.

    ``frame_shape=None`` stores no frames (float-only networks); frames given are ignored.
    ``device`` is where the frames live (the rest stays on the host); gathered frames come
    back on it.
    """

    def __init__(
        self,
        rows: int,
        frame_shape: tuple[int, ...] | None,
        float_dim: int,
        device: str | torch.device = "cpu",
    ) -> None:
        if rows < 1:
            raise ValueError(f"StateStore needs at least one row, got {rows}")
        self.rows = int(rows)
        self.frame_shape = NO_FRAMES if frame_shape is None else tuple(int(s) for s in frame_shape)
        self.float_dim = int(float_dim)
        self.device = torch.device(device)
        # torch.empty only reserves address space: pages become resident as rows are written
        self.frames = torch.empty(
            (self.rows, *self.frame_shape), dtype=torch.uint8, device=self.device
        )
        self.floats = torch.empty((self.rows, self.float_dim), dtype=torch.float32)
        self.potential = torch.empty((self.rows,), dtype=torch.float32)
        self._frames = self.frames.numpy() if self.device.type == "cpu" else None
        self._copy_stream: torch.cuda.Stream | None = None  # GPU frames: made at first append
        # GPU frames: per stream, an event after its last gather, which a later overwrite of
        # rows waits for (gathers run on the prefetch thread's stream, writes on their own)
        self._gathered: dict[int, torch.cuda.Event] = {}
        self._floats = self.floats.numpy()
        self._potential = self.potential.numpy()
        self.base = 0
        self.written = 0
        self._first = 0  # oldest gid held by this layout (later gids only)

    @property
    def has_frames(self) -> bool:
        return self.frame_shape != NO_FRAMES

    @property
    def lo(self) -> int:
        """Oldest live gid."""
        return max(self._first, self.written - self.rows)

    @property
    def row_nbytes(self) -> int:
        return int(np.prod(self.frame_shape)) + 4 * self.float_dim + 4

    @property
    def nbytes(self) -> int:
        return self.rows * self.row_nbytes

    def append(
        self,
        frames: np.ndarray | torch.Tensor,
        floats: np.ndarray | torch.Tensor,
        potential: np.ndarray | torch.Tensor,
    ) -> int:
        """Write k states after the newest; returns the gid of the first one."""
        floats = _as_array(floats, np.float32)
        potential = _as_array(potential, np.float32)
        k = len(floats)
        frames = _as_array(frames, np.uint8) if self.has_frames else np.empty((k, 0), np.uint8)
        if tuple(frames.shape) != (k, *self.frame_shape):
            raise ValueError(
                f"frames of shape {tuple(frames.shape[1:])}, store holds {self.frame_shape}"
            )
        if tuple(floats.shape) != (k, self.float_dim) or tuple(potential.shape) != (k,):
            raise ValueError(
                f"floats {tuple(floats.shape)} / potential {tuple(potential.shape)} do not match "
                f"{k} states of {self.float_dim} floats"
            )
        first_gid = self.written
        skip = max(0, k - self.rows)  # more states than rows: only the newest survive
        start = (first_gid + skip - self.base) % self.rows
        done = skip
        while done < k:
            n = min(k - done, self.rows - start)
            dst = slice(start, start + n)
            if self._frames is not None:
                self._frames[dst] = frames[done : done + n]
            elif self.has_frames:
                self._copy_to_device(self.frames[dst], frames[done : done + n])
            self._floats[dst] = floats[done : done + n]
            self._potential[dst] = potential[done : done + n]
            done += n
            start = 0
        self.written += k
        return first_gid

    def _copy_to_device(self, dst: torch.Tensor, src: np.ndarray) -> None:
        """Frames into GPU rows, done when this returns, without waiting for the learner.

        A plain copy would queue on the learner's stream behind the step in flight and hold
        the learner's thread (which adds races between steps) until that step ends, leaving
        the GPU idle while the thread catches up. On a stream of its own the copy waits only
        for itself."""
        if self.device.type != "cuda":  # a tensor store off the GPU: a plain copy
            dst.copy_(torch.from_numpy(src))
            return
        if self._copy_stream is None:
            self._copy_stream = torch.cuda.Stream(self.device)
        for done in list(self._gathered.values()):  # rows a gather in flight may still read
            self._copy_stream.wait_event(done)
        with torch.cuda.stream(self._copy_stream):
            dst.copy_(torch.from_numpy(src))
        self._copy_stream.synchronize()

    def gather(self, gids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Frames (on the store's device), floats and potentials of live gids (fresh tensors).

        numpy does the host copying: it runs on the calling thread, where torch's parallel
        index_select stalls for milliseconds when other processes keep the cores busy.
        """
        rows = np.remainder(gids.numpy() - self.base, self.rows)
        if self._frames is not None:
            frames = torch.from_numpy(self._frames.take(rows, axis=0))
        else:
            frames = self.frames.index_select(0, torch.from_numpy(rows).to(self.device))
            if self.device.type == "cuda":  # ordered before later writes, and before a free
                stream = torch.cuda.current_stream(self.device)
                self.frames.record_stream(stream)
                done = torch.cuda.Event()
                done.record(stream)
                self._gathered[stream.stream_id] = done
        return (
            frames,
            torch.from_numpy(self._floats.take(rows, axis=0)),
            torch.from_numpy(self._potential.take(rows, axis=0)),
        )

    def export(self, from_gid: int) -> dict:
        """States from_gid..written-1 in order (copies), for resizing and checkpoints."""
        if from_gid < self.lo:
            raise ValueError(f"gid {from_gid} is no longer live (oldest live is {self.lo})")
        gids = torch.arange(from_gid, self.written)
        frames, floats, potential = self.gather(gids)
        return {
            "frames": frames.cpu(),
            "floats": floats,
            "potential": potential,
            "first_gid": from_gid,
            "written": self.written,
        }

    @classmethod
    def from_export(
        cls,
        data: dict,
        rows: int,
        frame_shape: tuple[int, ...] | None,
        float_dim: int,
        device: str | torch.device = "cpu",
    ) -> StateStore:
        """A store of ``rows`` rows holding exported states from row 0 on."""
        n = len(data["floats"])
        if n > rows:
            raise ValueError(f"{n} states do not fit in {rows} rows")
        if int(data["written"]) - int(data["first_gid"]) != n:
            raise ValueError("exported states are not contiguous")
        store = cls(rows, frame_shape, float_dim, device)
        store.base = store._first = store.written = int(data["first_gid"])
        store.append(data["frames"], data["floats"], data["potential"])
        return store
