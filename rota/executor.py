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
import queue
import threading
import time
from collections.abc import Callable
from typing import Any


class DaemonPool:
    """A growing pool of daemon threads: submit(fn) runs fn() on an idle thread or a new one
    (up to `limit` threads; beyond that calls queue until a thread is free).

    A `lazy` pool starts a thread only for its first call: later calls that find no idle
    thread wait for one, and the owner calls `grow()` every few milliseconds while calls
    wait (rota.worker.handoff does, from its sweep). Tiny calls then share a few threads
    instead of a hundred threads fighting for the GIL, while calls that block still get
    threads of their own within a few periods (see `grow`). A thread that has waited `IDLE`
    seconds without a call ends (the last one stays), so threads added for a burst of
    blocked calls go away once they are not needed, and busy threads are never restarted.
    """

    def __init__(self, limit: int, name: str, lazy: bool = False) -> None:
        self.limit = limit
        self.name = name
        self.lazy = lazy
        self._queue: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0  # idle threads minus queued calls (negative: calls wait for a thread)
        self._ended = 0  # calls finished (grow's sign of progress)
        self._streak = 0  # looks in a row that added threads
        self._serial = 0
        self._closed = False
        self._last = (0, 0, time.monotonic(), time.process_time())  # grow's previous look

    @property
    def threads(self) -> int:
        return self._threads

    @property
    def backlog(self) -> int:
        """Calls waiting for a thread (read without the lock: a hint)."""
        return max(0, -self._idle)

    def submit(self, fn: Callable[[], None]) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("the pool is closed")
            if self._idle <= 0 and self._threads < self.limit and not (self.lazy and self._threads):
                self._start(1)
            else:
                self._idle -= 1
        self._queue.put(fn)

    def _start(self, n: int) -> None:
        """Start n threads (under the lock): each takes one queued call."""
        for _ in range(n):
            self._threads += 1
            self._serial += 1
            threading.Thread(target=self._loop, name=f"{self.name}-{self._serial}", daemon=True).start()

    def _loop(self) -> None:
        while True:
            try:
                fn = self._queue.get(timeout=IDLE)
            except queue.Empty:
                if self._retired():
                    return
                continue
            if fn is None:
                return
            with contextlib.suppress(BaseException):  # callers catch everything themselves
                fn()
            with self._lock:
                self._ended += 1
                self._idle += 1

    def _retired(self) -> bool:
        """This thread waited IDLE seconds for a call: end it unless it is the last one or
        a call is queued for it (idle threads minus queued calls, counted under the lock)."""
        with self._lock:
            if self._idle <= 0 or self._threads <= 1 or self._closed:
                return False
            self._idle -= 1
            self._threads -= 1
            return True

    def grow(self) -> int:
        """Fit the threads to what they do (the owner calls this every few milliseconds
        while calls are in flight). Add threads while calls wait if the waiting looks like
        blocked threads: no call ended since the previous look (threads blocked, or busy for
        longer than a period), or calls that waited then still wait while the process used
        less than `BUSY` CPU (threads wait on I/O). It adds 1, 2, 4, ... threads on looks in
        a row (at most one per waiting call, up to the limit): one slow call adds a thread,
        calls that stay blocked get theirs within a few looks. Calls that end while the CPU
        is busy add none (more threads would only fight for the GIL). Threads end only when
        idle for IDLE seconds (see `_loop`): ending busy ones, only to start them again at
        the next wait, cost a few % of the worker's CPU. Returns the threads added."""
        now, cpu = time.monotonic(), time.process_time()
        with self._lock:
            ended0, waiting0, then, cpu0 = self._last
            waiting = -self._idle
            self._last = (self._ended, max(0, waiting), now, cpu)
            if self._closed:
                return 0
            progressed = self._ended - ended0
            busy = cpu - cpu0 >= BUSY * (now - then)
            if waiting > 0 and (not progressed or (progressed < waiting0 and not busy)):
                return self._add(min(waiting, self.limit - self._threads))
            self._streak = 0
            return 0

    def _add(self, room: int) -> int:
        n = min(room, 1 << self._streak)
        self._streak += 1
        self._start(n)
        self._idle += n
        return n

    def close(self) -> None:
        with self._lock:
            self._closed = True
            n = self._threads
        for _ in range(n):
            self._queue.put(None)


BUSY = 0.5  # CPU seconds per second above which waiting calls wait for the GIL, not for I/O
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
