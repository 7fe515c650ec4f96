"""A PostgreSQL primary and a streaming replica of it, on free ports, for failover tests.

    with Cluster.start(tmp_path, synchronous=True) as cluster:
        cluster.url()                      # multi-host URL, target_session_attrs=read-write
        cluster.primary.url()              # one server only
        cluster.primary.sql("SELECT 1")    # psql as the superuser, on the server's socket
        cluster.primary.stop("immediate")  # a hard stop: no shutdown checkpoint, sockets cut
        cluster.replica.promote()          # the replica becomes a primary (waits until it is)

The servers are the machine's own binaries (`pg_config --bindir`), run as the `postgres`
user (initdb refuses root) in a directory of their own under `base`, on ports from
tests.ports (never the shared server's 5432), with `wal_level=replica` and sockets in that
directory. The replica is a `pg_basebackup -R` of the primary, so it streams from it at once.
`synchronous=True` makes every commit wait for the replica (`synchronous_standby_names`):
a promoted replica then holds every acknowledged write; without it, replication is
asynchronous and the last commits before a hard stop may be missing on the replica.

`replica=False` starts the primary alone. Everything is stopped (immediate) and removed when
the `with` block ends. Nothing here
needs pytest: a bench or chaos script can use it too. `problem()` says why it cannot run
(no binaries, no postgres user) for a skip.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .ports import free_port

DATABASE = "rota"


def bindir() -> Path:
    out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def problem() -> str | None:
    """Why a cluster cannot be started here, or None."""
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "no postgres user on this machine"
    try:
        binaries = bindir()
    except (OSError, subprocess.CalledProcessError):
        return "no pg_config on the PATH"
    missing = [b for b in ("initdb", "pg_ctl", "pg_basebackup", "psql") if not (binaries / b).exists()]
    return f"missing PostgreSQL binaries: {', '.join(missing)}" if missing else None


def _as_postgres(args: list[str], check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    command = args if os.geteuid() != 0 else ["runuser", "-u", "postgres", "--", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


class Server:
    """One PostgreSQL server of the cluster: its data directory, port and controls."""

    def __init__(self, name: str, root: Path) -> None:
        self.name = name
        self.root = root
        self.data = root / name
        self.port = free_port()

    def url(self, database: str = DATABASE) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        """Start the server; on another port if its own was taken meanwhile (the ports are
        probed, not reserved: another test process may bind one between)."""
        log = self.root / f"{self.name}.log"
        for attempt in range(3):
            try:
                _as_postgres(
                    [str(bindir() / "pg_ctl"), "-D", str(self.data), "-l", str(log), "-w", "-t", "60", "start"]
                )
                return
            except RuntimeError as exc:
                tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                if attempt == 2 or ("could not bind" not in tail and "could not create" not in tail):
                    raise RuntimeError(f"{exc}\n{self.name}.log:\n{tail}") from None
            self.port = free_port()
            with (self.data / "postgresql.auto.conf").open("a") as conf:
                conf.write(f"port = {self.port}\n")

    def stop(self, mode: str = "fast") -> None:
        """`immediate`: a crash (no checkpoint, clients cut); `fast`: a clean shutdown."""
        _as_postgres([str(bindir() / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop"], check=False)

    def running(self) -> bool:
        return _as_postgres([str(bindir() / "pg_ctl"), "-D", str(self.data), "status"], check=False).returncode == 0

    def promote(self) -> None:
        """End recovery (a replica becomes a primary); returns once it accepts writes."""
        _as_postgres([str(bindir() / "pg_ctl"), "-D", str(self.data), "-w", "-t", "60", "promote"])

    def sql(self, statement: str, database: str = DATABASE) -> str:
        """Run `statement` with psql on the server's socket; its output, unaligned, no header."""
        out = _as_postgres(
            [
                str(bindir() / "psql"),
                *("-h", str(self.root), "-p", str(self.port), "-d", database, "-XAtq"),
                *("-v", "ON_ERROR_STOP=1", "-c", statement),
            ]
        )
        return out.stdout.strip()

    def in_recovery(self) -> bool:
        return self.sql("SELECT pg_is_in_recovery()") == "t"


class Cluster:
    """A primary and a streaming replica (see the module's docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.primary = Server("primary", root)
        self.replica = Server("replica", root)

    @classmethod
    @contextmanager
    def start(cls, base: Path | None = None, synchronous: bool = True, replica: bool = True) -> Iterator[Cluster]:
        """`replica=False`: the primary alone (a server of one's own, e.g. for a bench)."""
        root = Path(tempfile.mkdtemp(prefix="rota-pgc-", dir=base))
        shutil.chown(root, "postgres")
        root.chmod(0o700)
        cluster = cls(root)
        try:
            cluster._init_primary()
            if replica:
                cluster._init_replica(synchronous)
            yield cluster
        finally:
            for server in (cluster.replica, cluster.primary):
                if server.data.exists():
                    server.stop("immediate")
            shutil.rmtree(root, ignore_errors=True)

    def url(self, **params: str) -> str:
        """Both servers in one libpq URL, primary first; `target_session_attrs=read-write` by
        default, so a new connection skips a server in recovery or read-only."""
        query = {"target_session_attrs": "read-write", "connect_timeout": "3", **params}
        hosts = f"127.0.0.1:{self.primary.port},127.0.0.1:{self.replica.port}"
        return f"postgresql://postgres@{hosts}/{DATABASE}?" + "&".join(f"{k}={v}" for k, v in query.items())

    def wait_replayed(self, timeout: float = 30) -> None:
        """Until the replica has replayed everything the primary has written so far."""
        lsn = self.primary.sql("SELECT pg_current_wal_lsn()")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.replica.sql(f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn") == "t":
                return
            time.sleep(0.1)
        raise TimeoutError(f"the replica did not replay up to {lsn} within {timeout} s")

    def _init_primary(self) -> None:
        p = self.primary
        _as_postgres([str(bindir() / "initdb"), "-D", str(p.data), "-U", "postgres", "--auth=trust", "-E", "UTF8"])
        settings = {
            "port": str(p.port),
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": f"'{self.root}'",
            "wal_level": "replica",
            "max_wal_senders": "5",
            "hot_standby": "on",
            "fsync": "off",  # a test cluster: a crash of the machine loses it anyway
            "max_connections": "100",
            "shared_buffers": "16MB",
        }
        with (p.data / "postgresql.conf").open("a") as conf:
            conf.write("".join(f"{k} = {v}\n" for k, v in settings.items()))
        with (p.data / "pg_hba.conf").open("a") as hba:
            hba.write("host replication postgres 127.0.0.1/32 trust\n")
        p.start()
        p.sql(f"CREATE DATABASE {DATABASE}", database="postgres")

    def _init_replica(self, synchronous: bool) -> None:
        p, r = self.primary, self.replica
        _as_postgres(
            [
                str(bindir() / "pg_basebackup"),
                *("-h", "127.0.0.1", "-p", str(p.port), "-U", "postgres", "-D", str(r.data)),
                *("-R", "-X", "stream", "-c", "fast"),
            ]
        )
        with (r.data / "postgresql.auto.conf").open("a") as conf:
            conf.write(f"port = {r.port}\nsynchronous_standby_names = ''\n")
            conf.write(f"primary_conninfo = 'host=127.0.0.1 port={p.port} user=postgres application_name=replica'\n")
        r.start()
        if synchronous:  # only now: a commit before the replica streams would wait for it
            p.sql("ALTER SYSTEM SET synchronous_standby_names = 'replica'")
            p.sql("SELECT pg_reload_conf()")
        state = "sync" if synchronous else "async"
        deadline = time.monotonic() + 30
        while p.sql(f"SELECT count(*) FROM pg_stat_replication WHERE sync_state = '{state}'") != "1":
            if time.monotonic() > deadline:
                raise TimeoutError("the replica did not start streaming within 30 s")
            time.sleep(0.1)
