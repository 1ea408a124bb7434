"""What the learner and its collector processes share: weights, counters, queues, stop flag.

The learner copies its online weights into `uncompiled_shared_network` (shared memory)
while holding every collector's lock and bumps `weights_version`; a collector copies them
into its own inference network under its own lock when the version moved. `frames` counts
actions collected by every collector and drives the schedules.

When the local collectors infer on the GPU (collector.device), the shared network lives on
the GPU too: spawned collectors receive its tensors through CUDA IPC (the learner keeps the
originals alive), so a publish and a pull are device-to-device copies. Those are
asynchronous; each copy's stream is synchronized before its lock is released (and before
the version moves), so no reader sees half a version.

Each collector has its own lock and queue (as Linesight has one queue per collector), and
a race travels as a spool file whose path is the queue message: a path is far below the
pipe's atomic write size, so a collector killed at any moment can neither leave half a
message in a pipe nor hold a lock others need. When a collector is restarted, its lock and
queue are replaced.
"""

from __future__ import annotations

import gc
import logging
import os
import pickle
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing as tmp

from trackmind.agent.device import resolve_device
from trackmind.collectors.spec import CollectorConfig
from trackmind.queueing import put_until_stopped

log = logging.getLogger(__name__)
LOCK_TIMEOUT_S = 2.0


def spawn_context():
    return tmp.get_context("spawn")


@dataclass
class CollectorLink:
    """Picklable handles of one collector process."""

    index: int
    network: torch.nn.Module  # uncompiled_shared_network: shared memory, or CUDA IPC
    lock: Any
    weights_version: Any  # mp.Value('q')
    frames: Any  # mp.Value('q'): actions collected so far, all collectors
    stop: Any  # mp.Event
    queue: Any  # mp.Queue of small messages to the learner
    spool_dir: str


@dataclass
class SharedHandles:
    """The learner's side: shared network and counters, one lock and queue per collector."""

    network: torch.nn.Module
    weights_version: Any
    frames: Any
    stop: Any
    spool_dir: str
    queue_size: int
    locks: list = field(default_factory=list)
    queues: list = field(default_factory=list)

    def frames_played(self) -> int:
        """Actions collected so far by every collector (the schedules' clock)."""
        return int(self.frames.value)

    def link(self, i: int) -> CollectorLink:
        while len(self.locks) <= i:
            self.locks.append(None)
            self.queues.append(None)
        if self.locks[i] is None:
            self.renew(i)
        return CollectorLink(
            i,
            self.network,
            self.locks[i],
            self.weights_version,
            self.frames,
            self.stop,
            self.queues[i],
            self.spool_dir,
        )

    def renew(self, i: int) -> None:
        """Fresh lock and queue for collector i (its previous process may have died in them)."""
        ctx = spawn_context()
        self.locks[i] = ctx.Lock()
        self.queues[i] = ctx.Queue(maxsize=self.queue_size)

    def cleanup(self) -> None:
        shutil.rmtree(self.spool_dir, ignore_errors=True)


def _spool_base() -> str | None:
    """/dev/shm (memory) when it has room for long races, else the temporary folder."""
    try:
        st = os.statvfs("/dev/shm")
        if os.access("/dev/shm", os.W_OK) and st.f_bavail * st.f_frsize > 2 * 2**30:
            return "/dev/shm"
    except OSError:
        pass
    return None


def shared_device(collector: CollectorConfig, cuda_available: bool) -> str:
    """Where the shared network lives: on the local collectors' device (publish and pull
    are then copies within it), on the CPU for Ray workers (they get numpy state dicts)."""
    if collector.backend != "local":
        return "cpu"
    return resolve_device(collector.device, cuda_available)


def make_shared(
    network: torch.nn.Module, queue_size: int = 64, device: str | torch.device = "cpu"
) -> SharedHandles:
    """The learner's handles around `network`, moved to `device`: CPU shared memory, or a
    GPU whose tensors collector processes open through CUDA IPC."""
    ctx = spawn_context()
    network.to(device)
    network.share_memory()  # CPU tensors into shared memory; a no-op for CUDA tensors
    spool = tempfile.mkdtemp(prefix="trackmind-spool-", dir=_spool_base())
    return SharedHandles(
        network=network,
        weights_version=ctx.Value("q", 0),
        frames=ctx.Value("q", 0),
        stop=ctx.Event(),
        spool_dir=spool,
        queue_size=int(queue_size),
    )


def _copy(dst: torch.nn.Module, src: torch.nn.Module) -> None:
    """dst's tensors = src's, for any devices (cpu/cuda either side), complete on return.

    A copy that touches a GPU is queued on that device's current stream; waiting for that
    stream makes the copy done before the caller releases a lock or bumps a version.
    """
    gpus: set[torch.device] = set()
    with torch.no_grad():
        for d, s in zip(dst.state_dict().values(), src.state_dict().values()):
            d.copy_(s)
            gpus.update(t.device for t in (d, s) if t.is_cuda)
    for dev in gpus:
        torch.cuda.current_stream(dev).synchronize()


def should_stop(link: CollectorLink, parent: int) -> bool:
    """Asked to stop, or the learner (process `parent`) is gone: the processes it started
    must not outlive it."""
    return link.stop.is_set() or os.getppid() != parent


class StopOrOrphaned:
    """A child process's stop flag: set when asked to stop, or when its learner is gone. A
    learner killed with kill -9 sets no flag and never drains the queue, so a child waiting
    on a full queue would otherwise wait forever."""

    def __init__(self, link: CollectorLink, parent: int) -> None:
        self.link, self.parent = link, parent

    def is_set(self) -> bool:
        return should_stop(self.link, self.parent)


def put_message(link: CollectorLink, msg: Any, parent: int) -> bool:
    """Put a message on the link's queue, waiting while the learner is busy; False if asked
    to stop meanwhile or if the learner (process `parent`) is gone."""
    return put_until_stopped(link.queue, msg, StopOrOrphaned(link, parent))


def release_link(link: CollectorLink) -> None:
    """Drop this process's view of the shared network before exiting. A network on the GPU
    came through CUDA IPC: the learner counts the views still open, and a view left to
    interpreter exit is never given back (torch then warns when the learner exits)."""
    link.network = None  # type: ignore[assignment]  # the Process keeps the link itself
    gc.collect()


def publish_weights(shared: SharedHandles, source: torch.nn.Module) -> int:
    """Copy `source` weights into the shared network; returns the new version."""
    held = []
    try:
        for i, lock in enumerate(shared.locks):
            if lock is None:
                continue
            if lock.acquire(timeout=LOCK_TIMEOUT_S):
                held.append(lock)
            else:  # a stuck collector; the pool replaces it if it died
                log.warning("collector %d holds its weights lock: publishing anyway", i)
        _copy(shared.network, source)
        shared.weights_version.value += 1
        return shared.weights_version.value
    finally:
        for lock in held:
            lock.release()


def pull_weights(link: CollectorLink, target: torch.nn.Module, have_version: int) -> int:
    """Copy the shared weights into `target` if they are newer; returns the version held."""
    version = link.weights_version.value
    if version == have_version:
        return have_version
    with link.lock:
        version = link.weights_version.value
        _copy(target, link.network)
    return version


def write_spool(link: CollectorLink, obj: Any, seq: int) -> str:
    """Write one race atomically (temp file + rename); returns its path."""
    final = Path(link.spool_dir) / f"c{link.index}-{os.getpid()}-{seq}.pkl"
    tmp_path = final.with_suffix(".tmp")
    with open(tmp_path, "wb") as f:
        pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp_path, final)
    return str(final)


def read_spool(path: str) -> Any:
    """Load and delete a race written by write_spool (our own collectors' files only)."""
    with open(path, "rb") as f:
        obj = pickle.load(f)
    os.unlink(path)
    return obj
