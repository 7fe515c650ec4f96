"""`rota demo`: a worker on a SQLite file with a few example tasks and schedules, printing
each run as it starts and ends. Everything here is ordinary rota usage."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import sys
import threading
import time
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
    app = App(database_url, name="demo", poll_interval=0.5, lease=10)

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


def _printer(event: str, claim: Claimed, at: float) -> None:
    stamp = time.strftime("%H:%M:%S", time.localtime(at))
    origin = f" [dim]schedule {claim.schedule}[/]" if claim.schedule else ""
    word = "retry" if event == "pending" else event
    style = STYLE.get(event, "white")
    console.print(
        f"{stamp} [{style}]{word:>9}[/] run {claim.id:<5} {claim.task} (attempt {claim.attempt}){origin}",
        highlight=False,
    )


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
    console.print(f"[bold]rota demo[/] on {app.database_label}: 3 tasks, 3 schedules. Ctrl-C stops (drains first).")
    url = serve_dashboard(app, dashboard_port) if dashboard_port is not None else None
    if url:
        console.print(f"Dashboard: [bold]{url}[/]", highlight=False)
    elif dashboard_port is not None:
        console.print("No dashboard: install rota[web] (pip install 'rota[web]') to see the runs in a browser.")
    hint = f"{rota_command()} --database-url {app.database_label} runs"
    console.print(Text("Try in another terminal: ") + Text(hint, style="bold") + Text("\n"))
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
        asyncio.run(main())
    finally:
        stop.set()
        app.close()
