"""What a worker says about the schedules when it starts, one warning per schedule at most:
a schedule stored damaged (a field that cannot be read or planned, e.g. a time past year
9999 or an `every` of NaN), which every worker sets aside until it is repaired (event
row_damaged, through rota.quarantine); a high-frequency schedule, firing more often than
the App's high_frequency threshold (ROTA_HIGH_FREQUENCY, default every 60 s; event
schedule_high_frequency); and one firing more often than this worker polls (said in the
same warning when it is both). The ticker names a damaged schedule it meets later through
rota.quarantine too, with the same reason, so each is named once per process."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from .. import quarantine
from ..logs import log_event
from ..models import ScheduleInfo
from ..timing.frequency import is_high_frequency, shortest_cron_gap

log = logging.getLogger("rota.worker")


class ScheduleChecks:
    """The start-up warnings about schedules."""

    def damaged(self, name: str, reason: str) -> None:
        """Name (once per process and reason: rota.quarantine) a schedule every worker's
        ticker sets aside because a stored field cannot be read or planned."""
        quarantine.report(quarantine.SCHEDULE, name, reason, schedule=name)

    def at_start(
        self, stored: list[ScheduleInfo], in_code: Mapping[str, Any], poll_interval: float, threshold: float
    ) -> None:
        """The warnings of a worker's start, from the stored schedules (and those in code)."""
        for info in stored:
            if info.damage is not None and info.active and not info.paused:
                self.damaged(info.name, info.damage)
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
