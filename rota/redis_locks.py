"""Named locks over Redis: `SET NX PX` inside Lua scripts, a fencing counter per name.

Keys: `{rota:lock:<name>}` holds "<owner> <token>" with a PX expiry (Redis's clock decides);
`{rota:lock:<name>}:fence` is the counter that only grows, so tokens increase across holders
even after the lock key expires. The braces are a hash tag: both keys of a lock hash to one
slot, so the Lua scripts that touch both work on Redis Cluster. `?prefix=NAME` on the URL
replaces `rota` (apps sharing a Redis). Renew and release compare the stored value first,
atomically.

Before the hash tags the counter was `rota:fence:<name>`; acquire starts above that old value
(read once per name), so tokens keep growing across the upgrade. Upgrade every process that
takes a given lock at once: old and new code use different lock keys.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlparse, urlunparse

from .config import redact_text
from .config import redact_url as redact
from .errors import ConfigurationError, DatabaseUnavailable
from .lock_backend import parse_locks_url
from .models import LockInfo

try:
    import redis
except ImportError as exc:  # pragma: no cover - depends on installed extras
    raise ConfigurationError("Redis locks need redis-py: pip install 'rota[redis]'") from exc

_ACQUIRE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
local token = redis.call('INCR', KEYS[2])
local floor = tonumber(ARGV[3])
if token <= floor then
  token = floor + 1
  redis.call('SET', KEYS[2], token)
end
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. token, 'NX', 'PX', ARGV[2])
return token
"""
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


_ENCODE = "percent-encode the password's / @ : # ? % and spaces (e.g. / as %2F, # as %23, a space as %20)"


class RedisLocks:
    """`url` is a redis:// (rediss://, unix://) URL; `?prefix=NAME` sets the key prefix."""

    def __init__(self, url: str, prefix: str | None = None) -> None:
        client_url, url_prefix = parse_locks_url(url)
        self.url = redact(url)  # for messages
        self.prefix = prefix or url_prefix
        self._client_url = client_url
        try:
            self.client = redis.Redis.from_url(
                client_url, socket_connect_timeout=3, socket_timeout=5, decode_responses=True
            )
        except ValueError as exc:  # urllib's, e.g. a password's unencoded "#" read as the port's end
            raise ConfigurationError(
                redact_text(f"invalid Redis locks URL {self.url}: {exc}; {_ENCODE}", url)
            ) from None
        self._acquire = self.client.register_script(_ACQUIRE)
        self._renew = self.client.register_script(_RENEW)
        self._release = self.client.register_script(_RELEASE)
        self._floors: dict[str, int] = {}  # name -> the pre-hash-tag fence counter's value

    def _keys(self, name: str) -> tuple[str, str]:
        tag = f"{{{self.prefix}:lock:{name}}}"
        return tag, f"{tag}:fence"

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise DatabaseUnavailable(f"cannot reach Redis at {self.url}: {exc}") from exc
        except redis.ResponseError as exc:
            if "DB index is out of range" in str(exc):
                raise ConfigurationError(self._bad_db()) from None
            raise

    def _bad_db(self) -> str:
        db = self.client.connection_pool.connection_kwargs.get("db")
        try:
            parts = urlparse(self._client_url)
            other = redis.Redis.from_url(urlunparse(parts._replace(path="/0")), socket_connect_timeout=3)
            count = int(str(other.config_get("databases")["databases"]))
            valid = f"this server has databases 0 to {count - 1}"
        except (redis.RedisError, KeyError, ValueError):
            valid = "see the server's `databases` setting (16 by default: 0 to 15)"
        return f"the Redis locks URL {self.url} names database {db}, which does not exist: {valid}"

    def _floor(self, name: str) -> int:
        floor = self._floors.get(name)
        if floor is None:
            legacy = self._call(self.client.get, f"{self.prefix}:fence:{name}")
            floor = self._floors[name] = int(legacy or 0)
        return floor

    def acquire(self, name: str, owner: str, ttl: float) -> int | None:
        args = [owner, max(1, int(ttl * 1000)), self._floor(name)]
        token = self._call(self._acquire, keys=list(self._keys(name)), args=args)
        return int(token) if token is not None else None

    def renew(self, name: str, owner: str, token: int, ttl: float) -> bool:
        lock_key, _ = self._keys(name)
        return bool(self._call(self._renew, keys=[lock_key], args=[f"{owner} {token}", max(1, int(ttl * 1000))]))

    def release(self, name: str, owner: str, token: int) -> bool:
        lock_key, _ = self._keys(name)
        return bool(self._call(self._release, keys=[lock_key], args=[f"{owner} {token}"]))

    def list(self) -> list[LockInfo]:
        result = []
        start, end = f"{{{self.prefix}:lock:", "}:fence"
        pattern = f"{start}*{end}"  # the prefix has no glob characters
        for fence_key in self._call(lambda: list(self.client.scan_iter(match=pattern, count=500))):
            name = fence_key[len(start) : -len(end)]
            lock_key, _ = self._keys(name)
            pipe = self.client.pipeline()
            pipe.get(lock_key)
            pipe.pttl(lock_key)
            pipe.get(fence_key)
            value, pttl, fence = self._call(pipe.execute)
            owner, token = value.rsplit(" ", 1) if value else (None, fence or 0)
            expires = datetime.now(UTC) + timedelta(milliseconds=pttl) if value and pttl and pttl > 0 else None
            result.append(
                LockInfo(
                    name=name,
                    owner=owner,
                    token=int(token),
                    acquired_at=None,
                    expires_at=expires,
                    held=value is not None,
                )
            )
        return sorted(result, key=lambda info: info.name)
