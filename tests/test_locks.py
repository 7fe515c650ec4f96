"""Named locks with fencing tokens (issue 6), on each backend: SQLite, PostgreSQL, Redis.

Process-level tests run real processes (tests/apps/lock_child.py, tests/apps/locks_app.py):
8 processes contending for one lock, a holder killed with SIGKILL, a holder paused with
SIGSTOP past its TTL, a worker's shutdown. Every wait polls a condition with a deadline;
time-based assertions keep wide margins for a loaded 2-core machine.

Redis isolation: each test gets its own key prefix (`?prefix=` on the locks URL), and its keys
are deleted afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import rota
from rota.cli import main as cli_main
from rota.errors import ConfigurationError, DatabaseUnavailable

from .conftest import REDIS_URL, WITH_MYSQL, make_app, postgres_schema, require, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


ROOT = Path(__file__).resolve().parent.parent
# Per backend. The issue asks for ~10 s; 5 s keeps this file near a minute and a half (8
# processes still pass the lock around ~1000 times). ROTA_TEST_CONTENTION_SECONDS=10 for more.
CONTENTION_SECONDS = float(os.environ.get("ROTA_TEST_CONTENTION_SECONDS", "5"))
CONTENDERS = 8


# -- the backend fixture ------------------------------------------------------------------
class Backend:
    """One lock backend under test: apps for this process and the environment for children."""

    def __init__(self, kind: str, database_url: str, locks_url: str | None, tmp: Path) -> None:
        self.kind = kind
        self.database_url = database_url
        self.locks_url = locks_url
        self.tmp = tmp
        self.apps: list[rota.App] = []
        self.procs: list[subprocess.Popen[bytes]] = []

    def __repr__(self) -> str:
        return f"<Backend {self.kind}>"

    def app(self, **options: Any) -> rota.App:
        app = make_app(self.database_url, locks_url=self.locks_url, **options)
        self.apps.append(app)
        return app

    @property
    def env(self) -> dict[str, str]:
        env = {**os.environ, "ROTA_DATABASE_URL": self.database_url, "PYTHONUNBUFFERED": "1"}
        env.pop("ROTA_LOCKS_URL", None)
        if self.locks_url:
            env["ROTA_LOCKS_URL"] = self.locks_url
        return env

    def spawn(self, *args: str, log: str) -> subprocess.Popen[bytes]:
        out = open(self.tmp / log, "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen([sys.executable, *args], cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT)
        out.close()
        self.procs.append(proc)
        return proc

    def output(self, log: str) -> str:
        return (self.tmp / log).read_text(errors="replace")

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with_suppressed(lambda p=proc: os.kill(p.pid, signal.SIGCONT))
                proc.kill()
            proc.wait(10)
        for app in self.apps:
            for worker in list(app._workers):
                worker.stop(wait=True, timeout=10)
            with_suppressed(app.close)


def with_suppressed(fn: Callable[[], object]) -> None:
    with contextlib.suppress(Exception):
        fn()


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("redis", marks=pytest.mark.redis),
    ]
)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    kind = request.param
    if kind == "sqlite":
        b = Backend(kind, f"sqlite:///{tmp_path}/rota.db", None, tmp_path)
        yield b
        b.cleanup()
    elif kind == "postgres":
        require("postgres")
        with postgres_schema() as url:
            b = Backend(kind, url, None, tmp_path)
            yield b
            b.cleanup()
    else:
        require("redis")
        import redis

        prefix = f"rotatest-{uuid.uuid4().hex[:12]}"
        separator = "&" if "?" in REDIS_URL else "?"
        b = Backend(
            kind,
            f"sqlite:///{tmp_path}/rota.db",
            f"{REDIS_URL}{separator}prefix={prefix}",
            tmp_path,
        )
        try:
            yield b
        finally:
            b.cleanup()
            client = redis.Redis.from_url(REDIS_URL)
            keys = [*client.scan_iter(match=f"{prefix}:*"), *client.scan_iter(match=f"{{{prefix}:*")]
            if keys:
                client.delete(*keys)
            client.close()


# -- helpers --------------------------------------------------------------------------------
def wait_until(condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def info(app: rota.App, name: str) -> rota.LockInfo | None:
    return next((i for i in app.list_locks() if i.name == name), None)


def held_by(app: rota.App, name: str) -> str | None:
    found = info(app, name)
    return found.owner if found is not None and found.held else None


def start_holder(backend: Backend, name: str, ttl: float) -> tuple[subprocess.Popen[bytes], Path, str, int]:
    """A child process holding `name`; returns it, its report file, its owner and token."""
    report = backend.tmp / f"hold-{uuid.uuid4().hex[:6]}.txt"
    proc = backend.spawn("-m", "tests.apps.lock_child", "hold", name, str(ttl), str(report), log=report.name + ".log")

    def started() -> list[str] | None:
        assert proc.poll() is None, f"holder exited early:\n{backend.output(report.name + '.log')}"
        held = [line.split() for line in lines(report) if line.startswith("held ")]
        return held[0] if held else None

    _, owner, token, _ = wait_until(started, 60, "the holder to take the lock")
    return proc, report, owner, int(token)


def start_paused_holder(backend: Backend, name: str, ttl: float) -> tuple[subprocess.Popen[bytes], Path, int]:
    """A child holding `name`, stopped with SIGSTOP before its first renewal began.

    Stopping it in the middle of a renewal would leave a SQLite write lock or a PostgreSQL row
    lock held by a frozen process (every other writer would wait for SIGCONT), which is not the
    scenario under test. On a machine too slow to stop it in time, start over."""
    for _ in range(3):
        proc, report, _, token = start_holder(backend, name, ttl)
        proc.send_signal(signal.SIGSTOP)
        held_ns = int(next(line for line in lines(report) if line.startswith("held ")).split()[3])
        if time.monotonic_ns() - held_ns < ttl / 3 * 0.8 * 1e9:
            return proc, report, token
        proc.kill()  # too late to be sure: its lock expires after ttl, the next child waits
        proc.wait(10)
    raise AssertionError("could not pause a lock holder before its first renewal (machine too slow?)")


# -- contention across processes -----------------------------------------------------------
@pytest.mark.slow
def test_contention_8_processes_exclusive_and_tokens_increase(backend: Backend) -> None:
    log = backend.tmp / "sections.log"
    go = backend.tmp / "go"
    backend.app().list_locks()  # migrate once, before the children race to
    args = ["contend", "shared", str(log), str(go), str(CONTENTION_SECONDS), "10"]
    procs = [backend.spawn("-m", "tests.apps.lock_child", *args, log=f"contender-{i}.log") for i in range(CONTENDERS)]

    def all_ready() -> bool:
        for i, proc in enumerate(procs):
            assert proc.poll() is None, f"contender {i} died:\n{backend.output(f'contender-{i}.log')}"
        return sum(line.startswith("ready ") for line in lines(log)) == CONTENDERS

    wait_until(all_ready, 90, "8 contenders to start")
    go.touch()
    for i, proc in enumerate(procs):
        code = proc.wait(CONTENTION_SECONDS + 90)
        assert code == 0, f"contender {i} exited {code}:\n{backend.output(f'contender-{i}.log')}\n" + "\n".join(
            line for line in lines(log) if line.startswith(("lost", "unavailable"))
        )

    enters: dict[tuple[str, int], int] = {}
    exits: dict[tuple[str, int], int] = {}
    for line in lines(log):
        kind, *fields = line.split()
        if kind == "enter":
            enters[(fields[0], int(fields[1]))] = int(fields[2])
        elif kind == "exit":
            exits[(fields[0], int(fields[1]))] = int(fields[2])
    assert enters.keys() == exits.keys()
    sections = sorted((enters[key], exits[key], key[1], key[0]) for key in enters)
    assert len(sections) >= 50, f"only {len(sections)} critical sections in {CONTENTION_SECONDS} s"

    for before, after in itertools.pairwise(sections):
        assert after[0] >= before[1], f"critical sections overlap: {before} and {after}"
    tokens = [token for _, _, token, _ in sections]
    # Strictly increasing in acquisition order, and every acquisition of the name is here.
    assert tokens == list(range(1, len(tokens) + 1)), tokens[:50]
    per_process = {pid: sum(1 for s in sections if s[3] == pid) for pid in {s[3] for s in sections}}
    assert len(per_process) >= CONTENDERS // 2, f"too few processes ever got the lock: {per_process}"


# -- crashes and pauses --------------------------------------------------------------------
@pytest.mark.slow
def test_holder_killed_with_sigkill_blocks_only_until_its_ttl(backend: Backend) -> None:
    app = backend.app()
    ttl = 3.0
    proc, _, owner, token = start_holder(backend, "crashy", ttl)
    assert app.try_lock("crashy", ttl=10) is None
    assert held_by(app, "crashy") == owner

    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    killed = time.monotonic()
    with app.lock("crashy", ttl=10, wait=ttl + 30) as lease:
        waited = time.monotonic() - killed
        assert waited <= ttl + 5, f"the dead holder blocked the lock for {waited:.1f} s (ttl {ttl})"
        assert lease.token > token
        # The dead holder's late release (and renewal) are no-ops: the lock stays ours.
        assert app.locks.backend.release("crashy", owner, token) is False
        assert app.locks.backend.renew("crashy", owner, token, 60) is False
        assert held_by(app, "crashy") == lease.owner
        assert app.try_lock("crashy") is None
    assert held_by(app, "crashy") is None


@pytest.mark.slow
def test_holder_paused_past_its_ttl_learns_it_lost_the_lock(backend: Backend) -> None:
    app = backend.app()
    ttl = 3.0
    proc, report, token = start_paused_holder(backend, "paused", ttl)
    try:
        # Another holder gets the lock once the paused one's TTL has passed.
        successor = app.lock("paused", ttl=30, wait=ttl + 30)
        with successor as lease:
            assert lease.token > token
            proc.send_signal(signal.SIGCONT)
            # Let the woken holder's renewer run (it must fail, not steal the lock back).
            time.sleep(1.0)
            Path(str(report) + ".go").touch()
            assert proc.wait(30) == 3, backend.output(report.name + ".log")
            assert held_by(app, "paused") == lease.owner
            assert not lease.lost
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
    out = lines(report)
    assert "inside lost=True" in out, out
    assert any(line.startswith("LockLost ") and "'paused'" in line for line in out), out
    assert held_by(app, "paused") is None


@pytest.mark.slow
def test_holder_paused_past_its_ttl_learns_it_even_if_nobody_took_over(backend: Backend) -> None:
    app = backend.app()
    ttl = 1.5
    proc, report, _ = start_paused_holder(backend, "dozy", ttl)
    try:
        wait_until(lambda: held_by(app, "dozy") is None, ttl + 30, "the paused holder's lease to expire")
    finally:
        proc.send_signal(signal.SIGCONT)
    Path(str(report) + ".go").touch()
    assert proc.wait(30) == 3, backend.output(report.name + ".log")
    out = lines(report)
    assert "inside lost=True" in out and any(line.startswith("LockLost ") for line in out), out
    assert held_by(app, "dozy") is None


@pytest.mark.slow
def test_worker_shutdown_releases_the_locks_its_process_holds(backend: Backend) -> None:
    app = backend.app()
    app.list_locks()  # migrate before the worker starts

    @app.task(name="locks.take")
    def take(name: str, ttl: float) -> dict[str, object]:  # the worker runs its own copy
        raise AssertionError("runs in the worker")

    worker = backend.spawn(
        "-m",
        "rota",
        "worker",
        "tests.apps.locks_app:app",
        "--shutdown-timeout",
        "10",
        log="worker.log",
    )
    run = take.enqueue("held-by-worker", 600.0).wait(timeout=60)
    assert run.status == "succeeded", (run, backend.output("worker.log"))
    assert run.result["pid"] == worker.pid
    assert held_by(app, "held-by-worker") == run.result["owner"]

    began = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(60) == 0, backend.output("worker.log")
    assert time.monotonic() - began < 60
    # Released at shutdown, not left to expire after its 600 s TTL.
    assert held_by(app, "held-by-worker") is None
    lease = app.try_lock("held-by-worker", ttl=5)
    assert lease is not None and lease.token == run.result["token"] + 1
    lease.release()


# -- one process ---------------------------------------------------------------------------
def test_wait_times_out_with_a_message_naming_the_lock_and_holder(backend: Backend) -> None:
    app, other = backend.app(), backend.app()
    holder = app.try_lock("report", ttl=30)
    assert holder is not None
    began = time.monotonic()
    with pytest.raises(rota.LockUnavailable) as caught, other.lock("report", ttl=5, wait=1.0):
        pytest.fail("acquired a held lock")
    waited = time.monotonic() - began
    assert 0.9 <= waited <= 6, waited
    message = str(caught.value)
    assert "'report'" in message and holder.owner in message and f"token {holder.token}" in message
    assert "1 s" in message

    began = time.monotonic()
    with pytest.raises(rota.LockUnavailable), other.lock("report", ttl=5):  # wait=0: at once
        pass
    assert time.monotonic() - began < 3
    holder.release()


def test_wait_acquires_when_the_holder_releases(backend: Backend) -> None:
    app, other = backend.app(), backend.app()
    holder = app.try_lock("handover", ttl=30)
    assert holder is not None
    timer = threading.Timer(0.5, holder.release)
    timer.start()
    began = time.monotonic()
    with other.lock("handover", ttl=5, wait=30) as lease:
        assert time.monotonic() - began < 15
        assert lease.token == holder.token + 1
    timer.join()


def test_try_lock_returns_none_while_held_and_tokens_increase(backend: Backend) -> None:
    app = backend.app()
    first = app.try_lock("t", ttl=30)
    assert first is not None and first.token == 1 and not first.lost
    assert app.try_lock("t", ttl=30) is None
    assert first.release() is True
    tokens = []
    for _ in range(5):
        lease = app.try_lock("t", ttl=30)
        assert lease is not None
        tokens.append(lease.token)
        lease.release()
    assert tokens == [2, 3, 4, 5, 6]
    other = app.try_lock("other-name", ttl=30)
    assert other is not None and other.token == 1  # tokens are per name
    other.release()


def test_release_is_idempotent(backend: Backend) -> None:
    app = backend.app()
    with app.lock("idem", ttl=30) as lease:
        assert lease.release() is True
        assert lease.release() is False
        assert lease.released and not lease.lost
        assert held_by(app, "idem") is None
        again = app.try_lock("idem", ttl=30)  # someone else may take it at once...
        assert again is not None
    # ...and leaving the block (a third release) does not touch their lock.
    assert held_by(app, "idem") == again.owner
    again.release()
    app.release_process_locks()
    assert held_by(app, "idem") is None


def test_stale_release_and_renew_are_no_ops(backend: Backend) -> None:
    app = backend.app()
    backend_ = app.locks.backend
    old = backend_.acquire("stale", "old-owner", 0.5)
    assert old == 1
    assert backend_.release("stale", "old-owner", old + 1) is False  # wrong token
    assert backend_.release("stale", "someone-else", old) is False  # wrong owner
    assert held_by(app, "stale") == "old-owner"
    lease = wait_until(lambda: app.try_lock("stale", ttl=30), 30, "the old lease to expire")
    assert lease.token == old + 1
    assert backend_.release("stale", "old-owner", old) is False
    assert backend_.renew("stale", "old-owner", old, 30) is False
    assert held_by(app, "stale") == lease.owner
    assert lease.release() is True


def test_renewal_keeps_a_lock_alive_past_its_ttl(backend: Backend) -> None:
    app, other = backend.app(), backend.app()
    # renewed every ttl/3: a renewal may come ttl*2/3 late (1 s here, a loaded CI machine's
    # hiccup; with ttl 1 a 0.67 s one lost the lock once in 16 runs of this file)
    ttl = 1.5
    with app.lock("long", ttl=ttl) as lease:
        deadline = time.monotonic() + 2 * ttl
        while time.monotonic() < deadline:
            assert other.try_lock("long", ttl=5) is None
            time.sleep(0.2)
        assert not lease.lost
        found = info(other, "long")
        assert found is not None and found.held and found.token == lease.token
    assert held_by(other, "long") is None


def test_renewal_refused_marks_the_lease_lost(backend: Backend) -> None:
    app, other = backend.app(), backend.app()
    with pytest.raises(rota.LockLost, match="'taken'"), app.lock("taken", ttl=1.5) as lease:
        # An operator force-releases it and someone else takes it over.
        assert app.locks.backend.release("taken", lease.owner, lease.token)
        thief = other.try_lock("taken", ttl=30)
        assert thief is not None and thief.token == lease.token + 1
        wait_until(lambda: lease.lost, 10, "the refused renewal to mark the lease lost")
    assert held_by(other, "taken") == thief.owner  # our exit did not release their lock
    thief.release()


def test_backend_unreachable_during_renewal_loses_the_lease_after_its_ttl(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = backend.app()
    began = time.monotonic()
    lease = app.try_lock("cut-off", ttl=1.0)
    assert lease is not None

    def unreachable(*args: Any) -> bool:
        raise DatabaseUnavailable("simulated outage")

    monkeypatch.setattr(app.locks.backend, "renew", unreachable)
    wait_until(lambda: lease.lost, 10, "the lease to be lost")
    assert time.monotonic() - began >= 0.95  # lost when its TTL ran out, not at the first error
    with pytest.raises(rota.LockLost):
        lease.__exit__(None, None, None)


def test_lost_is_never_false_after_the_ttl_passed_without_renewal(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The local deadline starts before the acquire call, so a slow acquire shortens it."""
    app = backend.app()
    real_acquire = app.locks.backend.acquire

    acquired: list[float] = []

    def slow_acquire(name: str, owner: str, ttl: float) -> int | None:
        token = real_acquire(name, owner, ttl)
        acquired.append(time.monotonic())  # the backend's expiry is at most ttl from here
        time.sleep(0.6)  # the reply took its time (network, GC pause...)
        return token

    def unreachable(*args: Any) -> bool:
        raise DatabaseUnavailable("simulated outage")

    monkeypatch.setattr(app.locks.backend, "acquire", slow_acquire)
    monkeypatch.setattr(app.locks.backend, "renew", unreachable)  # no refusal: only the clock
    lease = app.try_lock("slow", ttl=1.0)
    assert lease is not None
    time.sleep(max(0.0, acquired[0] + 1.02 - time.monotonic()))
    assert lease.lost  # the backend's expiry has passed: the holder must not think it still holds
    lease.release()


def test_renewal_uses_one_thread_and_does_not_leak_connections(backend: Backend) -> None:
    app = backend.app()
    app.try_lock("warm-up", ttl=5).release()  # type: ignore[union-attr]
    threads_before = threading.active_count()
    for i in range(4):
        with app.lock(f"many-{i % 2}", ttl=0.6):
            time.sleep(0.3)  # past ttl/3: renewed once
    leases = [app.try_lock(f"par-{i}", ttl=1.5) for i in range(10)]
    assert all(lease is not None for lease in leases)
    assert threading.active_count() <= threads_before + 1  # one renewer, not one per lease
    time.sleep(0.7)  # every lease renewed at least once
    assert not any(lease.lost for lease in leases if lease is not None)
    for lease in leases:
        assert lease is not None and lease.release()
    if backend.database_url.startswith("sqlite") and backend.locks_url is None:
        assert len(app.store._all) <= 3  # type: ignore[attr-defined]  # no connection per lease
    app.close()
    wait_until(lambda: threading.active_count() <= threads_before - 1, 10, "the renewer to stop")


INVALID_NAMES: list[Any] = ["", "a" * 201, "has space", "-leading-dash", "_leading", "tab\tin",
                 "trailing-newline\n", "ünïcode", "semi;colon", "star*", "rota:prune",
                 "rota:anything", 42, None, b"bytes"]  # fmt: skip


def test_invalid_lock_names_are_refused_clearly(backend: Backend) -> None:
    app = backend.app()
    for name in INVALID_NAMES:
        for method in (app.lock, app.try_lock, app.lock_async):
            with pytest.raises(ConfigurationError) as caught:
                method(name, ttl=5)
            message = str(caught.value)
            assert repr(name) in message
            if isinstance(name, str) and name.startswith("rota:"):
                assert "reserved for rota" in message
            else:
                assert "1-200 characters, starting with a letter or digit" in message
    assert app.list_locks() == []


def test_valid_lock_names(backend: Backend) -> None:
    app = backend.app()
    for name in ["a", "a" * 200, "Report_2024.q1", "tenant:42/job@eu-west", "9lives", "ROTA-x"]:
        lease = app.try_lock(name, ttl=5)
        assert lease is not None and lease.name == name
        lease.release()


def test_bad_ttl_and_wait_are_refused_clearly(backend: Backend) -> None:
    app = backend.app()
    for ttl in [0, -1, 0.05, 7 * 86400 + 1, math.nan, math.inf, "5", True, None]:
        for method in (app.lock, app.try_lock, app.lock_async):
            with pytest.raises(ConfigurationError, match="lock ttl must be a number") as caught:
                method("x", ttl=ttl)
            assert repr(ttl) in str(caught.value)
    for wait in [-1, -0.001, math.nan, "1", True, None]:
        for method in (app.lock, app.lock_async):
            with pytest.raises(ConfigurationError, match="lock wait must be a number") as caught:
                method("x", ttl=5, wait=wait)
            assert repr(wait) in str(caught.value)
    assert app.list_locks() == []
    with app.lock("x", ttl=0.1, wait=math.inf) as lease:  # the extremes that are allowed
        assert lease.token == 1


def test_async_lock(backend: Backend) -> None:
    app, other = backend.app(), backend.app()

    async def main() -> None:
        async with app.lock_async("async", ttl=1.5) as lease:  # (a renewal may be 1 s late)
            assert lease.token == 1
            assert await asyncio.to_thread(other.try_lock, "async") is None
            await asyncio.sleep(2.0)  # past the TTL: renewed while the loop waits
            assert not lease.lost
            began = time.monotonic()
            with pytest.raises(rota.LockUnavailable, match="'async'"):
                async with other.lock_async("async", ttl=5, wait=0.5):
                    pytest.fail("acquired a held lock")
            assert 0.4 <= time.monotonic() - began <= 6
        assert lease.released and held_by(app, "async") is None

        holder = app.try_lock("async", ttl=30)
        assert holder is not None
        loop = asyncio.get_running_loop()
        loop.call_later(0.3, holder.release)
        async with other.lock_async("async", ttl=5, wait=30) as second:
            assert second.token == holder.token + 1

        with pytest.raises(rota.LockLost):
            async with app.lock_async("async", ttl=1.5) as third:
                assert other.locks.backend.release("async", third.owner, third.token)
                assert await asyncio.to_thread(other.try_lock, "async", 30) is not None
                while not third.lost:
                    await asyncio.sleep(0.05)

    asyncio.run(main())


def test_async_lock_cancelled_while_acquiring_does_not_keep_the_lock(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = backend.app()
    real_acquire = app.locks.backend.acquire

    def slow_acquire(name: str, owner: str, ttl: float) -> int | None:
        time.sleep(0.5)
        return real_acquire(name, owner, ttl)

    monkeypatch.setattr(app.locks.backend, "acquire", slow_acquire)

    async def main() -> None:
        async def take() -> None:
            async with app.lock_async("cancelled", ttl=30):
                pytest.fail("should have been cancelled")

        with pytest.raises(TimeoutError):
            await asyncio.wait_for(take(), 0.1)

    asyncio.run(main())
    monkeypatch.setattr(app.locks.backend, "acquire", real_acquire)
    # The acquisition finished after the cancellation; the lease must not stay held.
    wait_until(lambda: info(app, "cancelled") is not None, 10, "the late acquisition")
    wait_until(lambda: held_by(app, "cancelled") is None, 10, "the orphaned lease's release")


def test_list_locks_and_cli_show_name_holder_token_expiry(backend: Backend) -> None:
    app = backend.app()
    lease = app.try_lock("monthly-report", ttl=60)
    assert lease is not None
    found = info(app, "monthly-report")
    assert found is not None
    assert (found.name, found.owner, found.token, found.held) == (
        "monthly-report", lease.owner, lease.token, True
    )  # fmt: skip
    assert found.expires_at is not None
    assert 30 < (found.expires_at - datetime.now(UTC)).total_seconds() <= 65
    assert lease.owner.split(":")[1] == str(os.getpid())

    args = ["--database-url", backend.database_url, "locks"]
    if backend.locks_url:
        args += ["--locks-url", backend.locks_url]
    result = CliRunner().invoke(cli_main, [*args, "--json"], env={"ROTA_LOCKS_URL": None})
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.output)}
    row = rows["monthly-report"]
    assert (row["owner"], row["token"], row["held"]) == (lease.owner, lease.token, True)
    expires = datetime.fromisoformat(row["expires_at"].replace("Z", "+00:00"))
    assert 30 < (expires - datetime.now(UTC)).total_seconds() <= 65

    table = CliRunner().invoke(cli_main, args, env={"ROTA_LOCKS_URL": None})
    assert table.exit_code == 0 and "monthly-report" in table.output

    lease.release()
    after = info(app, "monthly-report")
    assert after is not None and not after.held and after.token == lease.token


def test_redis_unreachable_gives_a_clear_error(tmp_path: Path) -> None:
    pytest.importorskip("redis")
    app = make_app(f"sqlite:///{tmp_path}/rota.db", locks_url="redis://:s3cret@127.0.0.1:1/0")
    try:
        for attempt in (
            lambda: app.try_lock("x", ttl=5),
            lambda: app.lock("x", ttl=5).__enter__(),
            app.list_locks,
        ):
            began = time.monotonic()
            with pytest.raises(DatabaseUnavailable) as caught:
                attempt()
            assert time.monotonic() - began < 10
            message = str(caught.value)
            assert "Redis" in message and "127.0.0.1:1" in message and "s3cret" not in message

        result = CliRunner().invoke(
            cli_main,
            [
                "--database-url",
                f"sqlite:///{tmp_path}/rota.db",
                "locks",
                "--locks-url",
                "redis://127.0.0.1:1/0",
            ],
        )
        assert result.exit_code == 1 and "cannot reach Redis" in result.output
    finally:
        app.close()


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:6379/0", "127.0.0.1:6379", "redis://127.0.0.1:6379/0?prefix=bad*glob"]
)
def test_invalid_locks_url_fails_at_app_creation(tmp_path: Path, url: str) -> None:
    pytest.importorskip("redis")
    with pytest.raises(ConfigurationError, match="Redis"):
        make_app(f"sqlite:///{tmp_path}/rota.db", locks_url=url)
