"""Wake-ups: LISTEN/NOTIFY on PostgreSQL (rate-limited, never lost), in-process on SQLite."""

from __future__ import annotations

import time

import psycopg

import rota

from .conftest import PG_URL, make_app, start_worker


def test_bursts_of_enqueues_send_few_notifications_and_the_last_one_follows_the_last_commit(pg_url: str) -> None:
    app = make_app(pg_url)
    task = app.task(name="t")(lambda: None)
    with psycopg.connect(PG_URL, autocommit=True) as listener:
        listener.execute("LISTEN rota")
        began = time.monotonic()
        for _ in range(300):
            task.enqueue()
        last_commit = time.monotonic()
        arrivals = []
        for note in listener.notifies(timeout=1.0):
            if note.payload == "run":
                arrivals.append(time.monotonic())
    # The limiter's promise: at most one NOTIFY per 5 ms window (leading or trailing), so the
    # count follows the burst's duration, not the number of enqueues (a fixed bound made this
    # test depend on how fast one enqueue commits).
    windows = (last_commit - began) / 0.005
    assert 1 <= len(arrivals) <= windows + 2 and len(arrivals) < 300, (len(arrivals), windows)
    assert arrivals[-1] >= last_commit - 0.001  # the trailing NOTIFY came after the last enqueue
    app.close()


def test_an_idle_worker_picks_up_a_new_run_without_waiting_for_its_poll(app: rota.App) -> None:
    task = app.task(name="stamp")(lambda: time.time())
    start_worker(app, poll_interval=30.0)
    time.sleep(0.5)  # idle, sleeping up to 30 s
    began = time.time()
    run = task.enqueue().wait(10)
    assert run.result - began < 2.0
