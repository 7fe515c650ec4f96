"""A PgBouncer of the test's own, in transaction mode, in front of the test PostgreSQL.

`start_bouncer(schema)` runs Debian's `pgbouncer` (1.18 in CI) on a free port with small
pools; its one database entry sets the schema's search_path on each server connection
(`connect_query`: PgBouncer 1.18 refuses the `options` startup parameter the direct URLs use
for it). As root it runs as the `postgres` user (pgbouncer refuses root). `missing()` says
why it cannot run; under CI=true a missing pgbouncer fails instead of skipping.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

from .ports import free_port

BINARIES = ("pgbouncer", "/usr/sbin/pgbouncer")


def binary() -> str | None:
    for name in BINARIES:
        found = shutil.which(name)
        if found:
            return found
    return None


def missing() -> str | None:
    if binary() is None:
        return "pgbouncer is not installed (apt-get install pgbouncer) to run the suite through it"
    return None


_INI = """[databases]
{name} = host={host} port={port} dbname={dbname} user={user} connect_query='SET search_path = "{schema}"'

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen}
unix_socket_dir =
auth_type = trust
auth_file = {dir}/users.txt
pool_mode = transaction
default_pool_size = {pool}
reserve_pool_size = 0
max_client_conn = 200
server_reset_query =
ignore_startup_parameters = extra_float_digits
logfile = {dir}/pgbouncer.log
pidfile = {dir}/pgbouncer.pid
admin_users = {user}
"""


class Bouncer:
    """A PgBouncer process for `schema` of the database at `direct_url` (see the module);
    `restart()` stops it hard and starts it again on the same port."""

    def __init__(self, direct_url: str, schema: str, pool: int = 4) -> None:
        exe = binary()
        assert exe is not None, missing()
        parts = urlsplit(direct_url)
        user, dbname = parts.username or "postgres", parts.path.lstrip("/")
        self.folder = Path(tempfile.mkdtemp(prefix="rota-bouncer-"))
        self.folder.chmod(0o777)  # the postgres user writes its log and pid file here
        values = {"name": dbname, "host": parts.hostname or "127.0.0.1", "port": parts.port or 5432,
                  "dbname": dbname, "user": user, "schema": schema, "listen": free_port(), "dir": self.folder,
                  "pool": pool}  # fmt: skip
        (self.folder / "users.txt").write_text(f'"{user}" ""\n')
        (self.folder / "pgbouncer.ini").write_text(_INI.format(**values))
        for f in self.folder.iterdir():
            f.chmod(0o644)
        self.command = [exe, "-q", str(self.folder / "pgbouncer.ini")]
        self.url = f"postgresql://{user}@127.0.0.1:{values['listen']}/{dbname}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        # As root: as the postgres user, its own process (runuser would wait 2 s at SIGTERM).
        as_postgres = {"user": "postgres", "group": "postgres", "extra_groups": []} if os.geteuid() == 0 else {}
        self.proc = subprocess.Popen(self.command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **as_postgres)  # type: ignore[call-overload]
        _wait_ready(self.url, self.proc, self.folder)

    def stop(self) -> None:
        """SIGTERM: PgBouncer 1.18 shuts down at once, cutting every client connection."""
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)


@contextlib.contextmanager
def start_bouncer(direct_url: str, schema: str, pool: int = 4) -> Iterator[str]:
    """Run a PgBouncer for `schema` of the database at `direct_url`; yield its URL."""
    bouncer = Bouncer(direct_url, schema, pool)
    try:
        bouncer.start()
        yield bouncer.url
    finally:
        bouncer.remove()


def _wait_ready(url: str, proc: subprocess.Popen[bytes], folder: Path) -> None:
    import psycopg

    deadline = time.monotonic() + 15
    while True:
        if proc.poll() is not None:
            log = (folder / "pgbouncer.log").read_text(errors="replace") if (folder / "pgbouncer.log").exists() else ""
            raise RuntimeError(f"pgbouncer exited ({proc.returncode}): {proc.stderr and proc.stderr.read()!r} {log}")
        try:
            psycopg.connect(url, connect_timeout=2, prepare_threshold=None).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
