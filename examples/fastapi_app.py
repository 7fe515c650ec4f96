"""FastAPI + rota: enqueue in the request's own transaction, await results, mount the dashboard.

    ROTA_DATABASE_URL=postgresql://localhost/shop uvicorn examples.fastapi_app:api
    (or sqlite:///shop.db, or mysql://user:password@localhost/shop for MySQL/MariaDB)

A worker runs inside the web process here (started and drained by the lifespan), which suits
small deployments; at scale, set EMBEDDED_WORKER=0 and run `rota worker examples.fastapi_app:app`
on as many hosts as needed. The dashboard is at /rota (set ROTA_DASHBOARD_TOKEN to guard it).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from typing import Any
from urllib.parse import unquote, urlsplit

from fastapi import FastAPI, HTTPException

import rota
from rota.web import create_app

DATABASE_URL = os.environ.get("ROTA_DATABASE_URL", "sqlite:///shop.db")
app = rota.App(DATABASE_URL)


@app.task(name="shop.send_welcome", retries=3)
def send_welcome(user_id: int) -> str:
    return f"welcome mail sent to user {user_id}"


@app.task(name="shop.quote")
async def quote(items: int) -> dict[str, int]:
    return {"items": items, "total_cents": items * 1250}


MYSQL = DATABASE_URL.startswith(("mysql://", "mariadb://"))


def connect() -> Any:
    """The web app's own connection to the same database rota uses (sqlite3, psycopg or PyMySQL)."""
    if DATABASE_URL.startswith("sqlite:///"):
        return sqlite3.connect(DATABASE_URL.removeprefix("sqlite:///"))
    if MYSQL:
        import pymysql

        url = urlsplit(DATABASE_URL)
        return pymysql.connect(
            host=url.hostname, port=url.port or 3306, user=unquote(url.username or ""),
            password=unquote(url.password or ""), database=url.path.lstrip("/"), charset="utf8mb4",
        )  # fmt: skip
    import psycopg

    return psycopg.connect(DATABASE_URL)


def create_tables() -> None:
    if DATABASE_URL.startswith("sqlite:///"):
        columns = "id INTEGER PRIMARY KEY, email TEXT NOT NULL UNIQUE"
    elif MYSQL:
        columns = "id BIGINT AUTO_INCREMENT PRIMARY KEY, email VARCHAR(255) NOT NULL UNIQUE"
    else:
        columns = "id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, email TEXT NOT NULL UNIQUE"
    with closing(connect()) as conn:
        conn.cursor().execute(f"CREATE TABLE IF NOT EXISTS users ({columns})")
        conn.commit()


@asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    await asyncio.to_thread(app.migrate)  # rota's tables exist before any request enqueues in a transaction
    await asyncio.to_thread(create_tables)
    worker = None
    if os.environ.get("EMBEDDED_WORKER", "1") == "1":
        worker = app.worker(install_signal_handlers=False)
        worker.start()
    yield
    if worker is not None:
        await asyncio.to_thread(worker.stop)  # drains running jobs, hands back the rest
    app.close()


api = FastAPI(lifespan=lifespan)
# Without a token (ROTA_DASHBOARD_TOKEN) the dashboard answers loopback host names only.
api.mount("/rota", create_app(app))


@api.post("/signup")
def signup(email: str, fail_after_enqueue: bool = False) -> dict[str, Any]:
    """The user's row and the welcome mail's run commit together, or neither does."""
    with closing(connect()) as conn:
        try:  # one transaction: commit on success, roll back on error
            cursor = conn.cursor()
            if MYSQL:  # no INSERT ... RETURNING on MySQL
                cursor.execute("INSERT INTO users (email) VALUES (%s)", (email,))
                user_id = cursor.lastrowid
            else:
                sql = f"INSERT INTO users (email) VALUES ({placeholder()}) RETURNING id"
                user_id = cursor.execute(sql, (email,)).fetchone()[0]
            handle = send_welcome.options(connection=conn).enqueue(user_id)
            if fail_after_enqueue:
                raise HTTPException(status_code=409, detail="signup refused; nothing was written")
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
    return {"user_id": user_id, "run_id": handle.id}


@api.get("/quote")
async def get_quote(items: int) -> dict[str, Any]:
    """Enqueue, then await the worker's result without blocking the event loop."""
    # With rota's async client: handle = await quote.enqueue_async(items)
    handle = await asyncio.to_thread(quote.enqueue, items)
    try:
        run = await handle.wait_async(timeout=10)
    except rota.WaitTimeout:
        raise HTTPException(status_code=504, detail=f"run {handle.id} did not finish in time") from None
    if run.status != "succeeded":
        raise HTTPException(status_code=502, detail=f"run {run.id} {run.status}: {run.error}")
    return {"run_id": run.id, **run.result}


def placeholder() -> str:
    return "?" if DATABASE_URL.startswith("sqlite:///") else "%s"
