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
  leases renewed by a daemon thread, until the handler returns; it is then handed back, as
  at a shutdown (a limited run past its timeout: recorded timed out). If the process exits
  first, the leases run out and the rescue takes the runs, as after kill -9.
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
from .outcomes import Decider

log = logging.getLogger("rota.worker")
FENCE = 2.0  # seconds (the database's clock) the last lease of a run whose handler still runs lasts
WATCHDOG = 1.0  # seconds after which the process ends whatever blocks it (well before FENCE)


def fence_and_exit(store: Store, worker: str, kept: list[Active], at_once: bool = False) -> None:
    """The last write of a `rota worker` process whose handlers still run, then its end
    (`at_once`: after a second stop signal, which skipped the drain)."""
    arm_watchdog(WATCHDOG)
    rows = [(a.claim.id, a.claim.token) for a in kept]
    try:
        store.fence(rows, FENCE, worker, at_once)
    except Exception as exc:  # their leases end as last renewed: rescued later, never sooner
        message = (
            f"could not shorten the leases of {len(rows)} run(s) still running ({exc}); they are rescued when their "
            "leases expire"
        )
        log_event(log, logging.ERROR, "hand_back_failed", message, worker=worker, run_ids=[str(r) for r, _ in rows])
    logging.shutdown()  # flushes the log handlers
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


def save_deferred(ended: list[Active]) -> None:
    """Before their hand-back (blocking): the checkpoint of a last step a handler took after
    the stop, deferred to the run's finish (rota.durable: `return ctx.step(...)`), which a
    hand-back does not write, is saved now, token-checked: the next execution must not take
    the step again. The database away: logged, the step runs again (as before the deferral). A
    lost lease (StepRefused): the step is the new holder's. The first DatabaseError ends the
    saves (the database is away: each would wait its own timeout before the hand-back)."""
    deferred = [a for a in ended if a.durable is not None and a.durable.deferred is not None]
    for k, a in enumerate(deferred):
        try:
            a.durable.flush()  # type: ignore[union-attr]
        except DatabaseError as exc:
            ids = ", ".join(str(b.claim.id) for b in deferred[k:])
            log.warning("run(s) %s: the checkpoint of their last step was not saved before the hand-back (%s); "
                        "the step may run again", ids, exc)  # fmt: skip
            return
        except Exception as exc:  # (StepRefused; a bug must not end the shutdown either)
            log.warning("run %s (%s): the checkpoint of its last step was not saved before its hand-back (%s)",
                        a.claim.id, a.claim.task, exc)  # fmt: skip


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

    def start(self, kept: list[Active]) -> threading.Thread:
        self.kept = list(kept)
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
        except Exception as exc:  # (a database away, an App closed meanwhile): tried again
            log.debug("could not renew the leases of runs still running after the worker stopped: %s", exc)
            return
        for a in [a for a in self.kept if a.claim.id not in alive]:
            message = f"run {a.claim.id} ({a.claim.task}): lease lost after worker {self.worker} stopped (rescued)"
            log_event(log, logging.WARNING, "lease_lost", message, run_id=str(a.claim.id), worker=self.worker)
            self.kept.remove(a)

    def _settle(self, ended: list[Active]) -> bool:
        """The handlers returned: hand their runs back (a limited run past its timeout:
        recorded timed out, as at a shutdown); False if the database could not be reached."""
        timeouts = []
        for a in ended:
            if a.timed_out:
                record = self.decider.decide(a, "timeout", None)
                self.decider.log(a, "timeout", record)
                timeouts.append(record)
        back = [(a.claim.id, a.claim.token) for a in ended if not a.timed_out]
        save_deferred([a for a in ended if not a.timed_out])
        try:
            if timeouts:
                self.store().finish(timeouts)
            if back:
                reason = f"worker {self.worker} stopped before the run finished (its handler returned after the stop)"
                tasks = {a.claim.id: a.claim.task for a in ended}
                for run_id in sorted(self.store().hand_back(back, reason)):
                    message = (
                        f"run {run_id} {tasks[run_id]} handed back: worker {self.worker} shut down before it finished "
                        "(its handler returned after the stop); another worker takes it at once"
                    )
                    log_event(log, logging.WARNING, "run_handed_back", message, run_id=str(run_id), worker=self.worker)
        except Exception as exc:
            log.debug("could not record runs whose handlers returned after the worker stopped: %s", exc)
            return False
        return True
