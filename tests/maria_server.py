"""A MariaDB (or MySQL) server of a test's own, on a free port, for restart tests:

    with Server.start() as server:
        server.url()        # mysql://root@127.0.0.1:PORT/rota (root, no password)
        server.kill9()      # a crash: every connection cut, no shutdown, crash recovery next
        server.stop()       # a clean shutdown (mysqladmin shutdown)
        server.run()        # up again on the same port and data directory

The machine's own binaries (mariadb-install-db and mariadbd, else mysql_install_db and
mysqld), a data directory in a temporary directory of its own, its socket there, TCP on
127.0.0.1 and a port from tests.ports: the shared server on 3306 is never touched. As root,
the server runs as root (`--user=root`). Everything is killed and removed when the `with`
block ends. `problem()` says why it cannot run here (no binaries), for a skip.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .ports import free_port

DATABASE = "rota"


def _binary(*names: str) -> str | None:
    for name in names:
        found = shutil.which(name) or next((p for p in (f"/usr/sbin/{name}",) if os.path.exists(p)), None)
        if found:
            return found
    return None


def problem() -> str | None:
    """Why a server of one's own cannot be started here, or None."""
    if _binary("mariadbd", "mysqld") is None:
        return "no mariadbd or mysqld on this machine"
    if _binary("mariadb-install-db", "mysql_install_db") is None:
        return "no mariadb-install-db or mysql_install_db on this machine"
    return None


class Server:
    def __init__(self, base: Path, port: int) -> None:
        self.base = base
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None

    @classmethod
    @contextmanager
    def start(cls) -> Iterator[Server]:
        base = Path(tempfile.mkdtemp(prefix="rota-maria-"))  # short: a socket path has ~100 bytes
        server = cls(base, free_port())
        try:
            server._install()
            server.run()
            server.sql(f"CREATE DATABASE {DATABASE} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
            yield server
        finally:
            server.kill9()
            shutil.rmtree(base, ignore_errors=True)

    def url(self) -> str:
        return f"mysql://root@127.0.0.1:{self.port}/{DATABASE}"

    def _install(self) -> None:
        install = _binary("mariadb-install-db", "mysql_install_db")
        assert install is not None
        args = [install, "--no-defaults", f"--datadir={self.base / 'data'}", "--auth-root-authentication-method=normal"]
        args += ["--skip-test-db", *self._as_root()]
        done = subprocess.run(args, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{install} failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")

    def _as_root(self) -> list[str]:
        return ["--user=root"] if os.geteuid() == 0 else []

    def run(self, timeout: float = 60) -> None:
        """Start the server (after a kill -9: with InnoDB's crash recovery); returns once it
        answers on its port."""
        daemon = _binary("mariadbd", "mysqld")
        assert daemon is not None
        args = [
            daemon, "--no-defaults", f"--datadir={self.base / 'data'}", f"--port={self.port}",
            "--bind-address=127.0.0.1", f"--socket={self.base / 'sock'}", f"--pid-file={self.base / 'pid'}",
            f"--log-error={self.base / 'error.log'}", "--innodb-buffer-pool-size=32M", "--max-connections=200",
            *self._as_root(),
        ]  # fmt: skip
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while not self.answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = (self.base / "error.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"the MariaDB server on port {self.port} did not start:\n{log}")
            time.sleep(0.05)

    def answers(self) -> bool:
        import pymysql

        try:
            pymysql.connect(host="127.0.0.1", port=self.port, user="root", connect_timeout=1).close()
        except pymysql.Error:
            return False
        return True

    def sql(self, statement: str) -> None:
        import pymysql

        conn = pymysql.connect(host="127.0.0.1", port=self.port, user="root", autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute(statement)
        finally:
            conn.close()

    def kill9(self) -> None:
        """SIGKILL: the server dies at once, as in a crash or an OOM kill."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self, timeout: float = 60) -> None:
        """A clean shutdown (SIGTERM: connections are told, InnoDB flushes)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout)
