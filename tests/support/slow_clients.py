"""Hostile HTTP clients on raw sockets, for server tests: connections that trickle a request a byte at a time.

    with Tricklers("http://127.0.0.1:8000", 40, head=b"POST /v1/search HTTP/1.1\\r\\n", rest=b"Host: x\\r\\n" * 99):
        ...  # .closed_at[i]: when the server closed connection i (time.monotonic(), None while open)

Each connection sends ``head`` at once, then one byte of ``rest`` every ``interval_s`` from one background thread;
whatever the server answers is kept (``replies``), and a connection counts as closed when the server ends it (EOF,
reset, or a failed send).
"""
from __future__ import annotations

import select
import socket
import threading
import time
from typing import List, Optional
from urllib.parse import urlsplit


class Tricklers:
    def __init__(self, url: str, n: int, head: bytes, rest: bytes, interval_s: float = 0.5) -> None:
        parts = urlsplit(url)
        self.address = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.n, self.head, self.rest, self.interval_s = n, head, rest, interval_s
        self.socks: List[socket.socket] = []
        self.closed_at: List[Optional[float]] = [None] * n
        self.replies: List[bytes] = [b""] * n
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Tricklers":
        for _ in range(self.n):
            sock = socket.create_connection(self.address, timeout=5)
            sock.sendall(self.head)
            sock.setblocking(False)
            self.socks.append(sock)
        self.started = time.monotonic()
        self._thread.start()
        return self

    def open_count(self) -> int:
        return sum(1 for t in self.closed_at if t is None)

    def wait_closed(self, timeout_s: float) -> bool:
        """Whether the server closed every connection within ``timeout_s`` seconds."""
        give_up = time.monotonic() + timeout_s
        while self.open_count() and time.monotonic() < give_up:
            time.sleep(0.05)
        return self.open_count() == 0

    def _closed(self, i: int) -> None:
        if self.closed_at[i] is None:
            self.closed_at[i] = time.monotonic()

    def _run(self) -> None:
        sent = 0
        next_byte = time.monotonic()
        while not self._stop.is_set() and self.open_count():
            open_socks = [s for i, s in enumerate(self.socks) if self.closed_at[i] is None]
            readable, _, _ = select.select(open_socks, [], [], 0.05)
            for sock in readable:
                i = self.socks.index(sock)
                try:
                    data = sock.recv(65536)
                except OSError:
                    data = b""
                if data:
                    self.replies[i] += data
                else:
                    self._closed(i)
            if time.monotonic() >= next_byte and sent < len(self.rest):
                for i, sock in enumerate(self.socks):
                    if self.closed_at[i] is None:
                        try:
                            sock.send(self.rest[sent:sent + 1])
                        except OSError:
                            self._closed(i)
                sent += 1
                next_byte += self.interval_s

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        for sock in self.socks:
            sock.close()
