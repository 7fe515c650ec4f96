"""Daemon threads (for plain `def` handlers and store calls) and the import path of a
handler (for isolation="process"; the child process itself is rota.worker.child).

Why our own thread pool: `concurrent.futures.ThreadPoolExecutor` joins its threads when the
interpreter exits, so a handler that hangs forever would keep a stopped worker alive forever.
Python cannot kill a thread. Our threads are daemons: when a run times out its slot is freed
and its token fenced off (a late result is discarded), the thread keeps running until the
handler returns or the process exits. Code that may hang should use isolation="process",
whose child is killed at the timeout.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any


class _Idle:
    """An idle thread's wake-up: a held lock the pool releases to hand it a call (None: end)."""

    __slots__ = ("call", "wake")

    def __init__(self) -> None:
        self.call: Callable[[], None] | None = None
        self.wake = threading.Lock()
        self.wake.acquire()


class DaemonPool:
    """A growing pool of daemon threads: submit(fn) runs fn() on an idle thread or a new one
    (up to `limit` threads; beyond that calls queue until a thread is free).

    A `lazy` pool runs at most `target` calls at once, one at first: later calls wait for
    a thread to come free, and the owner calls `grow()` every few milliseconds while calls
    are in flight (rota.worker.handoff does, from its sweep), which raises the target when the
    threads look blocked and lowers it when they only fight for the GIL. Tiny calls then
    share a few threads instead of a hundred threads handing the GIL around, while calls
    that block still get threads of their own within a few periods (see `grow`).

    Idle threads wait in a stack: the thread idle the shortest takes the next call, so
    threads beyond what the calls need stay idle, and one that has waited `IDLE` seconds
    without a call ends (the last one stays). Busy threads are never restarted.
    """

    def __init__(self, limit: int, name: str, lazy: bool = False) -> None:
        self.limit = limit
        self.name = name
        self.lazy = lazy
        self._lock = threading.Lock()
        self._ended_all = threading.Condition(self._lock)  # (join: every thread has ended its calls)
        self._calls: deque[Callable[[], None]] = deque()  # waiting for a thread
        self._idle: list[_Idle] = []  # idle threads, the most recently idle last
        self._threads = 0
        self._running = 0  # threads in a call
        self._target = 1 if lazy else limit  # calls at once
        self._ended = 0  # calls finished (grow's sign of progress)
        self._streak = 0  # looks in a row that added threads
        self._serial = 0
        self._closed = False
        self._last = (0, 0, time.monotonic(), time.process_time())  # grow's previous look
        self._stalled = time.monotonic()  # grow: since when calls wait with none ending

    @property
    def threads(self) -> int:
        return self._threads

    @property
    def target(self) -> int:
        """Calls the pool runs at once (a lazy pool's moves with `grow`)."""
        return self._target

    @property
    def backlog(self) -> int:
        """Calls waiting for a thread (read without the lock: a hint)."""
        return len(self._calls)

    def submit(self, fn: Callable[[], None]) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("the pool is closed")
            self._calls.append(fn)
            try:
                self._dispatch()
            except RuntimeError:  # no thread could be started: the caller learns its call did not run
                with contextlib.suppress(ValueError):
                    self._calls.remove(fn)
                raise

    def _dispatch(self) -> None:
        """Under the lock: hand waiting calls to idle threads (or new ones) up to the target."""
        while self._calls and self._running < self._target:
            if self._idle:
                idle = self._idle.pop()
                idle.call = self._calls.popleft()
                self._running += 1
                idle.wake.release()
            elif self._threads < self.limit:
                self._serial += 1
                call = self._calls.popleft()
                self._running += 1
                self._threads += 1
                try:
                    threading.Thread(
                        target=self._loop, args=(call,), name=f"{self.name}-{self._serial}", daemon=True
                    ).start()
                except RuntimeError:  # the system has no thread to give: the call stays queued
                    self._calls.appendleft(call)
                    self._running -= 1
                    self._threads -= 1
                    raise
            else:
                return

    def _loop(self, call: Callable[[], None] | None) -> None:
        idle = _Idle()
        while call is not None:
            with contextlib.suppress(BaseException):  # callers catch everything themselves
                call()
            call = self._next(idle)

    def _next(self, idle: _Idle) -> Callable[[], None] | None:
        """A call ended: the next waiting call, else wait idle for one (None: end)."""
        with self._lock:
            self._ended += 1
            self._running -= 1
            if self._calls and (self._running < self._target or self._closed):
                self._running += 1
                return self._calls.popleft()
            if self._closed:
                self._threads -= 1
                self._ended_all.notify_all()
                return None
            idle.call = None
            self._idle.append(idle)
        while not idle.wake.acquire(timeout=IDLE):
            with self._lock:
                if idle in self._idle and (self._threads > 1 or self._closed):
                    self._idle.remove(idle)
                    self._threads -= 1
                    self._ended_all.notify_all()
                    if self.lazy:  # the calls did not need this thread for a second
                        self._target = max(1, min(self._target, self._threads))
                    return None
        return idle.call

    def grow(self) -> int:
        """Fit the calls at once to what they do (the owner calls this every few
        milliseconds while calls are in flight). Raise the target while calls wait and the
        waiting looks like blocked threads: calls waited at this look and the previous one
        and the process used less than `BUSY` of the CPU it may use (`CPU_SHARE`): its
        threads wait on I/O, a lock or a sleep, not for the GIL, however many calls ended
        (calls that block a millisecond end often and still want a thread each); or calls
        have waited `STALL` seconds with none ending (a long call hogging the CPU), so a
        slot's call never waits long behind it. It adds 1, 2, 4, ... on looks in a row (at
        most one per waiting call, up to the limit).
        Lower it by one, down to FEWEST, while the target binds (calls wait, or every thread
        it allows is in a call), at least as many calls ended since the previous look as run
        at once and the CPU is busy: short calls fighting for the GIL (5 threads doing tiny
        Redis calls cost the process twice the CPU of 2). A target raised in a blocked phase
        comes down this way even when no call waits (a worker with 5 slots keeps at most 5
        calls in flight, so none waits while the target is 5). Returns the change."""
        now, cpu = time.monotonic(), time.process_time()
        with self._lock:
            ended0, waiting0, then, cpu0 = self._last
            waiting = len(self._calls)
            self._last = (self._ended, waiting, now, cpu)
            if self._closed or not self.lazy:
                return 0
            progressed = self._ended - ended0
            if progressed or not waiting0:
                self._stalled = now
            busy = cpu - cpu0 >= BUSY * CPU_SHARE * (now - then)
            if waiting and ((waiting0 and not busy) or now - self._stalled >= STALL):
                self._stalled = now
                return self._add(min(waiting, self.limit - self._target))
            self._streak = 0
            binds = waiting or self._running >= self._target  # (else a lower target changes nothing)
            if binds and busy and progressed >= self._target > FEWEST:
                self._target -= 1
                return -1
            return 0

    def _add(self, room: int) -> int:
        if room <= 0:
            return 0
        n = min(room, 1 << self._streak)
        self._streak += 1
        self._target += n
        with contextlib.suppress(RuntimeError):  # no thread to start: the calls wait for one
            self._dispatch()
        return n

    def close(self) -> None:
        """Refuse new calls; idle threads take the queued ones (whatever the target), then
        end, and busy threads end once nothing is queued."""
        with self._lock:
            self._closed = True
            while self._idle and self._calls:
                idle = self._idle.pop()
                idle.call = self._calls.popleft()
                self._running += 1
                idle.wake.release()
            while self._idle:
                idle = self._idle.pop()
                self._threads -= 1
                idle.call = None
                idle.wake.release()
            self._ended_all.notify_all()

    def join(self, timeout: float) -> bool:
        """After close(): wait until every call has ended (the queued ones too), at most
        `timeout` seconds; whether they have."""
        with self._lock:
            return self._ended_all.wait_for(lambda: self._closed and self._threads == 0, timeout)


BUSY = 0.5  # share of the CPU the process may use (CPU_SHARE) above which calls wait for the GIL


def cpu_share(cgroup: Path = Path("/sys/fs/cgroup")) -> float:
    """Cores this process may use, at most 1 (the GIL runs Python on one at a time): its CPU
    affinity, capped by a cgroup's CPU quota (v2 `cpu.max`, or v1 `cpu/cpu.cfs_quota_us`), as
    in a container limited to half a core, whose busiest process never used half a core."""
    share = float(len(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else 1.0
    for quota_file, period_file in (("cpu.max", None), ("cpu/cpu.cfs_quota_us", "cpu/cpu.cfs_period_us")):
        try:
            fields = (cgroup / quota_file).read_text().split()
            if period_file is not None:
                fields.append((cgroup / period_file).read_text().strip())
            if fields[0] not in ("max", "-1") and int(fields[1]) > 0:
                share = min(share, int(fields[0]) / int(fields[1]))
        except (OSError, ValueError, IndexError):
            continue
    return max(0.01, min(1.0, share))


CPU_SHARE = cpu_share()
STALL = 0.02  # seconds calls may wait with none ending before the target rises (a CPU hog)
FEWEST = 2  # a lazy pool's target is lowered to no fewer calls at once than this
IDLE = 1.0  # seconds a thread waits for a call before it ends (the last thread stays)


def handler_path(fn: Callable[..., Any]) -> tuple[str, str]:
    """(module, qualified name) by which a child process imports a handler."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not module or not qualname or "<locals>" in qualname or module == "__main__":
        raise ValueError(
            f"isolation='process' needs a handler importable by name (a module-level function "
            f"in an importable module), got {module}.{qualname}"
        )
    return module, qualname
