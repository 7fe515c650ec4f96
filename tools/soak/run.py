"""One soak: a fresh database, K workers, the workload and the fault injector for `duration`
seconds, then the faults stop, the runs settle, the workers stop, and the checker reads the
database and the evidence."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import rota
from tests.faults.proxy import FaultProxy

from . import evidence
from .app import declare
from .checks import Facts
from .checks_flow import check
from .config import Config
from .faults import Fleet, Injector
from .workload import Ledger, Workload


@contextlib.contextmanager
def database(cfg: Config, folder: Path) -> Iterator[str]:
    """A SQLite file in `folder`, or a fresh schema in the PostgreSQL database (dropped after)."""
    if cfg.store == "sqlite":
        yield f"sqlite:///{folder}/soak.db"
        return
    import psycopg

    schema = f"rota_soak_{cfg.seed}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(cfg.postgres_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    separator = "&" if "?" in cfg.postgres_url else "?"
    try:
        yield f"{cfg.postgres_url}{separator}options={quote(f'-csearch_path={schema}')}"
    finally:
        if cfg.keep is None:
            with psycopg.connect(cfg.postgres_url, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def soak(cfg: Config, out: Any = print) -> tuple[list[Any], dict[str, Any]]:
    """Run the soak; returns (violations, a summary of what it did)."""
    folder = Path(cfg.keep) if cfg.keep else Path(tempfile.mkdtemp(prefix="rota-soak-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        with database(cfg, folder) as url:
            return _soak(cfg, url, folder, out)
    finally:
        if cfg.keep is None:
            shutil.rmtree(folder, ignore_errors=True)


def _soak(cfg: Config, url: str, folder: Path, out: Any) -> tuple[list[Any], dict[str, Any]]:
    client = rota.App(url, poll_interval=0.1, lease=cfg.lease, retention=None)
    declare(client)
    proxy = None
    if cfg.store == "postgres" and "proxy" in cfg.faults:
        parts = urlsplit(url)
        proxy = FaultProxy((parts.hostname or "127.0.0.1", parts.port or 5432)).start()
    try:
        with client.store._tx() as s:  # type: ignore[attr-defined]
            s.q_text("CREATE TABLE IF NOT EXISTS soak_effects (run_id TEXT NOT NULL, token BIGINT NOT NULL)")
        ledger = Ledger()
        workload = Workload(cfg, client, ledger)
        fleet = Fleet(cfg, proxy.url(url) if proxy else url, folder, ledger)
        fleet.wait_ready(client)
        workload.setup()
        facts = _drive(cfg, client, workload, fleet, proxy, ledger, folder)
        return check(facts), _summary(facts, fleet)
    finally:
        if proxy is not None:
            proxy.close()
        client.close()


def _drive(cfg: Config, client: rota.App, workload: Workload, fleet: Fleet, proxy: FaultProxy | None,
           ledger: Ledger, folder: Path) -> Facts:  # fmt: skip
    injector = Injector(cfg, fleet, proxy, client, ledger)
    stop = threading.Event()
    driver = threading.Thread(target=workload.run, args=(stop,), name="soak-workload", daemon=True)
    try:
        injector.start()
        driver.start()
        time.sleep(cfg.duration)
        stop.set()
        driver.join(60)
        injector.finish()
        stop_at = datetime.now(UTC)
        unsettled = _settle(cfg, client, ledger, stop_at)
    finally:
        stop.set()
        injector.stopping.set()
        fleet.stop_all()
    runs = {str(r.id): r for r in client.list_runs(limit=100_000)}
    store: Any = client.store
    listings = {name: _listing(fn) for name, fn in (
        ("schedules", lambda: client.list_schedules(include_inactive=True)), ("workers", client.list_workers),
        ("locks", client.list_locks), ("limits", store.list_limits), ("rates", store.list_rates),
        ("damaged flow rows", lambda: store.damaged_flow(report=False)))}  # fmt: skip
    with client.store._read() as s:  # type: ignore[attr-defined]
        rows = s.q_text("SELECT run_id, token FROM soak_effects ORDER BY token")
    effects: dict[str, list[int]] = {}
    for run_id, token in rows:
        effects.setdefault(str(run_id), []).append(int(token))
    found = evidence.read(folder, fleet.exits)
    return Facts(runs, found, ledger, effects, unsettled, stop_at, cfg.faults, fleet.killed, listings.pop("schedules"),
                 listings, fleet.signalled - fleet.killed, evidence.discarded(folder))  # fmt: skip


def _listing(fn: Any) -> list[Any] | str:
    try:
        return list(fn())
    except Exception as exc:  # a listing broken by a damaged row is a finding
        return f"{type(exc).__name__}: {exc}"


def _settle(cfg: Config, client: rota.App, ledger: Ledger, stop_at: datetime) -> dict[str, str]:
    """Let the schedules catch up with stop_at and remove them, then wait (at most cfg.settle)
    for every run to end; returns the runs still not final then."""
    deadline = time.monotonic() + cfg.settle
    for name in ledger.schedules:
        while time.monotonic() < deadline - cfg.settle / 2:
            info = ledger.call(f"get_schedule {name}", lambda n=name: client.get_schedule(n))  # type: ignore[misc]
            if info is None or (info.next_run_at or stop_at) > stop_at:
                break
            time.sleep(0.2)
    for name in [*ledger.schedules, *ledger.damaged_schedules]:
        ledger.call(f"remove_schedule {name}", lambda n=name: client.remove_schedule(n))  # type: ignore[misc]
    active: dict[str, str] = {}
    while time.monotonic() < deadline:
        runs = ledger.call("list_runs", lambda: client.list_runs(limit=100_000)) or []
        active = {str(r.id): r.status for r in runs if not r.is_final}
        if not active:
            break
        time.sleep(0.3)
    return active


def _summary(facts: Facts, fleet: Fleet) -> dict[str, Any]:
    statuses: dict[str, int] = {}
    for run in facts.runs.values():
        statuses[run.status] = statuses.get(run.status, 0) + 1
    return {
        "runs": len(facts.runs), "statuses": statuses, "executions": len(facts.evidence.executions),
        "workers started": len(fleet.procs.procs), "faults": facts.ledger.faults,
        "retry_many calls": facts.ledger.retry_many_calls, "backfilled": facts.ledger.backfilled,
    }  # fmt: skip
