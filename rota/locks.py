"""Named locks with fencing tokens, over the run store (default) or Redis.

Terms. A lock is held by an *owner* (unique per acquisition) until an expiry on the
backend's clock (the database's, or Redis's own TTL). Each acquisition of a name gets a
*fencing token* one greater than any token that name ever had: pass it to the systems your
critical section writes to and have them refuse a token lower than the highest seen; then
even a holder that lost its lock without knowing (a GC pause, SIGSTOP, a network partition)
cannot overwrite its successor's work. Renewal and release are conditioned on (owner, token):
a stale holder's release is a no-op, never the release of someone else's lock.

While held, a lease is renewed every ttl/3 by the manager's renewer thread (one per App, for
sync and async holders alike). If a renewal is refused, or the TTL passes without a successful
renewal (the process was paused, the backend unreachable), the lease is *lost*: `lease.lost`
turns true and leaving the `with` block raises `LockLost`, so the caller knows its critical
section may not have been exclusive. The holder's own deadline is measured on its monotonic
clock from the moment it *sent* the acquire or renew, so it ends no later than the backend's
expiry: `lost` may turn true a little early, never late. On SQLite the expiry is on this
host's clock (each process writes its own `now`), so the holder checks that clock too: when
it steps (NTP, a resume from suspend) another process may take the lock at once, and `lost`
says so at once, not at the next renewal. A lease that is lost stays lost
(it is never renewed back to life, even if nobody else took the lock meanwhile).
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import threading
import time
import uuid
import weakref
from types import TracebackType

from .errors import ConfigurationError, DatabaseTransient, LockLost, LockUnavailable
from .lock_backend import LockBackend, parse_locks_url
from .models import LockInfo

log = logging.getLogger("rota.locks")

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/@\-]{0,199}")


def check_lock_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigurationError(
            f"invalid lock name {name!r}: use 1-200 characters, starting with a letter or digit, "
            "then letters, digits, '_', '.', ':', '/', '@' or '-'"
        )
    if name.startswith("rota:"):
        raise ConfigurationError(
            f"invalid lock name {name!r}: names starting with 'rota:' are reserved for rota itself"
        )
    return name


def _check_ttl(ttl: object) -> float:
    if not isinstance(ttl, (int, float)) or isinstance(ttl, bool) or not 0.1 <= ttl <= 86400 * 7:
        raise ConfigurationError(f"lock ttl must be a number of seconds from 0.1 to 604800, got {ttl!r}")
    return float(ttl)


def _check_wait(wait: object) -> float:
    # `not wait >= 0` also refuses NaN (which would make the wait loop spin forever);
    # math.inf is allowed and means "wait as long as it takes".
    if not isinstance(wait, (int, float)) or isinstance(wait, bool) or not wait >= 0:
        raise ConfigurationError(f"lock wait must be a number of seconds >= 0, got {wait!r}")
    return float(wait)


class Lease:
    """A held lock. `token` is its fencing token; `lost` turns true if it was lost."""

    def __init__(
        self,
        manager: LockManager,
        name: str,
        owner: str,
        token: int,
        ttl: float,
        valid_until: float | None = None,
    ) -> None:
        self.name = name
        self.owner = owner
        self.token = token
        self.ttl = ttl
        self._manager = manager
        # Our own view of the expiry, on the monotonic clock. It starts when the call that set
        # the backend's expiry *started*, so it never ends later than the backend's.
        self._valid_until = time.monotonic() + ttl if valid_until is None else valid_until
        # The same on the backend's clock when that is this host's (SQLite), else None.
        self._expires: float | None = None
        self._lost = False
        self._released = False
        self._failure: DatabaseTransient | None = None  # the last renewal's, until one succeeds

    @property
    def lost(self) -> bool:
        """True once a renewal was refused or the TTL passed without one."""
        if not self._lost and not self._released and (time.monotonic() >= self._valid_until or self._expired()):
            self._lost = True
        return self._lost

    def _expired(self) -> bool:
        """Past the expiry on the backend's own clock, when it is this host's (SQLite): a
        step of that clock lets another process take the lock before our monotonic deadline."""
        if self._expires is None:
            return False
        now = self._manager.backend_clock()
        return now is not None and now >= self._expires

    @property
    def released(self) -> bool:
        return self._released

    def __repr__(self) -> str:
        state = "released" if self._released else ("lost" if self.lost else "held")
        return f"Lease(name={self.name!r}, token={self.token}, {state})"

    def renew(self) -> bool:
        """Extend the lease now. False if not extended: refused (then `lost` is true), or the
        backend unreachable (then it stays held until its TTL runs out; see `lost`)."""
        if self._released or self.lost:  # past its TTL it is lost: never renewed back to life
            return False
        started, clock = time.monotonic(), self._manager.backend_clock()
        try:
            ok = self._manager.backend.renew(self.name, self.owner, self.token, self.ttl)
        except DatabaseTransient as exc:  # unreachable, or a connection cut mid-call
            self._failure = exc
            return False
        self._failure = None
        if ok:
            self._valid_until = started + self.ttl
            self._expires = None if clock is None else clock + self.ttl
        elif not self._released:  # refused because we released it meanwhile is not a loss
            self._lost = True
        return ok

    def release(self) -> bool:
        """Give the lock up if still ours; a stale holder's release does nothing. Idempotent."""
        if self._released:
            return False
        self._released = True
        self._manager._forget(self)
        try:
            return self._manager.backend.release(self.name, self.owner, self.token)
        except DatabaseTransient:
            return False  # it expires on its own

    def _renew_due(self) -> float | None:
        """One renewal by the renewer thread: the monotonic time of the next one, or None."""
        if self._released or self.lost:
            return None
        started, failing = time.monotonic(), self._failure is not None
        if self.renew():
            return started + self.ttl / 3
        if self._failure is not None and not failing:  # the first failure in a row: say why
            log.warning("lock %r: renewal failed (%s); retrying until its TTL runs out", self.name, self._failure)
        if self._released or self.lost:
            return None
        return time.monotonic() + min(self.ttl / 3, 1.0)  # unreachable: retry sooner

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        lost = self.lost
        self.release()
        if lost:
            raise _lost_error(self)


def _lost_error(lease: Lease) -> LockLost:
    return LockLost(
        f"lock {lease.name!r} (token {lease.token}) was lost while held: its lease expired or was "
        "taken over, so the critical section may not have been exclusive"
    )


class _Renewer:
    """One daemon thread per LockManager renews every held lease when it is due (ttl/3).

    One thread rather than one per lease: no thread per acquisition, and a single database
    connection for renewals (the SQLite store keeps one connection per thread, which a
    thread per lease leaked at every acquisition held past ttl/3)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: dict[Lease, float] = {}
        self._thread: threading.Thread | None = None
        self._generation = 0

    def add(self, lease: Lease, at: float) -> None:
        with self._cond:
            self._due[lease] = at
            if self._thread is None or not self._thread.is_alive():  # first use, or after fork
                self._thread = threading.Thread(
                    target=self._run,
                    args=(self._generation,),
                    name="rota-lock-renewer",
                    daemon=True,
                )
                self._thread.start()
            self._cond.notify()

    def discard(self, lease: Lease) -> None:
        with self._cond:
            self._due.pop(lease, None)

    def close(self) -> None:
        with self._cond:
            self._generation += 1
            self._due.clear()
            self._thread = None
            self._cond.notify_all()

    def _next(self, generation: int) -> Lease | None:
        with self._cond:
            while self._generation == generation:
                if not self._due:
                    self._cond.wait()
                    continue
                lease, at = min(self._due.items(), key=lambda item: item[1])
                delay = at - time.monotonic()
                if delay <= 0:
                    del self._due[lease]
                    return lease
                self._cond.wait(delay)
            return None

    def _run(self, generation: int) -> None:
        while (lease := self._next(generation)) is not None:
            try:
                at = lease._renew_due()
            except Exception:  # a bug or an unexpected driver error: keep renewing the others
                log.exception("renewing lock %r failed", lease.name)
                at = time.monotonic() + min(lease.ttl / 3, 1.0)
            if at is not None:
                with self._cond:
                    if self._generation == generation and not lease.released:
                        self._due[lease] = at


class LockContext:
    """`with app.lock(...) as lease:` acquires on enter (LockUnavailable if it can't)."""

    def __init__(self, manager: LockManager, name: str, ttl: float, wait: float) -> None:
        self.manager = manager
        self.name = name
        self.ttl = ttl
        self.wait = wait
        self.lease: Lease | None = None

    def __enter__(self) -> Lease:
        self.lease = self.manager.acquire(self.name, self.ttl, self.wait)
        return self.lease

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self.lease is not None
        self.lease.__exit__(exc_type, exc, tb)


class _Attempt:
    """One try_lock on a thread for an async caller that may be cancelled meanwhile: a lease
    that arrives after the caller gave up is released, never left held (and renewed)."""

    def __init__(self, manager: LockManager, name: str, ttl: float) -> None:
        self.manager = manager
        self.name = name
        self.ttl = ttl
        self._mutex = threading.Lock()
        self._abandoned = False
        self._lease: Lease | None = None

    def run(self) -> Lease | None:
        lease = self.manager.try_lock(self.name, self.ttl)
        with self._mutex:
            if not self._abandoned:
                self._lease = lease
                return lease
        if lease is not None:
            lease.release()
        return None

    def abandon(self) -> None:
        with self._mutex:
            self._abandoned = True
            lease, self._lease = self._lease, None
        if lease is not None:  # delivered, but the caller was cancelled before it saw it
            threading.Thread(target=lease.release, name="rota-lock-release", daemon=True).start()


class AsyncLockContext:
    """`async with app.lock_async(...) as lease:` (acquisition and release off the loop;
    renewal by the manager's renewer thread, so a busy loop does not starve it)."""

    def __init__(self, manager: LockManager, name: str, ttl: float, wait: float) -> None:
        self.manager = manager
        self.name = name
        self.ttl = ttl
        self.wait = wait
        self.lease: Lease | None = None

    async def __aenter__(self) -> Lease:
        deadline = time.monotonic() + self.wait
        delay = 0.01
        while True:
            attempt = _Attempt(self.manager, self.name, self.ttl)
            try:
                lease = await asyncio.to_thread(attempt.run)
            except BaseException:  # cancelled (or failed) while the attempt was in flight
                attempt.abandon()
                raise
            if lease is not None:
                self.lease = lease
                return lease
            if time.monotonic() >= deadline:
                raise await asyncio.to_thread(self.manager.unavailable, self.name, self.wait)
            await asyncio.sleep(_backoff(delay, deadline))
            delay = min(delay * 2, 0.5)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self.lease is not None
        lost = self.lease.lost
        await asyncio.to_thread(self.lease.release)
        if lost:
            raise _lost_error(self.lease)


def _backoff(delay: float, deadline: float) -> float:
    """Sleep before the next attempt: jittered (so waiters don't retry in lockstep), and never
    past the deadline."""
    return min(delay * random.uniform(0.5, 1.0), max(0.0, deadline - time.monotonic()))


class LockManager:
    """The App's named locks over one backend (rota.lock_factory picks it): tracks and renews
    this process's leases."""

    def __init__(self, backend: LockBackend) -> None:
        self.backend = backend
        self._held: weakref.WeakSet[Lease] = weakref.WeakSet()
        self._held_lock = threading.Lock()
        self._renewer = _Renewer()

    def try_lock(self, name: str, ttl: float = 60.0) -> Lease | None:
        check_lock_name(name)
        ttl = _check_ttl(ttl)
        owner = f"{_process_id()}:{uuid.uuid4().hex[:12]}"
        started, clock = time.monotonic(), self.backend_clock()
        token = self.backend.acquire(name, owner, ttl)
        if token is None:
            return None
        lease = Lease(self, name, owner, token, ttl, valid_until=started + ttl)
        lease._expires = None if clock is None else clock + ttl
        with self._held_lock:
            self._held.add(lease)
        self._renewer.add(lease, started + ttl / 3)
        return lease

    def backend_clock(self) -> float | None:
        """The backend's clock (seconds) if it is this host's, else None (see StoreLocks.clock)."""
        clock = getattr(self.backend, "clock", None)
        try:
            return clock() if clock is not None else None
        except DatabaseTransient:
            return None

    def acquire(self, name: str, ttl: float, wait: float) -> Lease:
        wait = _check_wait(wait)
        deadline = time.monotonic() + wait
        delay = 0.01
        while True:
            lease = self.try_lock(name, ttl)
            if lease is not None:
                return lease
            if time.monotonic() >= deadline:
                raise self.unavailable(name, wait)
            time.sleep(_backoff(delay, deadline))
            delay = min(delay * 2, 0.5)

    def unavailable(self, name: str, wait: float) -> LockUnavailable:
        holder = next((info for info in self.backend.list() if info.name == name and info.held), None)
        who = f" by {holder.owner} (token {holder.token}, expires {holder.expires_at})" if holder else ""
        return LockUnavailable(f"lock {name!r} is held{who}; gave up after waiting {wait:g} s")

    def lock(self, name: str, ttl: float, wait: float) -> LockContext:
        check_lock_name(name)
        return LockContext(self, name, _check_ttl(ttl), _check_wait(wait))

    def lock_async(self, name: str, ttl: float, wait: float) -> AsyncLockContext:
        check_lock_name(name)
        return AsyncLockContext(self, name, _check_ttl(ttl), _check_wait(wait))

    def list_locks(self) -> list[LockInfo]:
        return self.backend.list()

    def release_all(self) -> int:
        """Release every lease this process holds (worker shutdown)."""
        with self._held_lock:
            leases = list(self._held)
        return sum(1 for lease in leases if lease.release())

    def close(self) -> None:
        """Release every lease and stop the renewer thread (App.close)."""
        self.release_all()
        self._renewer.close()

    def _forget(self, lease: Lease) -> None:
        with self._held_lock:
            self._held.discard(lease)
        self._renewer.discard(lease)


def _process_id() -> str:
    import os
    import socket

    return f"{socket.gethostname()}:{os.getpid()}"


__all__ = ["AsyncLockContext", "Lease", "LockContext", "LockManager", "check_lock_name", "parse_locks_url"]
