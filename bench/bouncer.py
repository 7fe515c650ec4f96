"""W1 drain through PgBouncer in transaction mode (issue 45), beside the direct drain.

`rota-pg-drain-1w-bouncer` is rota-pg-drain-1w with every connection of the measuring
process and of the worker going through a PgBouncer this module starts for the run (Debian's
`pgbouncer`, pool_mode=transaction, a pool as large as the worker's), with
ROTA_POOLER=transaction and ROTA_LISTEN_URL set to the direct URL (the deploy guide's
settings). Skipped with one line when pgbouncer is not installed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

from bench.core import Ctx, Metrics, System, Unsupported

POOL = 10  # the worker's own pool (rota's default pool_size)

_INI = """[databases]
{db} = host={host} port={port} dbname={db} user={user}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen}
unix_socket_dir =
auth_type = trust
auth_file = {dir}/users.txt
pool_mode = transaction
default_pool_size = {pool}
max_client_conn = 500
server_reset_query =
ignore_startup_parameters = extra_float_digits
logfile = {dir}/pgbouncer.log
pidfile = {dir}/pgbouncer.pid
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def bouncer(direct_url: str, pool: int = POOL) -> Iterator[str]:
    """A transaction-mode PgBouncer in front of the database of `direct_url`; yields its URL."""
    exe = shutil.which("pgbouncer") or shutil.which("/usr/sbin/pgbouncer")
    if exe is None:
        raise Unsupported("pgbouncer is not installed (apt-get install pgbouncer)")
    parts = urlsplit(direct_url)
    user, db = parts.username or "postgres", parts.path.lstrip("/")
    folder = Path(tempfile.mkdtemp(prefix="rota-bench-bouncer-"))
    folder.chmod(0o777)
    listen = _free_port()
    host, port = parts.hostname or "127.0.0.1", parts.port or 5432
    ini = _INI.format(db=db, host=host, port=port, user=user, listen=listen, dir=folder, pool=pool)
    (folder / "pgbouncer.ini").write_text(ini)
    (folder / "users.txt").write_text(f'"{user}" ""\n')
    for f in folder.iterdir():
        f.chmod(0o644)
    as_postgres = {"user": "postgres", "group": "postgres", "extra_groups": []} if os.geteuid() == 0 else {}
    proc = subprocess.Popen([exe, "-q", str(folder / "pgbouncer.ini")], **as_postgres)  # type: ignore[call-overload]
    url = f"postgresql://{user}@127.0.0.1:{listen}/{db}"
    try:
        _wait_ready(url, proc)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(folder, ignore_errors=True)


def _wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    import psycopg

    deadline = time.monotonic() + 15
    while True:
        if proc.poll() is not None:
            raise Unsupported(f"pgbouncer exited at start ({proc.returncode})")
        try:
            psycopg.connect(url, connect_timeout=2, prepare_threshold=None).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def drain(ctx: Ctx, workers: int = 1) -> Metrics:
    """W1 drain (rota_workloads.drain) with the app and its workers behind the bouncer."""
    from bench import rota_workloads as w

    with w.database(ctx, "postgres") as direct, bouncer(direct) as url:
        settings = {"ROTA_POOLER": "transaction", "ROTA_LISTEN_URL": direct}
        os.environ.update(settings)  # the measuring process's app (a child process of its own)
        m = w.load_app_module(url)
        w.enqueue_bulk(m.noop, ctx.jobs)
        start = w.start_workers(ctx, url, workers, w.DRAIN_CONCURRENCY, env=settings)
        return w.measure_drain(ctx, ctx.jobs, start, w.nothing_left(m.app), pg_url=url)


BOUNCER_SYSTEMS: tuple[System, ...] = (
    System(
        key="rota-pg-drain-1w-bouncer",
        table="W1.drain",
        label="rota, 1 worker, through PgBouncer (transaction mode)",
        backend="postgres",
        kind="rota",
        func="bench.bouncer:drain",
        params={"workers": 1},
        settings=f"as rota-pg-drain-1w; PgBouncer pool_mode=transaction, default_pool_size={POOL}, "
        "ROTA_POOLER=transaction, ROTA_LISTEN_URL direct",
    ),
)
