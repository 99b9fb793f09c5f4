"""A fake NCBI E-utilities server on 127.0.0.1 for tests (no network), serving the fixtures in
``tests/fixtures/pubmed`` (hand-written in the documented formats: esearch JSON, efetch PubMed XML)::

    from pubmed_server import FakeEutils

    with FakeEutils() as srv:
        src = PubMedSource(base_url=srv.base_url)
        ids = src.search("aspirin platelets")
        assert srv.requests[0]["endpoint"] == "esearch.fcgi"

By default ``esearch.fcgi`` ranks the fixture articles by how many of the term's words their title and abstract
hold (any word is enough, like an OR query) and answers in the shape of ``esearch_aspirin.json``;
``efetch.fcgi`` (GET or POST) returns the fixture articles of the ``id`` list. ``script(endpoint, params)``
may return ``(status, body, delay_s[, headers])`` to answer otherwise (``body``: dict = JSON, str / bytes as
is), or None for the default. Every request is recorded in ``requests`` with its arrival time
(``time.monotonic()``).
"""
from __future__ import annotations

import copy
import json
import re
import threading
import time
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional
from urllib.parse import parse_qs, urlparse

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pubmed"
Script = Callable[[str, Dict[str, str]], Optional[tuple]]


def fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def _articles() -> Dict[str, ET.Element]:
    root = ET.fromstring(fixture_text("efetch_articles.xml").split("\n", 2)[2])  # after the prolog lines
    return {a.find("MedlineCitation/PMID").text: a for a in root.findall("PubmedArticle")}


def esearch_body(ids: List[str]) -> dict:
    body = json.loads(fixture_text("esearch_aspirin.json"))
    body["esearchresult"].update(count=str(len(ids)), retmax=str(len(ids)), idlist=list(ids))
    return body


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: "_Server"

    def log_message(self, fmt: str, *args: Any) -> None:
        pass

    def _answer(self, params: Dict[str, str]) -> None:
        owner = self.server.owner
        endpoint = urlparse(self.path).path.rstrip("/").rsplit("/", 1)[-1]
        with owner.lock:
            owner.requests.append({"endpoint": endpoint, "method": self.command, "params": params,
                                   "time": time.monotonic()})
        reply = owner.script(endpoint, params) if owner.script else None
        if reply is None:
            reply = owner.default(endpoint, params)
        status, body, delay = reply[0], reply[1], float(reply[2]) if len(reply) > 2 else 0.0
        headers = reply[3] if len(reply) > 3 else {}
        if delay > 0 and owner.stopping.wait(delay):
            return
        if isinstance(body, (dict, list)):
            payload, ctype = json.dumps(body).encode(), "application/json"
        elif isinstance(body, bytes):
            payload, ctype = body, "text/xml"
        else:
            payload, ctype = str(body).encode(), "text/xml"
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(payload)))
            for k, v in headers.items():
                self.send_header(k, str(v))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_GET(self) -> None:  # noqa: N802
        self._answer({k: v[-1] for k, v in parse_qs(urlparse(self.path).query).items()})

    def do_POST(self) -> None:  # noqa: N802
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        self._answer({k: v[-1] for k, v in parse_qs(raw).items()})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, owner: "FakeEutils") -> None:
        self.owner = owner
        super().__init__(("127.0.0.1", 0), _Handler)


class FakeEutils:
    """The fake E-utilities root (module docstring); ``base_url`` ends with ``/eutils/``."""

    def __init__(self, script: Optional[Script] = None) -> None:
        self.script = script
        self.requests: List[dict] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.articles = _articles()
        self._server: Optional[_Server] = None

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/entrez/eutils/"

    def default(self, endpoint: str, params: Dict[str, str]) -> tuple:
        if endpoint == "esearch.fcgi":
            words = set(re.findall(r"[a-z0-9]+", params.get("term", "").lower())) - {"and", "or", "not"}
            scored = []
            for pmid, art in self.articles.items():
                text = " ".join(art.itertext()).lower()
                hits = sum(1 for w in words if re.search(rf"\b{re.escape(w)}", text))
                if hits:
                    scored.append((-hits, pmid))
            ids = [p for _, p in sorted(scored)][: int(params.get("retmax", 20))]
            return 200, esearch_body(ids) if ids else json.loads(fixture_text("esearch_empty.json")), 0.0
        if endpoint == "efetch.fcgi":
            root = ET.Element("PubmedArticleSet")
            for pmid in params.get("id", "").split(","):
                if pmid in self.articles:
                    root.append(copy.deepcopy(self.articles[pmid]))
            return 200, b'<?xml version="1.0" ?>\n' + ET.tostring(root), 0.0
        return 404, {"error": f"no endpoint {endpoint}"}, 0.0

    def count(self, endpoint: Optional[str] = None) -> int:
        return sum(1 for r in self.requests if endpoint is None or r["endpoint"] == endpoint)

    def max_per_window(self, window_s: float = 1.0) -> int:
        """Most requests that arrived within any ``window_s`` seconds."""
        times = sorted(r["time"] for r in self.requests)
        best, j = 0, 0
        for i, t in enumerate(times):
            while times[j] < t - window_s + 1e-9:
                j += 1
            best = max(best, i - j + 1)
        return best

    def __enter__(self) -> "FakeEutils":
        self._server = _Server(self)
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
