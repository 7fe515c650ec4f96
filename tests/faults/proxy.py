"""A TCP proxy between workers and PostgreSQL or MySQL/MariaDB, in the test process, with fault controls.

    proxy = FaultProxy(("127.0.0.1", 5432)); proxy.start()   # listens on 127.0.0.1:<port>
    proxy.cut()             close every connection; new ones are refused until restore()
    proxy.blackhole()       accept new connections but never forward them (and cut open ones)
    proxy.hold()            stop forwarding both ways without closing anything: a frozen host
    proxy.hold_after(b"x")  forward until a client packet contains b"x", then hold
    proxy.freeze(b"x")      hold, for good, the open connections whose client sent b"x" (a
                            server gone silent under them); new connections forward
    proxy.hold_after(b"x", b"y")  ... until one connection sent b"x", then b"y" (the same
                            packet or a later one), then hold
    proxy.hold_replies_after(b"x", ...)  as hold_after, but only the server's answers stop:
                            what the clients send still flows (a statement split over
                            packets runs to its end, and commits): a reply lost in a cut
    proxy.restore()         forward normally again (held bytes flow on; blackholed sockets close)
    proxy.upstream_ports()  the local ports of its connections to the server (MySQL's KILL)

One thread accepts, one thread per connection pumps both directions with select(), so a held
connection keeps its bytes in the kernel buffers exactly as a paused host would.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from urllib.parse import urlsplit, urlunsplit

FORWARD, REFUSE, BLACKHOLE = "forward", "refuse", "blackhole"


class FaultProxy:
    def __init__(self, upstream: tuple[str, int], listen: tuple[str, int] = ("127.0.0.1", 0)) -> None:
        self.upstream = upstream
        self.mode = FORWARD
        self.held = threading.Event()
        self.replies_held = threading.Event()  # the server's answers wait; the clients' bytes flow
        self._hold: threading.Event = self.held  # what the trigger sets
        self.trigger: tuple[bytes, ...] | None = None
        self.triggered = threading.Event()
        self.accepted = 0
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket | None]] = []
        self._sent: dict[socket.socket, bytearray] = {}  # each client's first bytes (freeze)
        self._frozen: set[socket.socket] = set()
        self._stopping = threading.Event()
        self._server = socket.create_server(listen, reuse_port=False)
        self._server.settimeout(0.1)
        self.address: tuple[str, int] = self._server.getsockname()[:2]
        self._thread = threading.Thread(target=self._accept_loop, name="fault-proxy", daemon=True)

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def url(self, database_url: str) -> str:
        """`database_url` with its host and port replaced by the proxy's."""
        parts = urlsplit(database_url)
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = (
            f"{userinfo}@{self.address[0]}:{self.address[1]}" if userinfo else f"{self.address[0]}:{self.address[1]}"
        )
        return urlunsplit(parts._replace(netloc=netloc))

    # --- controls -------------------------------------------------------------------------

    def cut(self) -> None:
        self.mode = REFUSE
        self._close_all()

    def blackhole(self) -> None:
        self.mode = BLACKHOLE
        self._close_all()

    def hold(self) -> None:
        self.held.set()

    def hold_after(self, *patterns: bytes) -> None:
        self.triggered.clear()
        self._hold = self.held
        self.trigger = patterns

    def hold_replies_after(self, *patterns: bytes) -> None:
        self.triggered.clear()
        self._hold = self.replies_held
        self.trigger = patterns

    def freeze(self, pattern: bytes) -> int:
        """Stop forwarding, without closing anything and until the proxy closes, on every
        open connection whose client has sent `pattern` (in its first 64 KiB); other and new
        connections forward normally. Returns how many were frozen."""
        with self._lock:
            chosen = [c for c, sent in self._sent.items() if pattern in sent]
            self._frozen.update(chosen)
        return len(chosen)

    def restore(self) -> None:
        self.trigger = None
        self.mode = FORWARD
        self.held.clear()
        self.replies_held.clear()
        with self._lock:
            dead = [(c, u) for c, u in self._pairs if u is None]
        for client, _ in dead:
            self._close(client)

    def close(self) -> None:
        self._stopping.set()
        self.held.clear()
        self._close_all()
        self._thread.join(5)
        self._server.close()

    def connections(self) -> int:
        with self._lock:
            return len(self._pairs)

    def upstream_ports(self) -> set[int]:
        """The local ports of the proxy's open connections to the server (how the server
        names these sessions: MySQL's processlist shows them as host:port)."""
        ports = set()
        with self._lock:
            for _, upstream in self._pairs:
                with contextlib.suppress(OSError):
                    if upstream is not None:
                        ports.add(upstream.getsockname()[1])
        return ports

    # --- internals ------------------------------------------------------------------------

    def _close_all(self) -> None:
        with self._lock:
            pairs = list(self._pairs)
        for client, upstream in pairs:
            self._close(client)
            if upstream is not None:
                self._close(upstream)

    @staticmethod
    def _close(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            sock.close()

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            if self.mode == REFUSE:
                self._close(client)
            elif self.mode == BLACKHOLE:
                with self._lock:
                    self._pairs.append((client, None))
            else:
                threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.upstream, timeout=5)
        except OSError:
            self._close(client)
            return
        pair = (client, upstream)
        with self._lock:
            self._pairs.append(pair)
        try:
            self._pump(client, upstream)
        finally:
            with self._lock:
                if pair in self._pairs:
                    self._pairs.remove(pair)
                self._sent.pop(client, None)
                self._frozen.discard(client)
            self._close(client)
            self._close(upstream)

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        peer = {client: upstream, upstream: client}
        sent = self._sent.setdefault(client, bytearray())
        following: tuple[bytes, ...] | None = None  # the trigger this connection's progress is for
        matched = 0  # how many of its patterns this connection sent so far, in order
        while not self._stopping.is_set():
            if client in self._frozen:
                self._stopping.wait(0.05)
                continue
            if self.held.is_set():
                self.held.wait(0.05)  # a frozen host: nothing moves, nothing closes
                if self.held.is_set():
                    continue
            try:
                ready, _, _ = select.select(
                    [client] if self.replies_held.is_set() else [client, upstream], [], [], 0.05
                )
            except (OSError, ValueError):
                return
            for sock in ready:
                if self.held.is_set() or client in self._frozen or (sock is upstream and self.replies_held.is_set()):
                    break
                try:
                    data = sock.recv(65536)
                    if not data:
                        return
                    peer[sock].sendall(data)
                except OSError:
                    return
                if sock is client and len(sent) < 65536:
                    sent += data
                trigger = self.trigger
                if sock is client and trigger is not None:
                    if trigger is not following:  # (a new trigger: this connection starts over)
                        following, matched = trigger, 0
                    while matched < len(trigger) and trigger[matched] in data:
                        matched += 1
                    if matched == len(trigger):
                        self.trigger = None
                        self._hold.set()
                        self.triggered.set()
