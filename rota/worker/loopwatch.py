"""The loop watchdog: warn when the event loop was blocked (an `async def` handler calling
time.sleep or doing CPU work) and name the run whose handler did it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("rota.worker")


LINGER = 10  # beats the watch keeps after the last async def handler ended (a second at 0.1 s)


class LoopWatch:
    """Warn when the event loop was blocked (an `async def` handler calling time.sleep or
    doing CPU work): a watchdog thread notes which task was running while the loop was
    stuck; the loop logs it when it runs again.

    It watches only while an `async def` handler is in flight (`watching`) and for LINGER
    beats after: those are the only code on the loop it names. An idle worker's loop and
    the watchdog thread then sleep without a beat (beats woke both ten times a second:
    about a quarter of an idle worker's CPU on SQLite, bench/flow_idle.py)."""

    def __init__(self, threshold: float = 0.5, tick: float = 0.1) -> None:
        self.threshold = threshold
        self.tick = tick
        self.beat = time.monotonic()
        self.beats = 0  # beats taken (an idle worker takes none)
        self.culprit: str | None = None
        self.blocked = 0  # number of times the loop was found blocked
        self.watched = 0  # async def handlers in flight (changed on the loop only)
        self.started = 0  # async def handlers started so far
        self.arms = 0  # times a handler woke the disarmed watch
        self.handled = False  # whether an async def handler ran during the last beat
        self._seen = 0  # `started` at the last beat
        self._idle = LINGER + 1  # beats since one was in flight or started: disarmed at first
        self._armed = asyncio.Event()  # the loop's side: armed (a handler in flight, or lingering)
        self._thread_armed = threading.Event()  # the watchdog thread's side
        self._stop = threading.Event()
        self._watching = _Watching(self)

    def watching(self) -> contextlib.AbstractContextManager[None]:
        """On the loop, around an `async def` handler: watch the loop while it runs. One
        context object, no generator: it wraps every async handler's call."""
        return self._watching

    def _arm(self) -> None:
        self.arms += 1
        self.beat = time.monotonic()  # a block from now on counts, even before a beat
        self._armed.set()
        self._thread_armed.set()

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
                # a block while the watch lingered with no handler in flight is not a handler's
                if lag >= self.threshold and (self.culprit is not None or self.handled):
                    self._report(lag)
        finally:
            self._stop.set()
            self._thread_armed.set()  # the watchdog thread sees the stop at once

    async def _step(self) -> float:
        """One beat (or the wait for a handler to watch); the loop's lag over it. The beats
        go on for LINGER beats after the last handler ended: a drain of short handlers, in
        flight 0 or 1 at a time, would otherwise arm and disarm the watch (and wake its
        thread) for every one of them (measured: 8 % of an async no-op drain)."""
        if self.watched or self.started != self._seen:
            self._seen, self._idle = self.started, 0
        else:
            self._idle += 1
        if self._idle > LINGER:
            self._armed.clear()
            self._thread_armed.clear()
            self.culprit = None  # a name the thread took as the last handler ended says nothing
            await self._armed.wait()
            self.handled = True  # a handler armed it
            return time.monotonic() - self.beat  # `watching` set the beat: a block since counts
        before, started, busy = time.monotonic(), self.started, self.watched > 0
        self.beat = before
        self.beats += 1
        await asyncio.sleep(self.tick)
        self.handled = busy or self.watched > 0 or self.started != started
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
            if time.monotonic() - self.beat >= self.threshold and self.culprit is None and self.watched:
                task = asyncio.current_task(loop)  # (lingering with no handler in flight: not named)
                if task is not None:
                    self.culprit = describe(task.get_name())  # named now: the run may end soon


class _Watching:
    """`LoopWatch.watching`'s context: counts the handler in, arms the watch if disarmed."""

    __slots__ = ("watch",)

    def __init__(self, watch: LoopWatch) -> None:
        self.watch = watch

    def __enter__(self) -> None:
        watch = self.watch
        watch.watched += 1
        watch.started += 1
        if not watch._thread_armed.is_set():
            watch._arm()

    def __exit__(self, *exc: object) -> None:
        self.watch.watched -= 1
