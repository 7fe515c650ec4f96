"""rota in a plain script: tasks, a schedule, enqueue, a worker, results.

python examples/plain_script.py            # uses ROTA_DATABASE_URL, else sqlite:///plain.db
"""

from __future__ import annotations

import logging
import os
from datetime import timedelta

import rota

app = rota.App(os.environ.get("ROTA_DATABASE_URL", "sqlite:///plain.db"), poll_interval=0.1)
failures: list[str] = []


@app.task(name="plain.resize", retries=2, backoff=0.05)
def resize(path: str, width: int) -> dict[str, object]:
    return {"path": path, "width": width, "thumbnail": f"{path}.{width}.jpg"}


@app.schedule(every=timedelta(hours=1), name="plain.cleanup")
def cleanup() -> None:
    pass


@app.on("run_failed")
def tell_someone(event: rota.Event) -> None:
    failures.append(f"run {event.run_id} failed: {event.run.error if event.run else '?'}")


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    handles = [resize.enqueue(f"photo{i}.jpg", 320) for i in range(3)]
    worker = app.worker(install_signal_handlers=False)
    worker.start()  # a background thread; `rota worker examples.plain_script:app` in production
    try:
        for handle in handles:
            run = handle.wait(timeout=30)
            print(f"run {run.id} {run.status}: {run.result['thumbnail']}")
        print("schedule plain.cleanup next at", app.get_schedule("plain.cleanup").next_run_at)
    finally:
        worker.stop()
        app.close()
    print("failures:", failures or "none")


if __name__ == "__main__":
    main()
