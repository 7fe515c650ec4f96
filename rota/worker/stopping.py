"""Runs whose handlers still run when a stopping worker is done (issue 41, item 1).

A thread cannot be killed, and a coroutine may ignore its cancellation. Such a run is never
handed back, its limit's slot and its schedule's exclusivity never freed, while this process
can still execute its handler:

- `rota worker` (the process is the worker's): `fence_and_exit`. As the worker's last write,
  the runs' leases end FENCE seconds from now on the database's clock (marked, so the rescue
  says in the run's history that the worker stopped while the handler ran); the process then
  ends with os._exit, at once (no interpreter shutdown that waits on the handler's thread).
  A watchdog armed before that write (faulthandler, a C thread the GIL cannot block) ends it
  within WATCHDOG seconds whatever happens, so the process is gone before the fence is: the
  rescue takes the runs as a lost worker's (attempt counted, retried if attempts remain).
- A worker in a process that goes on (`app.worker(...).start()` and `stop()`,
  `app.run_worker()` in a program): `Keeper`. The runs stay held by this worker, their
  leases renewed by a daemon thread, until the handler returns: its outcome is then written
  (a run whose outcome cannot be known is handed back). If the process exits first, the
  leases run out and the rescue takes the runs, as after kill -9.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
import sys
import threading
import time
from collections.abc import Callable

from ..errors import DatabaseError
from ..logs import log_event
from ..stores.base import Store
from .active import Active
from .executors import still_running
from .handoff import Handoff
from .outcomes import Decider

log = logging.getLogger("rota.worker")
FENCE = 2.0  # seconds (the database's clock) the last lease of a run whose handler still runs lasts
WATCHDOG = 1.0  # seconds after which the process ends whatever blocks it (well before FENCE)


def fence_and_exit(store: Store, worker: str, kept: list[Active]) -> None:
    """The last write of a `rota worker` process whose handlers still run, then its end."""
    arm_watchdog(WATCHDOG)
    rows = [(a.claim.id, a.claim.token) for a in kept]
    try:
        fenced = store.fence(rows, FENCE, worker)
    except DatabaseError as exc:  # their leases end as last renewed: rescued later, never sooner
        fenced = set()
        log.error("could not shorten the leases of %d run(s) still running (%s); they are rescued when their "
                  "leases expire", len(rows), exc)  # fmt: skip
    for a in kept:
        if a.claim.id in fenced:
            message = (
                f"run {a.claim.id} {a.claim.task}: its handler still runs; worker {worker} ends its process now and "
                f"the run is taken back as a lost worker's run once its lease ends {FENCE:g} s from now"
            )
            log_event(log, logging.WARNING, "run_fenced", message, run_id=str(a.claim.id), worker=worker)
    log_event(log, logging.INFO, "worker_exit", f"worker {worker}: process ends now", worker=worker)
    logging.shutdown()  # flushes the log handlers
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


def arm_watchdog(seconds: float) -> None:
    """End the process within `seconds`, from a C thread that needs no GIL."""
    try:
        faulthandler.dump_traceback_later(seconds, exit=True)
    except (AttributeError, ValueError, RuntimeError, OSError):  # no usable stderr: write nowhere
        faulthandler.dump_traceback_later(seconds, exit=True, file=os.open(os.devnull, os.O_WRONLY))


class Keeper:
    """Holds the runs whose handlers outlived a worker's stop, in a process that goes on."""

    def __init__(
        self, store: Callable[[], Store], worker: str, lease: float, interval: float, decider: Decider
    ) -> None:
        self.store = store
        self.worker = worker
        self.lease = lease
        self.interval = interval
        self.decider = decider
        self.kept: list[Active] = []
        self.handoff: Handoff | None = None

    def start(self, kept: list[Active], handoff: Handoff) -> threading.Thread:
        self.kept, self.handoff = list(kept), handoff
        handoff.detach()  # results come to this thread now, not to the stopped loop
        thread = threading.Thread(target=self.run, name=f"rota-keeper-{self.worker}", daemon=True)
        thread.start()
        return thread

    def run(self) -> None:
        beat = time.monotonic() + self.interval
        while self.kept:
            time.sleep(0.02)
            ended = [a for a in self.kept if not still_running(a)]
            if ended and self._settle(ended):
                self.kept = [a for a in self.kept if a not in ended]
            if self.kept and time.monotonic() >= beat:
                self._renew()
                beat = time.monotonic() + self.interval

    def _renew(self) -> None:
        rows = [(a.claim.id, a.claim.token) for a in self.kept]
        try:
            alive, _ = self.store().heartbeat(rows, self.lease)
        except DatabaseError as exc:
            log.debug("could not renew the leases of runs still running after the worker stopped: %s", exc)
            return
        for a in [a for a in self.kept if a.claim.id not in alive]:
            log.warning("run %s (%s): lease lost after worker %s stopped (rescued); its result will be discarded",
                        a.claim.id, a.claim.task, self.worker)  # fmt: skip
            self.kept.remove(a)

    def _settle(self, ended: list[Active]) -> bool:
        """Write the outcome of each ended handler (one found in the hand-off), hand the
        others back; False if the database could not be reached (tried again)."""
        results = self._results()
        outcomes = []
        for a in ended:
            kind, value = results.get(id(a), ("lost", None))
            if kind != "lost":  # (a thread past its timeout says "timeout": see ThreadExecutor._body)
                record = self.decider.decide(a, kind, value)
                self.decider.log(a, kind, record)
                outcomes.append(record)
        back = [(a.claim.id, a.claim.token) for a in ended if results.get(id(a), ("lost",))[0] == "lost"]
        try:
            if outcomes:
                self.store().finish(outcomes)
            if back:
                reason = f"worker {self.worker} stopped before the run finished; its handler returned since"
                self.store().hand_back(back, reason)
        except DatabaseError as exc:
            log.debug("could not record runs that ended after the worker stopped: %s", exc)
            self._keep(results)
            return False
        for a in ended:
            a.done = True
        return True

    def _results(self) -> dict[int, tuple[str, object]]:
        found: dict[int, tuple[str, object]] = {}
        done = self.handoff._done if self.handoff is not None else None
        while done:
            active, outcome, _ = done.popleft()
            found[id(active)] = outcome
        return found

    def _keep(self, results: dict[int, tuple[str, object]]) -> None:
        """A write failed: the results go back where the next round finds them."""
        assert self.handoff is not None
        for a in self.kept:
            if id(a) in results:
                self.handoff._done.append((a, results[id(a)], lambda _a: None))
