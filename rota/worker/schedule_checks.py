"""What a worker says about the schedules when it starts, one warning per schedule at most:
a schedule stored damaged (a field that cannot be read, e.g. a time past year 9999), which
every worker skips until it is repaired, and a schedule that fires more often than this
worker polls. The ticker reports a damaged schedule it meets later through the same set,
so each is named once per worker."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from ..logs import log_event
from ..models import ScheduleInfo

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

    def at_start(self, stored: list[ScheduleInfo], in_code: Mapping[str, Any], poll_interval: float) -> None:
        """The warnings of a worker's start, from the stored schedules (and those in code)."""
        for info in stored:
            if info.corrupt and info.active:
                self.corrupt(info.name, info.corrupt)
        intervals = {spec.name: spec.every for spec in in_code.values()}
        intervals.update({info.name: info.every for info in stored if not info.paused})
        for name, every in sorted(intervals.items()):
            if every is not None and every.total_seconds() < poll_interval:
                log.warning(
                    "schedule %r fires every %.3g s, more often than this worker polls (every %.3g s): "
                    "ticks may run late or be coalesced; lower poll_interval to honour it",
                    name,
                    every.total_seconds(),
                    poll_interval,
                )
