"""A shared-memory probe: how worker processes tell the measuring process what they did.

Handlers under test call `probe()` and record, in a memory-mapped file, what a benchmark needs:
a per-process count of finished jobs with the first start and last end time (drain rates), or a
time stamp per sample index (pickup latency, tick lateness, rescue). Every write is a few
`struct.pack_into` calls under an uncontended lock (about a microsecond), so the probe costs
almost nothing next to the job path it measures, and the measuring process reads it without
any round trip to the worker or the database.

Layout (little-endian doubles): SLOTS header slots of SLOT_FIELDS doubles each (one slot per
worker process: count, first start, last end), then MAX_SAMPLES sample doubles (0.0 = unset).
Times are `time.time()` seconds: every process on the host shares that clock.
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
import time
from pathlib import Path

SLOTS = 32
SLOT_FIELDS = 4  # count, first start, last end, spare
MAX_SAMPLES = 200_000
_D = 8
_HEADER = SLOTS * SLOT_FIELDS * _D
SIZE = _HEADER + MAX_SAMPLES * _D

ENV_PATH = "BENCH_PROBE"
ENV_SLOT = "BENCH_PROBE_SLOT"


def create(path: Path) -> None:
    """Create (or reset) a zero-filled probe file."""
    with path.open("wb") as f:
        f.truncate(SIZE)


def _map(path: Path) -> mmap.mmap:
    with path.open("r+b") as f:
        return mmap.mmap(f.fileno(), SIZE)


class Probe:
    """The writer side, used inside a worker process (thread-safe)."""

    def __init__(self, path: Path, slot: int) -> None:
        if not 0 <= slot < SLOTS:
            raise ValueError(f"probe slot {slot} out of range 0..{SLOTS - 1}")
        self._mm = _map(path)
        self._base = slot * SLOT_FIELDS * _D
        self._lock = threading.Lock()
        self._count = 0

    def job_done(self) -> None:
        """Count one finished job; the first call also records the first start."""
        now = time.time()
        with self._lock:
            self._count += 1
            if self._count == 1:
                struct.pack_into("<d", self._mm, self._base + _D, now)
            # last end before count: a reader that sees the count also sees its time
            struct.pack_into("<d", self._mm, self._base + 2 * _D, now)
            struct.pack_into("<d", self._mm, self._base, float(self._count))

    def jobs_done(self, count: int, first_start: float) -> None:
        """Count `count` jobs finished now, in one write (for loops that work in batches)."""
        now = time.time()
        with self._lock:
            if self._count == 0:
                struct.pack_into("<d", self._mm, self._base + _D, first_start)
            self._count += count
            struct.pack_into("<d", self._mm, self._base + 2 * _D, now)
            struct.pack_into("<d", self._mm, self._base, float(self._count))

    def mark(self, index: int, value: float | None = None) -> float:
        """Record `value` (default: now) as sample `index`; returns what was written."""
        stamp = time.time() if value is None else value
        struct.pack_into("<d", self._mm, _HEADER + index * _D, stamp)
        return stamp

    def mark_once(self, index: int, other: int) -> bool:
        """Mark sample `index` if it is unset (returns True), else sample `other` (False).

        Tells a first attempt from a retry even when the retry runs in another process.
        """
        now = time.time()
        with self._lock:
            first: bool = struct.unpack_from("<d", self._mm, _HEADER + index * _D)[0] == 0.0
            struct.pack_into("<d", self._mm, _HEADER + (index if first else other) * _D, now)
        return first

    def append(self, value: float) -> None:
        """Store `value` as the next sample of this process (single-writer series)."""
        with self._lock:
            struct.pack_into("<d", self._mm, _HEADER + self._count * _D, value)
            self._count += 1
            struct.pack_into("<d", self._mm, self._base, float(self._count))


class ProbeReader:
    """The reader side, used by the measuring process."""

    def __init__(self, path: Path) -> None:
        self._mm = _map(path)

    def _slot(self, slot: int) -> tuple[float, float, float]:
        count, first, last = struct.unpack_from("<3d", self._mm, slot * SLOT_FIELDS * _D)
        return count, first, last

    def total(self) -> int:
        return int(sum(self._slot(s)[0] for s in range(SLOTS)))

    def first_start(self) -> float:
        firsts = [self._slot(s)[1] for s in range(SLOTS) if self._slot(s)[0] > 0]
        return min(firsts) if firsts else 0.0

    def last_end(self) -> float:
        return max((self._slot(s)[2] for s in range(SLOTS)), default=0.0)

    def sample(self, index: int) -> float:
        value: float = struct.unpack_from("<d", self._mm, _HEADER + index * _D)[0]
        return value

    def samples(self, start: int, stop: int) -> list[float]:
        return list(struct.unpack_from(f"<{stop - start}d", self._mm, _HEADER + start * _D))


_probe: Probe | None = None
_probe_loaded = False
_probe_lock = threading.Lock()


def probe() -> Probe | None:
    """This process's probe, from BENCH_PROBE / BENCH_PROBE_SLOT (None outside a benchmark).

    One instance per process even when the first calls race in several handler threads
    (two instances would each keep their own count and overwrite each other's slot).
    """
    global _probe, _probe_loaded
    if not _probe_loaded:
        with _probe_lock:
            if not _probe_loaded:
                path = os.environ.get(ENV_PATH)
                _probe = Probe(Path(path), int(os.environ.get(ENV_SLOT, "0"))) if path else None
                _probe_loaded = True
    return _probe
