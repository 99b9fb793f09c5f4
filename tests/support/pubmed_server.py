"""A fake NCBI E-utilities server on 127.0.0.1 for tests (no network), serving the fixtures in
``tests/fixtures/pubmed`` (hand-written in the documented formats: esearch JSON, efetch PubMed XML)::

    from pubmed_server import FakeEutils

    with FakeEutils() as srv:
        src = PubMedSource(base_url=srv.base_url)
        ids = src.search("aspirin platelets")
        assert srv.requests[0]["endpoint"] == "esearch.fcgi"

By default ``esearch.fcgi`` ranks the fixture articles by how many of the term's words their title and abstract
hold (any word is enough, like an OR query) and answers in the shape of ``esearch_aspirin.json``; with
``boolean=True`` it reads the term as PubMed does (words ANDed, ``OR`` groups, ``AND`` between parts, quoted
phrases as their words). ``articles`` may be replaced (:func:`medline_articles` makes them from records), and
``latency_s=(low, high)`` delays every default reply by a seeded random time in that range (a realistic NCBI:
300-800 ms a call).
``efetch.fcgi`` (GET or POST) returns the fixture articles of the ``id`` list. ``script(endpoint, params)``
may return ``(status, body, delay_s[, headers])`` to answer otherwise (``body``: dict = JSON, str / bytes as
is), or None for the default. Every request is recorded in ``requests`` with its arrival time
(``time.monotonic()``).

Hostile upstreams: ``script`` may also return a :class:`Hostile` reply, written by hand on the socket, for the
faults a client must survive: :func:`trickle` (headers and/or body one byte at a time), :func:`flood` (a huge body
streamed from a generator, never held in memory, with or without a Content-Length), :func:`lie` (a Content-Length
that the body does not keep), :func:`gzip_bomb` (a small gzip body that decodes huge) and :func:`nested_json`
(a reply nested deeper than any parser's recursion). ``bytes_sent`` counts the body bytes the server wrote, so a
test can tell how much a client read before it stopped.
"""
from __future__ import annotations

import copy
import gzip
import io
import json
import random
import re
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Union
from urllib.parse import parse_qs, urlparse

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pubmed"
Script = Callable[[str, Dict[str, str]], Optional[tuple]]


def fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def _articles() -> Dict[str, ET.Element]:
    root = ET.fromstring(fixture_text("efetch_articles.xml").split("\n", 2)[2])  # after the prolog lines
    return {a.find("MedlineCitation/PMID").text: a for a in root.findall("PubmedArticle")}


@dataclass
class Hostile:
    """A reply written by hand: ``body`` (bytes, or a function giving an iterator of pieces), written
    ``chunk`` bytes at a time with ``every_s`` seconds between writes; ``headers_every_s``: the status line and
    headers also trickled one byte at a time; ``content_length``: declared length (None: the true length when
    ``body`` is bytes, else no Content-Length and the body ends when the connection closes)."""

    body: Union[bytes, Callable[[], Iterable[bytes]]] = b""
    status: int = 200
    headers: Dict[str, str] = field(default_factory=dict)
    every_s: float = 0.0
    chunk: int = 1 << 16
    headers_every_s: float = 0.0
    content_length: Optional[int] = None
    content_type: str = "text/xml"

    def pieces(self) -> Iterator[bytes]:
        if isinstance(self.body, bytes):
            for i in range(0, len(self.body), self.chunk):
                yield self.body[i:i + self.chunk]
        else:
            yield from self.body()


def trickle(body: Union[bytes, str], every_s: float = 1.0, headers_too: bool = False) -> Hostile:
    """``body`` one byte every ``every_s`` seconds (and the headers too)."""
    data = body.encode() if isinstance(body, str) else body
    return Hostile(data, every_s=every_s, chunk=1, headers_every_s=every_s if headers_too else 0.0)


def flood(n_bytes: int, declare: bool = True, piece: bytes = b"<a>x</a>" * 8192) -> Hostile:
    """A body of ``n_bytes`` made on the fly (with its Content-Length when ``declare``, else close-delimited)."""
    def gen() -> Iterator[bytes]:
        left = n_bytes
        while left > 0:
            yield piece[:left]
            left -= len(piece)
    return Hostile(gen, content_length=n_bytes if declare else None)


def lie(body: Union[bytes, str], declared: int) -> Hostile:
    """``body`` under a Content-Length of ``declared`` bytes (then the connection closes)."""
    data = body.encode() if isinstance(body, str) else body
    return Hostile(data, content_length=declared)


def gzip_bomb(n_bytes: int) -> Hostile:
    """A gzip body that decodes to ``n_bytes`` zero bytes (about a thousandth of that on the wire)."""
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9) as gz:
        block = b"\0" * (1 << 20)
        for _ in range(n_bytes >> 20):
            gz.write(block)
    return Hostile(buf.getvalue(), headers={"Content-Encoding": "gzip"})


def nested_json(depth: int = 100_000) -> bytes:
    """An esearch-shaped reply whose ``idlist`` is nested ``depth`` lists deep."""
    return b'{"esearchresult": {"idlist": ' + b"[" * depth + b"]" * depth + b"}}"


def medline_articles(docs: Iterable[Any], first_pmid: int = 40_000_001) -> Dict[str, ET.Element]:
    """PubmedArticle elements (structured abstracts) of records (``medretrieve.corpus.sources.Record``: title,
    sections); a record whose id is a PMID keeps it, the others are numbered from ``first_pmid``."""
    out = {}
    for i, doc in enumerate(docs):
        pmid = doc.id if re.fullmatch(r"[0-9]{1,12}", doc.id or "") else str(first_pmid + i)
        art = ET.Element("PubmedArticle")
        cit = ET.SubElement(art, "MedlineCitation")
        ET.SubElement(cit, "PMID").text = pmid
        article = ET.SubElement(cit, "Article")
        ET.SubElement(article, "ArticleTitle").text = doc.title
        abstract = ET.SubElement(article, "Abstract")
        for sec in doc.sections:
            ET.SubElement(abstract, "AbstractText", Label=(sec.title or "abstract").upper()).text = sec.text
        out[pmid] = art
    return out


def _matches_boolean(term: str, text: str) -> int:
    """How many of ``term``'s words ``text`` holds when it satisfies the term as PubMed reads it, else 0."""
    def has(word: str) -> bool:
        return re.search(rf"\b{re.escape(word)}", text) is not None

    hits = 0
    for part in re.split(r"\s+AND\s+", term):
        groups = [re.findall(r"[a-z0-9]+", g.lower()) for g in re.split(r"\s+OR\s+", part.strip().strip("()"))]
        found = [sum(has(w) for w in g) for g in groups if g]
        ok = [n for n, g in zip(found, [g for g in groups if g]) if n == len(g)]  # a group: all its words
        if not ok:
            return 0
        hits += max(ok)
    return hits


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
        if isinstance(reply, Hostile):
            self._hostile(reply)
            return
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

    def _write_slowly(self, data: bytes, chunk: int, every_s: float, body: bool) -> bool:
        owner = self.server.owner
        for i in range(0, len(data), chunk):
            if every_s > 0 and owner.stopping.wait(every_s):
                return False
            self.wfile.write(data[i:i + chunk])
            self.wfile.flush()
            if body:
                with owner.lock:
                    owner.bytes_sent += len(data[i:i + chunk])
        return True

    def _hostile(self, r: Hostile) -> None:
        self.close_connection = True
        length = r.content_length if r.content_length is not None else (
            len(r.body) if isinstance(r.body, bytes) else None)
        head = [f"HTTP/1.1 {r.status} Hostile", f"Content-Type: {r.content_type}", "Connection: close"]
        head += [f"{k}: {v}" for k, v in r.headers.items()]
        if length is not None:
            head.append(f"Content-Length: {length}")
        try:
            if not self._write_slowly(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"),
                                      1 if r.headers_every_s else 1 << 16, r.headers_every_s, False):
                return
            for piece in r.pieces():
                if not self._write_slowly(piece, r.chunk, r.every_s, True):
                    return
        except OSError:  # the client hung up (as it should, on a reply it refuses)
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

    def __init__(self, script: Optional[Script] = None, *, boolean: bool = False,
                 latency_s: Tuple[float, float] = (0.0, 0.0), seed: int = 0) -> None:
        self.script = script
        self.boolean = boolean
        self.latency_s = latency_s
        self._random = random.Random(seed)
        self.requests: List[dict] = []
        self.bytes_sent = 0  # body bytes written by Hostile replies
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.articles = _articles()
        self._server: Optional[_Server] = None

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/entrez/eutils/"

    def default(self, endpoint: str, params: Dict[str, str]) -> tuple:
        with self.lock:
            delay = self._random.uniform(*self.latency_s)
        if endpoint == "esearch.fcgi":
            term = params.get("term", "")
            words = set(re.findall(r"[a-z0-9]+", term.lower())) - {"and", "or", "not"}
            scored = []
            for pmid, art in self.articles.items():
                text = " ".join(art.itertext()).lower()
                hits = (_matches_boolean(term, text) if self.boolean
                        else sum(1 for w in words if re.search(rf"\b{re.escape(w)}", text)))
                if hits:
                    scored.append((-hits, pmid))
            ids = [p for _, p in sorted(scored)][: int(params.get("retmax", 20))]
            return 200, esearch_body(ids) if ids else json.loads(fixture_text("esearch_empty.json")), delay
        if endpoint == "efetch.fcgi":
            root = ET.Element("PubmedArticleSet")
            for pmid in params.get("id", "").split(","):
                if pmid in self.articles:
                    root.append(copy.deepcopy(self.articles[pmid]))
            return 200, b'<?xml version="1.0" ?>\n' + ET.tostring(root), delay
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


def main(argv: Optional[List[str]] = None) -> None:
    """``python tests/support/pubmed_server.py [--boolean] [--latency LOW,HIGH]``: serve the fixture articles on
    127.0.0.1 until stopped, printing the E-utilities root (``--pubmed-url``) on the first line."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(description="A fake NCBI E-utilities server on 127.0.0.1 (the tests' fixtures)")
    ap.add_argument("--boolean", action="store_true", help="read terms as PubMed does (AND, OR groups)")
    ap.add_argument("--latency", default="0,0", help="delay of every reply, LOW,HIGH seconds (e.g. 0.3,0.8)")
    args = ap.parse_args(argv)
    low, high = (float(x) for x in args.latency.split(","))
    with FakeEutils(boolean=args.boolean, latency_s=(low, high)) as srv:
        print(srv.base_url, flush=True)
        try:
            srv.stopping.wait()
        except KeyboardInterrupt:
            pass
        sys.stdout.flush()


if __name__ == "__main__":
    main()
