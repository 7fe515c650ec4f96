"""tests/browser/ensure.py: what the browser tests do when Chromium is not there."""

from __future__ import annotations

import pytest

from . import ensure


def test_without_chromium_outside_ci_the_tests_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROTA_TEST_CHROMIUM", "/nonexistent/chromium")
    assert ensure.chromium_path() is None
    assert ensure.ensure(ci=False) is None


def test_a_configured_chromium_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROTA_TEST_CHROMIUM", "/bin/sh")  # any executable: only the path is checked here
    assert ensure.chromium_path() == "/bin/sh"
