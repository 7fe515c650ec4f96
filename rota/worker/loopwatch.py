"""The loop watchdog: warn when the event loop was blocked (an `async def` handler calling
time.sleep or doing CPU work) and name the run whose handler did it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator

log = logging.getLogger("rota.worker")


class LoopWatch:
    """Warn when the event loop was blocked (an `async def` handler calling time.sleep or
    doing CPU work): a watchdog thread notes which task was running while the loop was
    stuck; the loop logs it when it runs again.

    It watches only while an `async def` handler is in flight (`watching`): those are the
    only code on the loop it names. An idle worker's loop and the watchdog thread then sleep
    without a beat (beats woke both ten times a second: about a quarter of an idle
    worker's CPU on SQLite, bench/flow_idle.py)."""

    def __init__(self, threshold: float = 0.5, tick: float = 0.1) -> None:
        self.threshold = threshold
        self.tick = tick
        self.beat = time.monotonic()
        self.beats = 0  # beats taken (an idle worker takes none)
        self.culprit: str | None = None
        self.blocked = 0  # number of times the loop was found blocked
        self.watched = 0  # async def handlers in flight (changed on the loop only)
        self._armed = asyncio.Event()  # the loop's side: watched > 0
        self._thread_armed = threading.Event()  # the watchdog thread's side
        self._stop = threading.Event()

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """On the loop, around an `async def` handler: watch the loop while it runs."""
        self.watched += 1
        if self.watched == 1:
            self.beat = time.monotonic()  # a block from now on counts, even before a beat
            self._armed.set()
            self._thread_armed.set()
        try:
            yield
        finally:
            self.watched -= 1

    async def run(self, describe: Callable[[str], str]) -> None:
        """On the loop: beat while watched, and report lag. `describe` turns a task name
        into a label."""
        loop = asyncio.get_running_loop()
        self._stop.clear()  # a worker run again (run_until_idle) watches again
        self._armed = asyncio.Event()  # of this loop
        if self.watched:
            self._armed.set()
        watchdog = threading.Thread(target=self._watch, args=(loop, describe), name="rota-loopwatch", daemon=True)
        watchdog.start()
        try:
            while True:
                lag = await self._step()
                if lag >= self.threshold:
                    self._report(lag)
        finally:
            self._stop.set()
            self._thread_armed.set()  # the watchdog thread sees the stop at once

    async def _step(self) -> float:
        """One beat (or the wait for a handler to watch); the loop's lag over it."""
        if not self.watched:
            self._armed.clear()
            self._thread_armed.clear()
            self.culprit = None  # a name the thread took as the last handler ended says nothing
            await self._armed.wait()
            return time.monotonic() - self.beat  # `watching` set the beat: a block since counts
        before = time.monotonic()
        self.beat = before
        self.beats += 1
        await asyncio.sleep(self.tick)
        return time.monotonic() - before - self.tick

    def _report(self, lag: float) -> None:
        self.blocked += 1
        label = self.culprit or "unknown code"
        self.culprit = None
        log.warning(
            "the event loop was blocked for %.2f s by %s: an async def handler must not block "
            "(use await asyncio.sleep, or a plain def handler, which runs on a thread)",
            lag,
            label,
        )

    def _watch(self, loop: asyncio.AbstractEventLoop, describe: Callable[[str], str]) -> None:
        while True:
            self._thread_armed.wait()  # parked while no handler is watched
            if self._stop.wait(self.tick) or loop.is_closed():
                return
            if not self._thread_armed.is_set():
                continue  # disarmed meanwhile: the beat is not kept, so it says nothing
            if time.monotonic() - self.beat >= self.threshold and self.culprit is None:
                task = asyncio.current_task(loop)
                if task is not None:
                    self.culprit = describe(task.get_name())  # named now: the run may end soon
