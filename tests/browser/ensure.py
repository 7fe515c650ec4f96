"""Make sure the browser tests have what they need: Debian's Chromium and Playwright for
Python (never Playwright's own browser download). Under CI (CI=true) anything missing is
installed here; elsewhere the tests are skipped with the command to run.

    python tests/browser/ensure.py      # install what is missing (apt-get needs root or sudo)
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys

CHROMIUM_CANDIDATES = ("chromium", "chromium-browser")
HOW = "apt-get install -y chromium && pip install playwright (no `playwright install` needed)"


def chromium_path() -> str | None:
    configured = os.environ.get("ROTA_TEST_CHROMIUM")
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    for name in CHROMIUM_CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def has_playwright() -> bool:
    return importlib.util.find_spec("playwright") is not None


def _root_prefix() -> list[str]:
    if os.geteuid() == 0:
        return []
    if shutil.which("sudo"):
        return ["sudo", "-n"]
    raise RuntimeError(f"installing Chromium needs root or sudo; run: {HOW}")


def install() -> str:
    """Install what is missing; the path of the Chromium executable."""
    if chromium_path() is None:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        prefix = _root_prefix()
        subprocess.run([*prefix, "apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run([*prefix, "apt-get", "install", "-y", "-qq", "chromium"], check=True, env=env)
    if not has_playwright():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "playwright"], check=True)
        importlib.invalidate_caches()
    path = chromium_path()
    if path is None or not has_playwright():
        raise RuntimeError(f"the browser tests still lack Chromium or Playwright; run: {HOW}")
    return path


def ensure(ci: bool) -> str | None:
    """The Chromium path when everything is there (installed now under CI), else None."""
    path = chromium_path()
    if path is not None and has_playwright():
        return path
    return install() if ci else None


if __name__ == "__main__":
    print(install())
