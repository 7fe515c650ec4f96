"""What a named-locks backend is (rota.store_locks, rota.redis_locks) and the locks URL check.

Both backends import this module; neither imports rota.locks or rota.lock_factory, so the
arrows run one way: lock_factory -> backends -> lock_backend.
"""

from __future__ import annotations

import re
from typing import Protocol
from urllib.parse import parse_qsl, urlencode, urlparse

from .config import redact_text
from .config import redact_url as redact
from .errors import ConfigurationError
from .models import LockInfo

_PREFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/@\-]{0,99}")
_LOCKS_SCHEMES = ("redis://", "rediss://", "unix://")


def parse_locks_url(url: object) -> tuple[str, str]:
    """Check a Redis locks URL; return (the URL for the Redis client, the key prefix).

    `?prefix=NAME` (default "rota") keeps apps that share one Redis apart: their keys are
    `NAME:lock:<lock name>` and `NAME:fence:<lock name>`. Pure: no import of redis, no I/O.
    """
    if not isinstance(url, str) or not url.lower().startswith(_LOCKS_SCHEMES):
        shown = redact(url) if isinstance(url, str) else url
        raise ConfigurationError(
            f"invalid Redis URL {shown!r} for locks: use redis://host:6379/0 (or rediss://, "
            "unix://), optionally with ?prefix=NAME"
        )
    base, _, query = url.partition("?")
    pairs = parse_qsl(query, keep_blank_values=True)
    prefixes = [value for key, value in pairs if key == "prefix"]
    prefix = prefixes[-1] if prefixes else "rota"
    if not _PREFIX.fullmatch(prefix):
        raise ConfigurationError(
            f"invalid prefix {prefix!r} in the Redis locks URL: use 1-100 letters, digits, '_', "
            "'.', ':', '/', '@' or '-', starting with a letter or digit"
        )
    db = urlparse(base).path.strip("/") if not url.lower().startswith("unix://") else ""
    if db and not db.isdigit():
        raise ConfigurationError(  # the "database" may be a piece of a password with a "/" in it
            redact_text(
                f"invalid database {db!r} in the Redis locks URL {redact(url)!r}: use a number, e.g. "
                "redis://host:6379/0 (percent-encode a password's / @ # ? and spaces: / is %2F)",
                url,
            )
        )
    if not prefixes:
        return url, prefix
    rest = [(key, value) for key, value in pairs if key != "prefix"]
    return base + (f"?{urlencode(rest)}" if rest else ""), prefix


class LockBackend(Protocol):
    def acquire(self, name: str, owner: str, ttl: float) -> int | None: ...

    def renew(self, name: str, owner: str, token: int, ttl: float) -> bool: ...

    def release(self, name: str, owner: str, token: int) -> bool: ...

    def list(self) -> list[LockInfo]: ...


__all__ = ["LockBackend", "parse_locks_url"]
