"""The faults of the chaos matrix. Each one is injected at the end of the baseline phase and
returns the moment its action was over (time.time()): the recovery clock starts there.

Instant faults (a kill, a restart, a promotion, a partition) are over when done; sustained
ones (terminations at a steady rate, held connections, an xmin holder, repeated kills) last
`Settings.fault` seconds. A partitioned host stays cut off until the producers stop: the
other workers must rescue its runs meanwhile.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from .rig import Rig


@dataclass(frozen=True)
class Scenario:
    key: str
    title: str
    inject: Callable[[Rig], float]
    needs: frozenset[str] = frozenset()  # "replica", "bouncer", "host"
    heal: Callable[[Rig], None] | None = None  # before the drain (a partition ends)


def in_flight(rig: Rig, pid: int, timeout: float = 5.0) -> None:
    """Until process `pid` is running a handler (a start logged, its end not yet), so that
    the fault takes runs with it; gives up after `timeout` s (the fault then hits an idle one)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        open_runs: set[tuple[str, int]] = set()
        for line in rig.log.read_text().splitlines()[-200:]:
            try:
                event = json.loads(line)
            except ValueError:  # a line being written
                continue
            if event["pid"] == pid:
                (open_runs.add if event["event"] == "start" else open_runs.discard)((event["run"], event["token"]))
        if open_runs:
            return
        time.sleep(0.01)
    rig.notes.append(f"the victim ran nothing within {timeout:g} s: hit while idle")


def kill9(rig: Rig) -> float:
    """SIGKILL of a worker while it runs a handler (and a new one started at once)."""
    assert rig.procs is not None
    in_flight(rig, rig.procs.alive()[0].pid)
    rig.kill9(0)
    return time.time()


def repeated_kills(rig: Rig) -> float:
    """A random worker SIGKILLed (and replaced) every lease, for the fault's length."""
    end = time.monotonic() + rig.settings.fault
    last = time.time()
    while time.monotonic() < end:
        rig.kill9(random.randrange(rig.settings.workers))
        last = time.time()
        time.sleep(rig.settings.lease)
    return last


def pg_restart(rig: Rig) -> float:
    """An immediate stop (a crash: no checkpoint, every connection cut), then a start."""
    rig.cluster.primary.stop("immediate")
    rig.cluster.primary.start()
    return time.time()


def terminations(rig: Rig) -> float:
    """pg_terminate_backend of one random rota backend every 0.5 s (workers' pools, their
    LISTEN sessions and the producers' alike)."""
    end = time.monotonic() + rig.settings.fault
    killed = 0
    with psycopg.connect(rig.cluster.primary.url(), autocommit=True) as admin:
        while time.monotonic() < end:
            killed += _terminate_one(admin)
            time.sleep(0.5)
    rig.notes.append(f"{killed} backends terminated")
    return time.time()


def pool_exhaustion(rig: Rig) -> float:
    """Idle connections opened (up to 300) and held for the fault's length, greedily: a slot
    freed is taken again within 0.1 s. The server refuses more at max_connections (100 here),
    so rota's own connections are then terminated one every 0.5 s: each one it loses, it
    cannot get back until the holder lets go (a server with no connection to spare)."""
    url = rig.cluster.primary.url()
    held: list[psycopg.Connection[tuple[object, ...]]] = []
    terminated, most = 0, 0
    with psycopg.connect(url, autocommit=True) as admin:
        end = time.monotonic() + rig.settings.fault
        try:
            while time.monotonic() < end:
                _fill(held, url)
                most = max(most, len(held))
                terminated += _terminate_one(admin, [c.info.backend_pid for c in held])
                _fill(held, url)  # the slot just freed, before rota's pool gets to it
                time.sleep(0.5)
        finally:
            for conn in held:
                with contextlib.suppress(Exception):
                    conn.close()
    rig.notes.append(f"{most} idle connections held (the server full), {terminated} of rota's terminated")
    return time.time()


def _fill(held: list[psycopg.Connection[tuple[object, ...]]], url: str) -> None:
    """Open connections until 300 are held or the server refuses one."""
    while len(held) < 300:
        try:
            held.append(psycopg.connect(url, connect_timeout=3))
        except psycopg.OperationalError:
            return


def _terminate_one(admin: psycopg.Connection[tuple[object, ...]], spare: list[int] | None = None) -> int:
    """pg_terminate_backend of one random client backend of the database (not `spare`)."""
    row = admin.execute(
        "SELECT pg_terminate_backend(pid) FROM (SELECT pid FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid() AND NOT pid = ANY(%s)"
        " AND backend_type = 'client backend' ORDER BY random() LIMIT 1) s",
        (spare or [],),
    ).fetchone()
    return int(bool(row and row[0]))


def bouncer_restart(rig: Rig) -> float:
    """PgBouncer stopped (SIGTERM: it cuts every client at once) and started again."""
    assert rig.bouncer is not None
    rig.bouncer.restart()
    return time.time()


def failover(rig: Rig) -> float:
    """The primary stopped hard, the synchronous replica promoted; the URL names both
    (target_session_attrs=read-write)."""
    rig.cluster.primary.stop("immediate")
    rig.cluster.replica.promote()
    return time.time()


def partition(rig: Rig) -> float:
    """The host's link taken down: its connections hang, no reset (heal: before the drain)."""
    assert rig.host is not None
    in_flight(rig, rig.host.procs.procs[0].pid)
    rig.host.partition()
    return time.time()


def heal(rig: Rig) -> None:
    assert rig.host is not None
    rig.host.heal()


def xmin_holder(rig: Rig) -> float:
    """A session idle in a REPEATABLE READ transaction (holding the xmin horizon) for the
    fault's length."""
    with psycopg.connect(rig.cluster.primary.url()) as holder:
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT 1")
        time.sleep(rig.settings.fault)
        holder.rollback()
    return time.time()


SCENARIOS = [
    Scenario("kill9", "worker kill -9", kill9),
    Scenario("kills", "repeated kills (one a lease)", repeated_kills),
    Scenario("restart", "PostgreSQL restart (immediate)", pg_restart),
    Scenario("terminate", "backend terminations (2/s)", terminations),
    Scenario("pool", "pool exhaustion (server full, rota's conns cut)", pool_exhaustion),
    Scenario("bouncer", "PgBouncer restart", bouncer_restart, frozenset({"bouncer"})),
    Scenario("failover", "failover to the replica", failover, frozenset({"replica"})),
    Scenario("partition", "partition of one host", partition, frozenset({"host"}), heal),
    Scenario("xmin", "idle-in-transaction xmin holder", xmin_holder),
]
BY_KEY = {s.key: s for s in SCENARIOS}
