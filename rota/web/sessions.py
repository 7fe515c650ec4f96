"""Dashboard sessions (signed, expiring cookies) and the throttle on failed sign-ins.

A session cookie is `v1.<issued>.<expires>.<nonce>.<signature>`: Unix seconds when it was
issued and when it expires, a random nonce per sign-in, and an HMAC-SHA256 over the rest with
a key derived from the dashboard token. Changing the token changes the key, so every session
signed with the old one stops working. The cookie never contains the token; a cookie that is
not one we signed (non-ASCII bytes included) is no session.

Signing out records the nonce in the database (`rota_dashboard_signouts`, until the session
would have expired anyway; expired entries are deleted at each sign-out), so a signed-out
cookie stays refused after a restart and by every other dashboard on the same database. The
dashboard also remembers its own sign-outs in memory, which holds even while the database is
unreachable. Checking a cookie therefore asks the database: call `valid` off the event loop.

Failed sign-ins are counted per client address. The first FREE_FAILURES are free; after
that each further attempt must wait twice as long as the previous one (1 s, 2 s, 4 s, ...
capped at MAX_DELAY), during which attempts are refused with 429 and Retry-After without
looking at the token. A success clears the client's count; a client that stays quiet for
FORGET_AFTER seconds is forgotten.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..stores.base import Store

SESSION_TTL = 12 * 3600.0  # seconds a sign-in lasts
FREE_FAILURES = 3
MAX_DELAY = 300.0
FORGET_AFTER = 3600.0
MAX_CLIENTS = 10_000  # failed-sign-in records kept (the oldest are dropped first)

Clock = Callable[[], float]


class Sessions:
    def __init__(
        self,
        token: str,
        *,
        ttl: float = SESSION_TTL,
        clock: Clock = time.time,
        store: Callable[[], Store] | None = None,
    ) -> None:
        if not ttl > 0:
            raise ValueError(f"the session lifetime must be a positive number of seconds, got {ttl!r}")
        self._key = hmac.new(token.encode(), b"rota dashboard session key v1", hashlib.sha256).digest()
        self.token = token  # kept for the read-only role's token check (rota.web.auth)
        self.ttl = ttl
        self.clock = clock
        self._store = store  # where sign-outs are kept (None: this process's memory only)
        self._revoked: dict[str, float] = {}  # nonce -> expiry of a session signed out here

    def _sign(self, body: str) -> str:
        return hmac.new(self._key, body.encode(), hashlib.sha256).hexdigest()

    def issue(self) -> str:
        issued = int(self.clock())
        body = f"v1.{issued}.{issued + int(self.ttl)}.{secrets.token_urlsafe(16)}"
        return f"{body}.{self._sign(body)}"

    def _parse(self, cookie: str) -> tuple[int, int, str] | None:
        """(issued, expires, nonce) of a cookie we signed, else None: any other value, a
        non-ASCII one included (another site on the same host may plant one), is no session."""
        if not cookie.isascii():
            return None
        body, _, signature = cookie.rpartition(".")
        parts = body.split(".")
        if len(parts) != 4 or parts[0] != "v1" or not hmac.compare_digest(signature, self._sign(body)):
            return None
        if not (parts[1].isdigit() and parts[2].isdigit()):
            return None
        return int(parts[1]), int(parts[2]), parts[3]

    def valid(self, cookie: str | None) -> bool:
        """Signed by us, not expired, not signed out (asks the database: blocking)."""
        parsed = self._parse(cookie) if cookie else None
        if parsed is None:
            return False
        issued, expires, nonce = parsed
        now = self.clock()
        if not (issued <= now + 60 and now < expires) or nonce in self._revoked:
            return False
        return self._store is None or not self._store().signed_out(nonce, now)

    def revoke(self, cookie: str | None) -> None:
        """Sign the session out here at once, then in the database (blocking; a RotaError
        from the store means the other dashboards may still accept it)."""
        parsed = self._parse(cookie) if cookie else None
        now = self.clock()
        if parsed is None or parsed[1] <= now:
            return
        self._revoked = {n: t for n, t in self._revoked.items() if t > now}
        self._revoked[parsed[2]] = parsed[1]
        if self._store is not None:
            self._store().signout_add(parsed[2], parsed[1], now)


@dataclass(slots=True)
class _Failures:
    count: int
    last: float


class LoginThrottle:
    def __init__(self, *, clock: Clock = time.monotonic) -> None:
        self.clock = clock
        self._clients: OrderedDict[str, _Failures] = OrderedDict()

    def wait(self, client: str) -> float:
        """Seconds `client` must still wait before its next attempt is looked at (0: now)."""
        entry = self._clients.get(client)
        if entry is None:
            return 0.0
        elapsed = self.clock() - entry.last
        if elapsed > FORGET_AFTER:
            del self._clients[client]
            return 0.0
        return max(0.0, delay_after(entry.count) - elapsed)

    def failed(self, client: str) -> int:
        """Record a failure; the client's count of consecutive failures."""
        entry = self._clients.pop(client, None) or _Failures(0, 0.0)
        entry.count += 1
        entry.last = self.clock()
        self._clients[client] = entry
        while len(self._clients) > MAX_CLIENTS:
            self._clients.popitem(last=False)
        return entry.count

    def succeeded(self, client: str) -> None:
        self._clients.pop(client, None)


def delay_after(failures: int) -> float:
    """The wait imposed after `failures` consecutive failures."""
    if failures < FREE_FAILURES:
        return 0.0
    return float(min(MAX_DELAY, 2.0 ** min(failures - FREE_FAILURES, 16)))
