"""W7's small real job, the same for every system: one Redis INCR.

Every job increments one counter in Redis (BENCH_REDIS_URL, default
redis://127.0.0.1:6379/0). The measuring process picks a per-run key prefix
(`bench:w7:<system>:<run>:<random>`) and hands it to the worker processes in BENCH_REDIS_KEY,
so concurrent runs never share a key; at the end it reads the counter (every job must have
counted at least once) and deletes the run's keys. Workers open one client per process
(sync: a thread-safe connection pool; async: one client on the worker's event loop).
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bench.core import Ctx, Unsupported

ENV_URL = "BENCH_REDIS_URL"
ENV_KEY = "BENCH_REDIS_KEY"
DEFAULT_URL = "redis://127.0.0.1:6379/0"

_sync: Any = None
_async: Any = None
_lock = threading.Lock()


def redis_url() -> str:
    return os.environ.get(ENV_URL, DEFAULT_URL)


def _key() -> str:
    key = os.environ.get(ENV_KEY)
    if not key:
        raise RuntimeError(f"{ENV_KEY} is not set: the measuring process sets it for the workers")
    return key


def incr() -> int:
    """The job, for sync handlers: INCR the run's counter (one round trip)."""
    global _sync
    if _sync is None:
        with _lock:
            if _sync is None:
                import redis

                _sync = redis.Redis.from_url(redis_url())
    return int(_sync.incr(_key()))


async def incr_async() -> int:
    """The job, for async handlers: INCR through redis.asyncio on the running loop."""
    global _async
    if _async is None:
        import redis.asyncio

        _async = redis.asyncio.Redis.from_url(redis_url())
    return int(await _async.incr(_key()))


@contextmanager
def counter(ctx: Ctx, jobs: int) -> Iterator[dict[str, str]]:
    """A fresh counter key for this run; yields the workers' environment. On a clean exit,
    checks that the counter reached `jobs`; always deletes the run's keys."""
    try:
        import redis
    except ImportError as exc:
        raise Unsupported("W7 needs the redis package (pip install redis)") from exc
    client = redis.Redis.from_url(redis_url(), socket_connect_timeout=3)
    try:
        client.ping()
    except redis.RedisError as exc:
        raise Unsupported(f"W7 needs Redis at {redis_url()} ({type(exc).__name__}); set {ENV_URL}") from exc
    prefix = f"bench:w7:{ctx.key}:{ctx.run}:{uuid.uuid4().hex[:8]}"
    key = f"{prefix}:count"
    env = {ENV_URL: redis_url(), ENV_KEY: key}
    os.environ.update(env)  # inherited by every worker process started from here on
    try:
        yield env
        counted = int(client.get(key) or 0)
        if counted < jobs:
            raise RuntimeError(f"Redis counter {key} is {counted}, expected at least {jobs}")
    finally:
        os.environ.pop(ENV_KEY, None)
        stale = list(client.scan_iter(match=f"{prefix}*"))
        if stale:
            client.delete(*stale)
        client.close()
