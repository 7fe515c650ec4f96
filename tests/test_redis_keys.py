"""Redis locks on Redis Cluster: a lock's two keys share one hash slot (issue 14 item 6)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from rota.redis_locks import RedisLocks

pytestmark = pytest.mark.redis


@pytest.fixture
def locks(redis_url: str) -> Iterator[RedisLocks]:
    import redis

    from rota.redis_locks import RedisLocks

    prefix = f"rotatest-{uuid.uuid4().hex[:12]}"
    backend = RedisLocks(f"{redis_url}?prefix={prefix}")
    yield backend
    client = redis.Redis.from_url(redis_url)
    keys = [*client.scan_iter(match=f"{prefix}:*"), *client.scan_iter(match=f"{{{prefix}:*")]
    if keys:
        client.delete(*keys)
    client.close()


@pytest.mark.parametrize("name", ["jobs", "a:b:c", "with}brace", "ünïcode", "x" * 200])
def test_the_two_keys_of_a_lock_hash_to_one_slot(locks: RedisLocks, name: str) -> None:
    from redis.crc import key_slot

    lock_key, fence_key = locks._keys(name)
    assert lock_key.startswith("{") and fence_key.startswith(lock_key)
    assert key_slot(lock_key.encode()) == key_slot(fence_key.encode())
    # and names do not all land in one slot (the tag includes the name)
    assert len({key_slot(locks._keys(f"n{i}")[0].encode()) for i in range(50)}) > 40


def test_keys_are_written_under_the_hash_tag_and_listed(locks: RedisLocks) -> None:
    import redis

    backend = locks
    token = backend.acquire("nightly", "me", 5.0)
    client = redis.Redis.from_url(backend._client_url)
    prefix = backend.prefix
    assert client.get(f"{{{prefix}:lock:nightly}}") == f"me {token}".encode()
    assert client.get(f"{{{prefix}:lock:nightly}}:fence") == str(token).encode()
    assert [(i.name, i.owner, i.token) for i in backend.list()] == [("nightly", "me", token)]


def test_tokens_keep_growing_past_the_counter_of_the_keys_before_hash_tags(locks: RedisLocks) -> None:
    backend = locks
    prefix = backend.prefix
    backend.client.set(f"{prefix}:fence:legacy", 41)
    first = backend.acquire("legacy", "me", 5.0)
    assert first == 42
    assert backend.release("legacy", "me", first)
    assert backend.acquire("legacy", "me", 5.0) == 43
