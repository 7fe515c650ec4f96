"""What a worker says about the schedules when it starts, one warning per schedule at most:
a schedule stored damaged (a field that cannot be read, e.g. a time past year 9999), which
every worker skips until it is repaired (event schedule_corrupt); a high-frequency schedule,
firing more often than the App's high_frequency threshold (ROTA_HIGH_FREQUENCY, default
every 60 s; event schedule_high_frequency); and one firing more often than this worker
polls (said in the same warning when it is both). The ticker names a damaged schedule it
meets later through the same set, so each is named once per worker."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from ..logs import log_event
from ..models import ScheduleInfo
from ..timing.frequency import is_high_frequency, shortest_cron_gap

log = logging.getLogger("rota.worker")


class ScheduleChecks:
    """The start-up warnings about schedules, and the damaged schedules already named."""

    def __init__(self) -> None:
        self.corrupt_named: set[str] = set()

    def corrupt(self, name: str, fields: Iterable[str] = ("next_run_at",)) -> None:
        """Warn (once per schedule) that it is skipped because stored fields do not decode."""
        if name in self.corrupt_named:
            return
        self.corrupt_named.add(name)
        shown = ", ".join(fields)
        message = (
            f"schedule {name!r} is skipped: its stored {shown} cannot be read (a damaged or hand-edited row); "
            "the other schedules keep running. Repair it with update_schedule(), or pause and resume it"
        )
        log_event(log, logging.WARNING, "schedule_corrupt", message, schedule=name, fields=list(fields))

    def at_start(
        self, stored: list[ScheduleInfo], in_code: Mapping[str, Any], poll_interval: float, threshold: float
    ) -> None:
        """The warnings of a worker's start, from the stored schedules (and those in code)."""
        for info in stored:
            if info.corrupt and info.active:
                self.corrupt(info.name, info.corrupt)
        timings = {spec.name: (spec.cron, spec.every, spec.tz) for spec in in_code.values()}
        timings.update({i.name: (i.cron, i.every, i.tz) for i in stored if i.active and not i.paused})
        for name, (cron, every, tz) in sorted(timings.items()):
            seconds = every.total_seconds() if every is not None else None
            slow_poll = seconds is not None and seconds < poll_interval
            poll_note = (
                f", more often than this worker polls (every {poll_interval:.3g} s): ticks may run late or be "
                "coalesced; lower poll_interval to honour it"
                if slow_poll
                else ""
            )
            if is_high_frequency(cron, every, tz, threshold):
                _high_frequency(name, (cron, tz), seconds, threshold, poll_note)
            elif slow_poll:
                log.warning("schedule %r fires every %.3g s%s", name, seconds, poll_note)


def _high_frequency(
    name: str, timing: tuple[str | None, str], seconds: float | None, threshold: float, poll_note: str
) -> None:
    """One warning (event schedule_high_frequency) for a schedule firing more often than the
    threshold: usually a typo (every=6 meant minutes) or work for a loop inside one task."""
    cron, tz = timing
    interval = seconds if seconds is not None else shortest_cron_gap(cron or "", tz)
    shown = (
        f"every {seconds:.3g} s" if seconds is not None else f"with cron {cron!r} as often as every {interval:.3g} s"
    )
    message = (
        f"schedule {name!r} fires {shown}{poll_note}; it is a high-frequency schedule (more often than every "
        f"{threshold:g} s): each tick is a run row and a transaction. Set ROTA_HIGH_FREQUENCY to change the "
        "threshold, 0 to turn this warning off"
    )
    fields = {"schedule": name, "interval": interval, "threshold": threshold}
    log_event(log, logging.WARNING, "schedule_high_frequency", message, **fields)
