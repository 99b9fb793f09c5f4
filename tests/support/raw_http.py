"""A scripted HTTP/1.1 server on raw sockets (127.0.0.1), for client tests that need what a well-behaved server
never does: closing an idle keep-alive connection, trickling a reply, forgetting ``Connection: close``::

    with RawServer(lambda n, request: [reply(200, b'{"ok": true}')]) as srv:
        ...  # srv.url; srv.connections: how many connections were accepted; srv.requests: the raw requests

``script(n, request)`` gets the number of the request on its connection (0-based) and the request's bytes (head
and body), and returns the pieces to write: bytes, a float (seconds to sleep), or :data:`CLOSE` (close the
connection now). Every connection is served by its own daemon thread and ends within ``linger_s``.
"""
from __future__ import annotations

import socket
import threading
import time
from typing import Callable, List, Sequence, Union

CLOSE = object()
Piece = Union[bytes, float, object]


def reply(status: int, body: bytes, headers: Sequence[str] = ()) -> bytes:
    """A whole HTTP/1.1 response with a Content-Length (keep-alive unless ``headers`` say otherwise)."""
    head = [f"HTTP/1.1 {status} X", f"Content-Length: {len(body)}", "Content-Type: application/json", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class RawServer:
    def __init__(self, script: Callable[[int, bytes], List[Piece]], linger_s: float = 10.0) -> None:
        self.script = script
        self.linger_s = linger_s
        self.connections = 0
        self.requests: List[bytes] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._stop = threading.Event()
        self._accepter = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> "RawServer":
        self._accepter.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._accepter.join(5)
        self._listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except socket.timeout:
                continue
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        give_up = time.monotonic() + self.linger_s
        with conn:
            n = 0
            while not self._stop.is_set() and time.monotonic() < give_up:
                request = _read_request(conn, give_up)
                if request is None:
                    return
                self.requests.append(request)
                for piece in self.script(n, request):
                    if piece is CLOSE:
                        return
                    if isinstance(piece, float):
                        time.sleep(piece)
                        continue
                    try:
                        conn.sendall(piece)  # type: ignore[arg-type]
                    except OSError:
                        return
                n += 1


def _read_request(conn: socket.socket, give_up: float) -> "bytes | None":
    """One request (head and a Content-Length body), or None when the client closed or ``give_up`` passed."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = _recv(conn, give_up)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        chunk = _recv(conn, give_up)
        if not chunk:
            return None
        body += chunk
    return head + b"\r\n\r\n" + body


def _recv(conn: socket.socket, give_up: float) -> bytes:
    conn.settimeout(max(give_up - time.monotonic(), 0.01))
    try:
        return conn.recv(65536)
    except OSError:
        return b""
