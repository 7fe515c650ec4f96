"""The matrix as a markdown table, with the settings and what each column means."""

from __future__ import annotations

import math
import platform
import time
from dataclasses import asdict

from .measure import Cell
from .rig import Settings

COLUMNS = """\
- **fault s**: how long the fault's action took (the restart, the promotion, the sustained
  fault's length; about 0 for a kill or a partition, which then last on their own).
- **recovered**: every acknowledged run ended, the workers keep up with the producers again
  (the p95 pickup of the last half of the recovery phase is within the late bound) and that
  happened before the producers stopped; **target** = also within two leases.
- **recovery**: seconds from the end of the fault's action (the kill sent, the server back,
  the promotion done, the last termination, the connections or the transaction released, the
  partition made) to the start of the last *late* run: a run whose execution that counted
  started more than the late bound (max(1 s, 3x the baseline p95)) after its enqueue. From
  then on every run was picked up within the bound, i.e. back to the baseline rate.
- **lost**: acknowledged enqueues whose run is not final after the drain.
- **twice**: runs executed more than once (distinct fencing tokens in the handlers' log);
  **beyond**: more often than 1 + their attempts recorded lost or handed back, the documented
  at-least-once cases (a worker that died or was cut off mid-run).
- **p95 before / after**: pickup (first execution's start - enqueue) of the runs enqueued in
  the baseline phase / in the last half of the recovery phase; **worst**: the longest wait, from
  enqueue to the execution that counted, of a run that started from the fault on.
- **refused**: enqueues that raised (not acknowledged, so never counted lost).
"""


def _s(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.2f}"


def meets(cell: Cell, lease: float) -> bool:
    return cell.recovered and cell.recovery is not None and cell.recovery <= 2 * lease and cell.beyond == 0


def markdown(cells: list[Cell], settings: Settings, command: str, load: str) -> str:
    lines = [
        f"# Chaos matrix, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        f"`{command}` on {platform.node()} ({load}).",
        "",
        "Settings: " + ", ".join(f"{k}={v}" for k, v in asdict(settings).items()) + ".",
        "",
        "| scenario | fault s | recovered | recovery s | target | lost | twice (beyond) | p95 before s | p95 after s "
        "| worst s | enqueued | refused | notes |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        lines.append(
            f"| {c.scenario} | {c.outage:.1f} | {'yes' if c.recovered else 'NO'} | {_s(c.recovery)} "
            f"| {'met' if meets(c, settings.lease) else 'MISSED'} | {c.lost} | {c.twice} ({c.beyond}) "
            f"| {_s(c.p95_before)} | {_s(c.p95_after)} | {_s(c.worst)} | {c.enqueued} | {c.refused} | {c.note} |"
        )
    lines += ["", COLUMNS]
    return "\n".join(lines)
