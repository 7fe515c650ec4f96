"""Sampling of the per-run success lines (the pattern of zap's sampler).

In each window (1 s) the first `first` successes are logged one by one; later ones are only
counted, and one `runs_succeeded` summary line (count, window, by_task) is logged when the
window ends: by a timer on the event loop, by the next success, or at shutdown (`flush`).
Failures, retries, timeouts and cancellations never pass through here (always logged).
Used on the event loop only (where runs are finished), so it takes no lock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

FIRST = 20  # success lines logged one by one per window
WINDOW = 1.0  # seconds
TOP = 5  # tasks named in by_task (the most frequent)

Emit = Callable[[str, dict[str, Any]], None]
Later = Callable[[float, Callable[[], None]], None]


class SuccessSampler:
    """`admit(task)` says whether to log this success line (else it is counted)."""

    def __init__(
        self,
        emit: Emit,
        first: int = FIRST,
        window: float = WINDOW,
        clock: Callable[[], float] = time.monotonic,
        later: Later | None = None,
    ) -> None:
        self.emit = emit  # emit(message, fields): logs the summary line
        self.first = first
        self.window = window
        self.clock = clock
        self.later = later  # later(delay, fn): a timer that ends the window on time
        self._start = clock()
        self._logged = 0
        self._count = 0
        self._tasks: dict[str, int] = {}

    def admit(self, task: str) -> bool:
        now = self.clock()
        if now - self._start >= self.window:
            self._roll(now, self.window)
        if self._logged < self.first:
            self._logged += 1
            return True
        if not self._count and self.later is not None:
            self.later(self._start + self.window - now + 0.001, self._on_time)
        self._count += 1
        tasks = self._tasks
        tasks[task] = tasks.get(task, 0) + 1
        return False

    def flush(self) -> None:
        """Log the summary of the window so far (at shutdown)."""
        now = self.clock()
        self._roll(now, min(self.window, max(0.0, now - self._start)))

    def _on_time(self) -> None:
        now = self.clock()
        if self._count and now - self._start >= self.window:
            self._roll(now, self.window)

    def _roll(self, now: float, window: float) -> None:
        """Log the window's summary (if it counted any) and start a new window at `now`."""
        if self._count:
            self.emit(*summary(self._count, window, self._tasks))
            self._count = 0
            self._tasks = {}
        self._start = now
        self._logged = 0


def summary(count: int, window: float, tasks: dict[str, int]) -> tuple[str, dict[str, Any]]:
    """The runs_succeeded line: message and fields."""
    top = sorted(tasks.items(), key=lambda item: (-item[1], item[0]))[:TOP]
    message = (
        f"{count:,} more runs succeeded in the last {window:.1f} s "
        "(not logged one by one: ROTA_LOG_EVERY_RUN=1 logs all)"
    )
    return message, {"count": count, "window": round(window, 3), "by_task": dict(top)}


def emitter(log: logging.Logger, worker: str) -> Emit:
    """emit(message, fields) logging the runs_succeeded line at INFO on `log`."""

    def emit(message: str, fields: dict[str, Any]) -> None:
        fields["worker"] = worker
        log.info(message, extra={"event": "runs_succeeded", "fields": fields})

    return emit
