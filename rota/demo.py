"""`rota demo`: a worker on a SQLite file with a few example tasks and schedules, printing
each run as it starts and ends. Everything here is ordinary rota usage."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from datetime import timedelta
from typing import Any

from rich.console import Console

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


def run_demo(database_url: str, seconds: float | None = None) -> None:
    app = build_demo_app(database_url)
    send_welcome, flaky, fetch = app.demo_tasks  # type: ignore[attr-defined]
    console.print(f"[bold]rota demo[/] on {app.database_label}: 3 tasks, 3 schedules. Ctrl-C stops (drains first).")
    console.print("Try in another terminal: [bold]rota --database-url " + app.database_url + " runs[/]\n")
    worker = app.worker(concurrency=4, install_signal_handlers=True)
    worker.observe(_printer)
    stop = threading.Event()

    def producer() -> None:
        n = 0
        while not stop.wait(2.0):
            n += 1
            send_welcome.enqueue(f"user{n}@example.com")
            flaky.enqueue(n)
            fetch.options(delay=1).enqueue(f"https://example.com/{n}")

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
