"""The worker: claims due runs, executes them, keeps their leases alive, writes outcomes.

Design notes
------------
Terms. A worker (`host:pid`) *claims* a run: the store gives it a fencing *token* and a
*lease* that ends `lease` seconds later on the database clock. While the run executes,
heartbeats renew the leases of every run the worker holds (every `lease / 3` s), and the
same statement tells it which runs were lost (token no longer matches: rescued by someone
else) and which were asked to stop. Liveness is separate from runtime: a run may take hours
as long as its worker is alive; a task's own limit is its `timeout`.

Roles (one module each; each owns its state and, where it has one, its task):

- worker.py      `Worker`: builds the roles, wires their small methods, run/run_until_idle.
- shutdown.py    start on a thread, stop, signals, drain, hand back, mark stopped;
  stopping.py    runs whose handlers outlive the stop (fence and exit, or keep).
- poll.py        the poll loop: the order below, in one place.
- claims.py      the claimer (claim up to free slots, dispatch) and the finisher (a run's end).
- prefetch.py    runs claimed a little ahead of free slots (bounded, leased), started as
                 slots free; why and when (fairness across workers) in its docstring.
- executors.py   one interface for coroutine / daemon thread / child process; the in-flight
                 table, the hard concurrency cap and the stuck count.
- child.py       the child process of an isolated run.
- active.py      the in-flight run record, argument decoding, the RunContext.
- outcomes.py    a handler's end -> Outcome (succeeded / retry with backoff / failed /
                 cancelled / unknown task / corrupt arguments), and its log line.
- completer.py   the outcome writer: buffered, token-checked batches, transient retries.
- leases.py      heartbeats, lost leases, cancel requests, renewal after an outage.
- rescue.py      the rescuer (expired leases of other workers), under the rescue rule.
- ticks.py       due schedule ticks -> runs, in their own task.
- maintenance.py pruning finished runs and gone workers.
- outage.py      outage state: one warning per outage, backoff, the rescue rule.
- wakeups.py     due times, LISTEN/NOTIFY (PostgreSQL), data_version watch (SQLite).
- loopwatch.py   names an `async def` handler that blocks the event loop.
- db.py          store calls on their own small thread pool, awaited from the loop.
- service.py     task helpers: named tasks, supervision (restart a role that died).
- settings.py    validated settings; view.py the narrow view of the app (WorkerView);
  counters.py    WorkerCounters and the worker's identity.

The order the guarantees depend on (poll.py). After a database error the poll loop first
renews this worker's own leases (the heartbeat statement is token-checked and ignores
`lease_until`: a run is ours while nobody else took it), then writes its queued outcomes;
only then does it poll, rescue or claim. Each pass: renew (after an outage) -> write
outcomes -> learn what is due and rescue (once per poll interval) -> claim. Schedule ticks
are materialized in their own task (ticks.py), so a tick insert waiting on a row lock never
holds up claims or rescue.

The rescue rule (outage.py, rescue.py). Every worker's poll runs one cheap query for runs
whose lease has expired; there is no leader. Rescue waits until (a) this worker's calls
work, (b) one lease has passed since its last outage ended, and (c) on PostgreSQL the
server has been up for one lease (`pg_postmaster_start_time()`). So when the database was
down for everybody (restart, failover, SQLite locked past the busy timeout), every owner
gets a whole lease of working database to renew before its runs can be rescued; reconnect
backoff is capped at the heartbeat interval so a live owner comes back within it. A worker
cut off alone (partition) is rescued by the others, who saw no outage, once its lease
expires.

Outcomes (completer.py) are written in small batches with one token-checked statement,
or taken along by the next claim in its transaction (`Store.finish_and_claim`: one round
trip and one commit for a finished batch and the next); their leases keep being renewed
until they are written, so a result computed during an
outage is written when the database is back (or, if someone rescued the run meanwhile,
discarded and the run retried). A late result from a fenced-off attempt is never written.

Slots (executors.py). Concurrency is a hard cap on running handler bodies: a sync handler
past its timeout, or whose lease was lost, keeps its slot until its thread returns (counted
in `stuck`, written to the worker registry); process isolation kills the child and frees it.

Shutdown (shutdown.py): stop claiming, hand back runs claimed ahead that never started,
drain up to `shutdown_timeout`, stop what is left (kill child processes, cancel coroutines)
and hand back the runs whose handlers ended (pending again at once, the attempt not
counted), flush outcomes, release this process's named locks, mark the worker stopped. A
second signal skips the drain. A run whose handler still runs is never handed back while
this process can run it (stopping.py): `rota worker` fences its lease and ends the process;
a worker in a process that goes on keeps it until the handler returns.
"""

from __future__ import annotations

from .active import CorruptArguments
from .counters import WorkerCounters, worker_identity
from .view import WorkerView
from .worker import Worker

__all__ = ["CorruptArguments", "Worker", "WorkerCounters", "WorkerView", "worker_identity"]
