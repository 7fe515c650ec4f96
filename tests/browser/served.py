"""An ASGI app served by uvicorn on a free loopback port in a thread (browser tests, and
tests that need a real HTTP server)."""

from __future__ import annotations

import threading
import time
from typing import Any

from ..ports import free_port


class Served:
    """An ASGI app served by uvicorn on 127.0.0.1 in a thread, until stop()."""

    def __init__(self, web: Any) -> None:
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        config = uvicorn.Config(web, host="127.0.0.1", port=self.port, log_level="warning", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="dashboard", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the dashboard did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
