"""The loop watchdog: warn when the event loop was blocked (an `async def` handler calling
time.sleep or doing CPU work) and name the run whose handler did it."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("rota.worker")


class LoopWatch:
    """Warn when the event loop was blocked (an `async def` handler calling time.sleep or
    doing CPU work): a watchdog thread notes which task was running while the loop was
    stuck; the loop logs it when it runs again."""

    def __init__(self, threshold: float = 0.5, tick: float = 0.1) -> None:
        self.threshold = threshold
        self.tick = tick
        self.beat = time.monotonic()
        self.culprit: str | None = None
        self.blocked = 0  # number of times the loop was found blocked
        self._stop = threading.Event()

    async def run(self, describe: Callable[[str], str]) -> None:
        """On the loop: beat, and report lag. `describe` turns a task name into a label."""
        loop = asyncio.get_running_loop()
        watchdog = threading.Thread(target=self._watch, args=(loop, describe), name="rota-loopwatch", daemon=True)
        watchdog.start()
        try:
            while True:
                before = time.monotonic()
                self.beat = before
                await asyncio.sleep(self.tick)
                lag = time.monotonic() - before - self.tick
                if lag >= self.threshold:
                    self._report(lag)
        finally:
            self._stop.set()

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
        while not self._stop.wait(self.tick):
            if loop.is_closed():
                return
            if time.monotonic() - self.beat >= self.threshold and self.culprit is None:
                task = asyncio.current_task(loop)
                if task is not None:
                    self.culprit = describe(task.get_name())  # named now: the run may end soon
