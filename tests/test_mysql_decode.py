"""The MySQL store's DATETIME decoding (issue 42 item 4: a tenth of PyMySQL's cost) reads
every value the server sends as PyMySQL's converter did, made UTC-aware."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

pymysql = pytest.importorskip("pymysql")


def _before(text: str) -> object:
    value = pymysql.converters.convert_datetime(text)
    return value.replace(tzinfo=UTC) if isinstance(value, datetime) else value


@pytest.mark.parametrize(
    "text",
    [
        "2026-12-07 09:11:16.123456",
        "2026-12-07 09:11:16.000000",
        "2026-12-07 09:11:16",
        "1000-01-01 00:00:00.000001",
        "9999-12-31 23:59:59.999999",
        "0000-00-00 00:00:00",  # a zero date (no strict mode): kept as text, damaged
        "2026-02-31 00:00:00",
        "2026-12-07",
    ],
)
def test_datetimes_decode_as_pymysql_did(text: str) -> None:
    from rota.stores.mysql.session import _utc_datetime

    assert _utc_datetime(text) == _before(text)
    assert type(_utc_datetime(text)) is type(_before(text))
