"""The SQLite database file: created readable by its owner only, -wal, -shm and -writers alike, unless
the umask is stricter or the file exists (issue 21 item 13); a path no file can have is one
clear line (item 17)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import rota


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask() -> Iterator[Callable[[int], None]]:
    """Set the process umask for one test (restored afterwards)."""
    old = os.umask(0o022)

    def set_to(value: int) -> None:
        os.umask(value)

    yield set_to
    os.umask(old)


@pytest.mark.parametrize(("mask", "expected"), [(0o022, 0o600), (0o002, 0o600), (0o077, 0o600), (0o277, 0o400)])
def test_a_new_database_and_its_wal_and_shm_are_private(
    tmp_path: Path, umask: Callable[[int], None], mask: int, expected: int
) -> None:
    umask(mask)
    app = rota.App(f"sqlite:///{tmp_path}/rota.db", retention=None)
    try:
        if expected & stat.S_IWUSR:
            app.task(name="t")(lambda: None).enqueue()  # opens the WAL
            files = ["rota.db", "rota.db-wal", "rota.db-shm", "rota.db-writers"]
        else:  # read-only for its owner (a root test process could still write: do not try)
            app.store._conn()  # type: ignore[attr-defined]
            files = ["rota.db"]
        assert {name: oct(_mode(tmp_path / name)) for name in files} == dict.fromkeys(files, oct(expected))
    finally:
        app.close()


def test_an_existing_database_keeps_its_mode(tmp_path: Path, umask: Callable[[int], None]) -> None:
    path = tmp_path / "rota.db"
    path.touch()
    path.chmod(0o640)
    app = rota.App(f"sqlite:///{path}", retention=None)
    try:
        app.task(name="t")(lambda: None).enqueue()
        assert _mode(path) == 0o640
    finally:
        app.close()


@pytest.mark.parametrize("url", ["sqlite:///%00.db", "sqlite:///data/a%00b.db"])
def test_a_nul_in_the_path_is_one_clear_line(url: str, tmp_path: Path) -> None:
    with pytest.raises(rota.ConfigurationError, match=r"contains a NUL character \(%00\)"):
        rota.App(url)
    for command in (["runs"], ["status"], ["schedules", "--json"]):
        done = subprocess.run(
            [sys.executable, "-m", "rota", *command],
            cwd=tmp_path,
            env={**os.environ, "ROTA_DATABASE_URL": url},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 1 and done.stdout == ""
        assert done.stderr.startswith(f"error: invalid SQLite URL {url!r}") and done.stderr.count("\n") == 1, (
            done.stderr
        )


@pytest.mark.parametrize("link", ["relative", "absolute", "chain"])
def test_a_database_path_that_is_a_dangling_symlink_gets_private_files(
    tmp_path: Path, umask: Callable[[int], None], link: str
) -> None:
    """SQLite follows the link: the file it points to, and the -wal, -shm and -writers beside
    that file, are created 0600 like a database at a plain path (issue 41 item 12)."""
    umask(0o022)
    data = tmp_path / "data"
    data.mkdir()
    target = data / "real.db"
    path = tmp_path / "rota.db"
    if link == "chain":
        (tmp_path / "middle.db").symlink_to(target)
        path.symlink_to(tmp_path / "middle.db")
    else:
        path.symlink_to(target if link == "absolute" else Path("data") / "real.db")
    app = rota.App(f"sqlite:///{path}", retention=None)
    try:
        app.task(name="t")(lambda: None).enqueue()
        files = ["real.db", "real.db-wal", "real.db-shm", "real.db-writers"]
        assert {name: oct(_mode(data / name)) for name in files} == dict.fromkeys(files, oct(0o600))
        assert path.is_symlink() and path.resolve() == target
    finally:
        app.close()
