"""One cell of the matrix: a rig, the producers at their fixed rate, warm-up, baseline, the
fault, recovery, then the drain and the figures."""

from __future__ import annotations

import json
import time
from pathlib import Path

import rota

from .measure import FINAL, Cell, Marks, Producers, figures, read_starts
from .rig import Rig, Settings, rig, wait_started
from .scenarios import Scenario


def run_cell(scenario: Scenario, settings: Settings, folder: Path) -> Cell:
    needs = scenario.needs
    with rig(settings, folder, replica="replica" in needs, bouncer="bouncer" in needs, host="host" in needs) as made:
        assert made.app is not None
        producers = Producers(made.app, settings.rate, settings.seconds).start()
        try:
            wait_started(made)
            time.sleep(settings.warmup)
            baseline = time.time()
            time.sleep(settings.baseline)
            fault = time.time()
            cleared = scenario.inject(made)
            time.sleep(max(0.0, cleared + settings.recovery - time.time()))
        finally:
            producers.stop()
        stop = time.time()
        if scenario.heal is not None:
            scenario.heal(made)
        runs = drain(made, list(producers.enqueued), settings.drain)
        cell = figures(
            scenario.title,
            dict(producers.enqueued),
            producers.refused,
            read_starts(made.log),
            runs,
            Marks(baseline=baseline, fault=fault, cleared=cleared, stop=stop),
        )
        cell.note = "; ".join(made.notes)
        marks = {"baseline": baseline, "fault": fault, "cleared": cleared, "stop": stop}
        (folder / "cell.json").write_text(json.dumps({"marks": marks, "late": cell.late, "lost": cell.lost_ids,
                                                      "beyond": cell.beyond_ids}, indent=1))  # fmt: skip
        return cell


def drain(made: Rig, ids: list[str], timeout: float) -> dict[str, rota.Run]:
    """Wait (up to `timeout` s) until every acknowledged run is final; the runs by id."""
    assert made.app is not None
    wanted = set(ids)
    deadline = time.monotonic() + timeout
    while True:
        try:
            runs = {str(r.id): r for r in made.app.list_runs(limit=100_000)}
        except rota.errors.DatabaseError:
            runs = {}
        if all(i in runs and runs[i].status in FINAL for i in wanted) or time.monotonic() > deadline:
            return runs
        time.sleep(0.5)
