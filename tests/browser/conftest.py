"""Fixtures for the browser tests: Chromium through Playwright (installed by ensure.py under
CI), and the dashboard served by uvicorn on a free loopback port in a thread."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest

from . import ensure
from .served import Served

T = TypeVar("T")
ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """Module-scoped: Playwright's sync API keeps an event loop running in the main thread
    while it is open, so it must be closed before other modules' tests call asyncio.run()."""
    path = ensure.ensure(ci=os.environ.get("CI", "").lower() in ("1", "true", "yes"))
    if path is None:
        pytest.skip(f"no Chromium/Playwright here: {ensure.HOW} (or run with CI=true)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=path, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(chromium: Any, serve: Any) -> Iterator[Any]:
    """A fresh browser context per test; console errors (a CSP violation, a script error)
    fail the test. It needs `serve` so that it closes before the servers stop (a refresh in
    between would fail to connect)."""
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    problems: list[str] = []
    page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.set_default_timeout(10_000)
    page.rota_expected = []  # console errors a test expects, by substring (e.g. a 404 it asked for)
    yield page
    context.close()
    allowed = ["401", *page.rota_expected]  # 401s are the sign-in page's own
    assert not [p for p in problems if not any(a in p for a in allowed)], problems


def in_thread(fn: Callable[[], T]) -> T:
    """Run `fn` in a thread (Playwright's loop occupies this one; asyncio.run() needs its own)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn).result(timeout=60)


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[Served] = []

    def start(web: Any) -> Served:
        servers.append(Served(web))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def screenshots(artifacts: Path) -> Path:
    """tests/artifacts/screenshots/ (gitignored; CI keeps it as an artifact)."""
    folder = artifacts / "screenshots"
    folder.mkdir(exist_ok=True)
    return folder
