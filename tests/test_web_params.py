"""Every numeric query parameter of the API: anything but a plain integer in range is a 400
with one line naming the parameter, never a 500 (rota.web.params)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from rota.web import create_app
from rota.web.params import integer

from .conftest import make_app

# Every numeric query parameter the API takes: (path, name, low, high).
NUMERIC = [
    ("/api/runs", "limit", 1, 1000),
    ("/api/runs", "before", 1, 2**63 - 1),
    ("/api/timeline", "minutes", 1, 24 * 60),
]
BAD = ["--5", "--1", "-", "+5", "1_0", "5.0", " 5", "5 ", "0x10", "١", "1e3", "9" * 21, "-" + "9" * 20, "\u00b2"]


@pytest.fixture(scope="module")
def client(tmp_path_factory: Any) -> Iterator[TestClient]:
    app = make_app(f"sqlite:///{tmp_path_factory.mktemp('params')}/rota.db")
    yield TestClient(create_app(app), base_url="http://localhost", raise_server_exceptions=False)
    app.close()


@pytest.mark.parametrize(("path", "name", "low", "high"), NUMERIC)
@pytest.mark.parametrize("raw", BAD)
def test_a_bad_number_is_400_naming_it(client: TestClient, path: str, name: str, low: int, high: int, raw: str) -> None:
    response = client.get(path, params={name: raw})
    assert response.status_code == 400, response.text
    message = response.json()["error"]
    assert message == f"{name} must be an integer from {low} to {high}, got {raw!r}" and "\n" not in message


@pytest.mark.parametrize(("path", "name", "low", "high"), NUMERIC)
def test_the_bounds_are_kept_and_a_good_number_is_read(
    client: TestClient, path: str, name: str, low: int, high: int
) -> None:
    assert client.get(path, params={name: str(low - 1)}).status_code == 400
    assert client.get(path, params={name: str(high + 1)}).status_code == 400
    assert client.get(path, params={name: str(low)}).status_code == 200
    assert client.get(path, params={name: str(high)}).status_code == 200


def test_the_parser_alone() -> None:
    assert integer({}, "n", 7, 1, 10) == 7
    assert integer({"n": "-3"}, "n", None, -5, 5) == -3
    assert integer({"n": "0010"}, "n", None, 1, 10) == 10
