"""Where the PostgreSQL store LISTENs: on its own URL, on `listen_url` when one is given (a
direct connection beside a transaction pooler), or nowhere behind a transaction pooler
without one (LISTEN on a pooled connection hears nothing: its server connection goes back
to the pool after the statement). Then the workers poll, and one log line says so."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from .listen import listen as listen_on_channel
from .listen import listener_class
from .session import _connect_kwargs

log = logging.getLogger("rota.store")


async def listen_where_possible(store: Any, on_payload: Callable[[str], None]) -> None:
    """LISTEN for `store` (a PostgresStore) until cancelled, or return at once (see above)."""
    if store.listen_url is None and store.pooled:
        log.info(
            "no wake-ups: LISTEN needs a direct connection beside the transaction pooler "
            "(set ROTA_LISTEN_URL); the workers poll every poll_interval"
        )
        return
    url = store.listen_url or store.url
    connect = functools.partial(listener_class().connect, url, **_connect_kwargs(url, store.connect_timeout))
    await listen_on_channel(connect, store.queries["notify_channel"], on_payload, store.listen_check_interval)
