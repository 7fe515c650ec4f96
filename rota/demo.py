"""`rota demo`: a worker on a SQLite file with a few example tasks and schedules, printing
each run as it starts and ends. Everything here is ordinary rota usage."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from rich.console import Console
from rich.text import Text

from .app import App
from .stores.base import Claimed
from .tasks import RunContext

console = Console()
STYLE = {
    "succeeded": "green",
    "failed": "red",
    "pending": "yellow",
    "cancelled": "magenta",
    "started": "cyan",
}


def build_demo_app(database_url: str) -> App:
    # Its schedules fire every few seconds on purpose: no high-frequency warning for them.
    app = App(database_url, name="demo", poll_interval=0.5, lease=10, high_frequency=0)

    @app.task(name="demo.send_welcome")
    def send_welcome(user: str) -> dict[str, Any]:
        time.sleep(random.uniform(0.05, 0.3))
        return {"sent_to": user}

    @app.task(name="demo.flaky", retries=3, backoff=1.0)
    def flaky(n: int) -> int:
        if random.random() < 0.5:
            raise ConnectionError(f"upstream hiccup while handling {n}")
        return n * n

    @app.task(name="demo.fetch")
    async def fetch(url: str) -> dict[str, Any]:
        await asyncio.sleep(random.uniform(0.1, 0.5))
        return {"url": url, "status": 200}

    @app.schedule(every=timedelta(seconds=5), name="demo.heartbeat", run_immediately=True, pass_context=True)
    def heartbeat(ctx: RunContext) -> str:
        return f"tick for {ctx.scheduled_for:%H:%M:%S} (token {ctx.token})"

    @app.schedule(cron="* * * * *", tz="Europe/Berlin", name="demo.minutely-report", overlap="skip")
    def report() -> dict[str, int]:
        return {"orders": random.randint(0, 40)}

    @app.schedule(every=timedelta(seconds=7), name="demo.slow-sync", overlap="skip", timeout=30)
    def slow_sync() -> str:
        time.sleep(9)  # slower than its interval: ticks that come meanwhile are recorded as skipped
        return "synced"

    app.demo_tasks = (send_welcome, flaky, fetch)  # type: ignore[attr-defined]
    return app


RUN_EVENTS = {
    "run_succeeded": "succeeded",
    "run_retrying": "pending",
    "run_failed": "failed",
    "run_cancelled": "cancelled",
    "run_timed_out": "timed out",
}


def _print_run(
    event: str, at: float, run_id: object, task: str, attempt: object, schedule: str | None, detail: str
) -> None:
    stamp = time.strftime("%H:%M:%S", time.localtime(at))
    word = "retry" if event == "pending" else event
    line = Text(f"{stamp} ") + Text(f"{word:>9}", style=STYLE.get(event, "red"))
    line += Text(f" run {run_id!s:<5} {task} (attempt {attempt})")
    if schedule:
        line += Text(f" schedule {schedule}", style="dim")
    if detail:
        line += Text(f": {detail}")
    console.print(line, soft_wrap=True, highlight=False)  # never a newline inside a line


def _printer(event: str, claim: Claimed, at: float) -> None:
    """The start of each run (its end is printed from the worker's log line: _RunLines)."""
    if event == "started":
        _print_run(event, at, claim.id, claim.task, claim.attempt, claim.schedule, "")


class _RunLines(logging.Handler):
    """Prints the worker's run_* log lines in the demo's format, error and backoff included;
    the usual log handlers skip them (`_not_run_lines`), so each end is printed once."""

    def emit(self, record: logging.LogRecord) -> None:
        event = RUN_EVENTS.get(getattr(record, "event", ""))
        if event is None:
            return
        f: dict[str, Any] = getattr(record, "fields", None) or {}
        detail = str(f.get("error") or "")
        if "retry_in" in f:
            detail += f"; retry in {f['retry_in']:g} s"
        _print_run(
            event, record.created, f.get("run_id"), str(f.get("task")), f.get("attempt"), f.get("schedule"), detail
        )


class _NotRunLines(logging.Filter):
    """For the usual handlers: no run_* line (_RunLines prints it), nothing below `level`."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= self.level and getattr(record, "event", None) not in RUN_EVENTS


@contextlib.contextmanager
def _run_lines() -> Iterator[None]:
    """For the demo's duration: run lines through _RunLines (info level), each once; other
    lines as configured (--log-level, default warning)."""
    worker_log = logging.getLogger("rota.worker")
    handler, level = _RunLines(), worker_log.level
    usual = [h for h in logging.getLogger().handlers if getattr(h, "_rota", False)]
    only = _NotRunLines(worker_log.getEffectiveLevel())
    for h in usual:
        h.addFilter(only)
    worker_log.addHandler(handler)
    worker_log.setLevel(min(logging.INFO, worker_log.getEffectiveLevel()))
    try:
        yield
    finally:
        worker_log.removeHandler(handler)
        worker_log.setLevel(level)
        for h in usual:
            h.removeFilter(only)


def rota_command() -> str:
    """How to call `rota` from here: `rota` if it is on the PATH, else this interpreter's."""
    found = shutil.which("rota")
    if found and os.path.dirname(found) == os.path.dirname(sys.executable):
        return "rota"
    local = os.path.join(os.path.dirname(sys.executable), "rota")
    if os.path.exists(local):
        return os.path.relpath(local) if not os.path.relpath(local).startswith("..") else local
    return f"{sys.executable} -m rota"


def serve_dashboard(app: App, port: int) -> str | None:
    """The dashboard on http://127.0.0.1:port/ in a daemon thread; its URL, or None if
    rota[web] is not installed."""
    try:
        import uvicorn

        from .web import create_app
    except ImportError:
        return None
    config = uvicorn.Config(create_app(app), host="127.0.0.1", port=port, access_log=False, log_level="warning")
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, name="rota-demo-dashboard", daemon=True).start()
    return f"http://127.0.0.1:{port}/"


def run_demo(database_url: str, seconds: float | None = None, dashboard_port: int | None = 8000) -> None:
    app = build_demo_app(database_url)
    send_welcome, flaky, fetch = app.demo_tasks  # type: ignore[attr-defined]
    banner = Text("rota demo", style="bold") + Text(f" on {app.database_label}: 3 tasks, 3 schedules.")
    console.print(banner + Text(" Ctrl-C stops (drains first)."), soft_wrap=True, highlight=False)
    url = serve_dashboard(app, dashboard_port) if dashboard_port is not None else None
    if url:
        console.print(Text("Dashboard: ") + Text(url, style="bold"), soft_wrap=True, highlight=False)
    elif dashboard_port is not None:
        console.print("No dashboard: install rota[web] (pip install 'rota[web]') to see the runs in a browser.")
    hint = f"{rota_command()} --database-url {app.database_label} runs"
    # soft_wrap: a narrow terminal may fold the line, but no newline lands inside the command
    console.print(Text("Try in another terminal: ") + Text(hint, style="bold") + Text("\n"), soft_wrap=True)
    worker = app.worker(concurrency=4, install_signal_handlers=True)
    worker.observe(_printer)
    stop = threading.Event()

    def producer() -> None:
        # Data for every dashboard view within a minute: runs on two queues, some due later
        # (the backlog), retries (flaky), skipped ticks (slow-sync), a named lock (Locks).
        n = 0
        fetch.options(queue="reports", delay=45).enqueue_many(
            [((f"https://example.com/later/{i}",), {}) for i in range(8)]
        )
        while not stop.wait(2.0):
            n += 1
            send_welcome.options(queue="mail").enqueue(f"user{n}@example.com")
            flaky.enqueue(n)
            fetch.options(delay=1).enqueue(f"https://example.com/{n}")
            if n % 5 == 1:
                with app.lock("demo.nightly-report", ttl=15):
                    send_welcome.options(queue="mail", delay=20).enqueue(f"digest{n}@example.com")
                    stop.wait(3.0)  # held for a moment: the Locks view shows its holder and token

    threading.Thread(target=producer, daemon=True).start()

    async def main() -> None:
        if seconds is not None:
            asyncio.get_running_loop().call_later(seconds, worker.stop, False)
        await worker.run()

    try:
        with _run_lines():
            asyncio.run(main())
    finally:
        stop.set()
        app.close()
