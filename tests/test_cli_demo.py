"""`rota demo` (what `make demo` runs): the dashboard on loopback, and a hint that works."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from rota import demo

from .ports import free_port

ROOT = Path(__file__).resolve().parent.parent


def test_demo_serves_the_dashboard_and_names_a_working_command(tmp_path: Path) -> None:
    port = free_port()
    url = f"sqlite:///{tmp_path}/demo.db"
    cmd = [sys.executable, "-m", "rota", "demo", "--database", url, "--seconds", "20", "--port", str(port)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        stats = None
        deadline = time.monotonic() + 20
        while stats is None and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/stats", timeout=2) as response:
                    stats = json.load(response)
            except OSError:
                time.sleep(0.2)
        assert stats is not None and "runs" in stats
    finally:
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)  # the second skips the drain
        out = proc.communicate(timeout=30)[0].decode()
    assert f"Dashboard: http://127.0.0.1:{port}/" in out, out
    # Its own fast schedules are meant, so no warning of them. The second Ctrl-C hands back a run
    # that was in flight (demo.slow-sync takes seconds), and says so: that warning is expected.
    handed_back = ("second stop signal", "handed back: worker")
    warnings = [line for line in out.splitlines() if "WARNING" in line and not any(h in line for h in handed_back)]
    assert not warnings and "high-frequency" not in out, out
    hint = next(line for line in out.splitlines() if "Try in another terminal:" in line)
    command = hint.split("Try in another terminal: ", 1)[1].split()
    assert command[-3:] == ["--database-url", url, "runs"]
    result = subprocess.run(
        [*command[:-3], *command[-3:]] if Path(command[0]).exists() else [sys.executable, "-m", "rota", *command[1:]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0 and "demo." in result.stdout, result.stdout + result.stderr


def test_the_hint_names_the_venv_script_from_a_fresh_clone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "rota").write_text("#!/bin/sh\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert demo.rota_command() == ".venv/bin/rota"
