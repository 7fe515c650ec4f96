"""PostgreSQL failover: what a session on the wrong server looks like, and what rota does.

After a failover, a pooled connection may still reach the old primary: demoted and kept up
read-only, or found again behind a stale DNS name. It answers reads but refuses every write
with SQLSTATE 25006 ("cannot execute ... in a read-only transaction"). The error is
transient (`DatabaseTransient`: the worker keeps its leases and retries with backoff), and
the store drops the whole pool at once rather than hand the connection back: its siblings
most likely reach the same server, and a new connection follows the URL again (with
`target_session_attrs=read-write` it skips a read-only server). A read-only session is never
used for a write: its writes fail and roll back whole, and the pool that held it is gone.
"""

from __future__ import annotations

from typing import Any

from ...errors import ConfigurationError

READ_ONLY = "25006"  # read_only_sql_transaction (also "cannot execute LISTEN during recovery")


def read_only(exc: Any) -> bool:
    """Whether a psycopg error says the session is on a server that refuses writes."""
    return getattr(exc, "sqlstate", None) == READ_ONLY


def check_interval(value: Any) -> float:
    """The `listen_check_interval` store option, checked: seconds, a positive number."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigurationError(f"listen_check_interval must be a positive number of seconds, got {value!r}")
    return float(value)
