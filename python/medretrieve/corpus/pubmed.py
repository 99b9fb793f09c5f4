"""PubMed as an online source, through NCBI's E-utilities: esearch (PMIDs by relevance) and efetch (MEDLINE).

``PubMedSource(...).search(term, retmax=100)`` returns PMIDs (``esearch.fcgi``, ``db=pubmed``,
``retmode=json``, ``sort=relevance``, optional ``datetype``/``mindate``/``maxdate``); ``.fetch(pmids)`` returns
the :class:`~medretrieve.corpus.sources.Record` of each (``efetch.fcgi``, ``retmode=xml``, POSTed in batches of
200 ids, parsed by the MEDLINE reader of :mod:`.sources`), in the order asked.

NCBI's rules, followed on every request:

- at most 3 requests per second without an API key and 10 with one: one :class:`RateLimiter` per E-utilities
  root and key, shared by every thread and every ``PubMedSource`` of the process; a slot is free again 1.05 s
  after its request finished, so scheduling and network delays cannot crowd more requests into NCBI's second;
- ``tool`` and ``email`` (and ``api_key``) parameters on every request;
- 429 and 5xx replies (and dropped connections) are retried ``max_retries`` times with exponential backoff
  (0.5 s, 1 s, 2 s, ... at most 8 s), a 429's ``Retry-After`` (seconds) taking precedence; other 4xx fail at once
  (:class:`PubMedHTTPError`).

``deadline_ms`` bounds a whole call, waits for the rate limiter and retries included: a call that cannot finish
in time raises :class:`PubMedTimeout` (whose ``records`` hold what ``fetch`` had by then). With ``cache_dir``,
every search (keyed by its parameters) and every record (keyed by PMID, including PMIDs PubMed did not return)
is kept on disk, so a re-run makes no request and works offline. Transport failures and malformed replies are
never cached.
"""
from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import os
import re
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Deque, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from .sources import ReadReport, Record, parse_medline, record_from_dict, record_to_dict

DEFAULT_BASE_URL = "https://eutils.ncbi.nlm.nih.gov/entrez/eutils/"
EFETCH_BATCH = 200  # ids per efetch request
MAX_RETMAX = 10_000  # esearch returns at most this many ids per call
RATE_NO_KEY = 3  # requests per second NCBI allows without an API key
RATE_WITH_KEY = 10  # ... and with one
_DATE = re.compile(r"^\d{4}(/\d{2}(/\d{2})?)?$")
_PMID = re.compile(r"^\d{1,12}$")
_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


class PubMedError(RuntimeError):
    """E-utilities could not answer (network down, a reply that is not what NCBI documents, retries spent)."""


class PubMedTimeout(PubMedError):
    """The call did not finish within its deadline; ``records``: what ``fetch`` had fetched by then."""

    def __init__(self, message: str, records: Optional[List[Record]] = None) -> None:
        super().__init__(message)
        self.records: List[Record] = list(records or [])


class PubMedHTTPError(PubMedError):
    """E-utilities answered with an HTTP error that retrying does not fix (``status``)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class PubMedBadResponse(PubMedError):
    """A reply that is not valid esearch JSON or efetch MEDLINE XML."""


# --------------------------------------------------------------------------- rate limiting


class RateLimiter:
    """At most ``per_second`` requests in any ``window_s`` seconds as the server sees them, across threads.

    A request holds a :meth:`slot` while it is sent and answered; a slot is free again ``window_s`` after its
    request *finished*. Counting from the finish rather than from the start is what makes the limit hold at the
    server: a request reaches the server before it finishes, so however late a thread is scheduled between
    taking its slot and sending, no ``per_second + 1`` requests can arrive within one second (``window_s`` > 1).
    A wait that would end after the caller's deadline is not taken (:class:`PubMedTimeout`).
    """

    def __init__(self, per_second: int, window_s: float = 1.05) -> None:
        if per_second < 1:
            raise ValueError(f"per_second must be >= 1, got {per_second}")
        self.per_second = per_second
        self.window_s = window_s
        self._finished: Deque[float] = collections.deque()  # when recent requests finished, oldest first
        self._in_flight = 0
        self._cond = threading.Condition()

    @contextlib.contextmanager
    def slot(self, deadline: Optional[float] = None) -> Iterator[None]:
        """Hold a slot while the enclosed request runs (``deadline``: ``time.monotonic()`` value, None = none)."""
        self._take(deadline)
        try:
            yield
        finally:
            with self._cond:
                self._in_flight -= 1
                self._finished.append(time.monotonic())
                self._cond.notify_all()

    def _take(self, deadline: Optional[float]) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                while self._finished and self._finished[0] <= now - self.window_s:
                    self._finished.popleft()
                if self._in_flight + len(self._finished) < self.per_second:
                    self._in_flight += 1
                    return
                # the oldest finished request frees a slot then; with all slots in flight, a finish will notify
                wait = self._finished[0] + self.window_s - now if self._finished else None
                if deadline is not None and (now >= deadline or (wait is not None and now + wait > deadline)):
                    raise PubMedTimeout(f"deadline: no E-utilities request slot before the deadline (NCBI allows "
                                        f"{self.per_second} requests per second)")
                timeout = wait if deadline is None else min(wait if wait is not None else float("inf"),
                                                            deadline - now)
                self._cond.wait(timeout)


_LIMITERS: Dict[Tuple[str, str], RateLimiter] = {}
_LIMITERS_LOCK = threading.Lock()


def shared_limiter(base_url: str, api_key: Optional[str]) -> RateLimiter:
    """The process-wide limiter of one E-utilities root and key (NCBI counts per key, or per address)."""
    key = (base_url, api_key or "")
    with _LIMITERS_LOCK:
        if key not in _LIMITERS:
            _LIMITERS[key] = RateLimiter(RATE_WITH_KEY if api_key else RATE_NO_KEY)
        return _LIMITERS[key]


# --------------------------------------------------------------------------- cache


class PubMedCache:
    """On-disk cache: ``search/<sha256 of the parameters>.json`` (the PMIDs) and ``records/<pmid>.json``
    (a record, or ``{"missing": true}`` for a PMID PubMed did not return). Writes are atomic."""

    MISSING = "missing"

    def __init__(self, directory: Union[str, "os.PathLike[str]"]) -> None:
        self.directory = Path(directory)
        (self.directory / "search").mkdir(parents=True, exist_ok=True)
        (self.directory / "records").mkdir(parents=True, exist_ok=True)

    @staticmethod
    def search_key(params: Dict[str, Any]) -> str:
        return hashlib.sha256(json.dumps(params, sort_keys=True).encode("utf-8")).hexdigest()

    def get_search(self, params: Dict[str, Any]) -> Optional[List[str]]:
        data = self._read(self.directory / "search" / f"{self.search_key(params)}.json")
        return None if data is None else [str(i) for i in data["ids"]]

    def put_search(self, params: Dict[str, Any], ids: Sequence[str]) -> None:
        self._write(self.directory / "search" / f"{self.search_key(params)}.json", {"params": params, "ids": list(ids)})

    def get_record(self, pmid: str) -> Union[Record, str, None]:
        """The cached record, :attr:`MISSING` (PubMed had none), or None (not cached)."""
        data = self._read(self.directory / "records" / f"{pmid}.json")
        if data is None:
            return None
        if data.get("missing"):
            return self.MISSING
        return record_from_dict(data, f"{self.directory}/records/{pmid}.json")

    def put_record(self, pmid: str, record: Optional[Record]) -> None:
        self._write(self.directory / "records" / f"{pmid}.json",
                    {"missing": True} if record is None else record_to_dict(record))

    @staticmethod
    def _read(path: Path) -> Optional[Dict[str, Any]]:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (ValueError, UnicodeDecodeError):  # damaged entry: fetched again, then overwritten
            return None
        return data if isinstance(data, dict) else None

    @staticmethod
    def _write(path: Path, value: Any) -> None:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(value, fh, ensure_ascii=False)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise


# --------------------------------------------------------------------------- the source


class _Clock:
    """A whole-call deadline in ``time.monotonic()`` seconds."""

    def __init__(self, deadline_ms: Optional[float]) -> None:
        if deadline_ms is not None and not deadline_ms >= 0:
            raise ValueError(f"deadline_ms must be >= 0 or None, got {deadline_ms!r}")
        self.budget_ms = deadline_ms
        self.end = None if deadline_ms is None else time.monotonic() + deadline_ms / 1000.0

    def left_s(self) -> float:
        return float("inf") if self.end is None else self.end - time.monotonic()

    def check(self, what: str) -> None:
        if self.left_s() <= 0:
            raise PubMedTimeout(f"deadline: {self.budget_ms:.0f} ms passed before {what}")


class PubMedSource:
    """PubMed through E-utilities (module docstring).

    ``base_url``: the E-utilities root (default NCBI's; tests point it at a local server); ``api_key``:
    NCBI API key (10 requests/s instead of 3); ``email`` / ``tool``: who is asking, sent with every request as
    NCBI asks; ``cache_dir``: on-disk cache (None: no cache); ``timeout_s``: longest single request (s);
    ``max_retries``: retries of a 429 / 5xx / dropped request. Thread-safe; close it (or use ``with``).
    """

    def __init__(self, base_url: str = DEFAULT_BASE_URL, api_key: Optional[str] = None, email: Optional[str] = None,
                 tool: str = "medretrieve", cache_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
                 timeout_s: float = 30.0, max_retries: int = 4) -> None:
        import httpx

        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL of the E-utilities root, got {base_url!r}")
        if not isinstance(tool, str) or not tool.strip() or re.search(r"\s", tool):
            raise ValueError(f"tool must be a name without spaces (NCBI's rule), got {tool!r}")
        if timeout_s <= 0 or max_retries < 0:
            raise ValueError(f"timeout_s must be > 0 and max_retries >= 0, got {timeout_s}, {max_retries}")
        self.base_url = base_url.rstrip("/") + "/"
        self.api_key = api_key or None
        self.email = email or None
        self.tool = tool
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.cache = PubMedCache(cache_dir) if cache_dir is not None else None
        self.limiter = shared_limiter(self.base_url, self.api_key)
        self.requests_sent = 0  # HTTP requests made (retries included); cache hits make none
        self._count_lock = threading.Lock()
        self._client = httpx.Client(timeout=self.timeout_s, follow_redirects=True,
                                    headers={"User-Agent": f"{tool} (medretrieve)"})

    def __enter__(self) -> "PubMedSource":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    # ------------------------------------------------------------- esearch
    def search(self, term: str, retmax: int = 100, deadline_ms: Optional[float] = None, *,
               mindate: Optional[str] = None, maxdate: Optional[str] = None, datetype: str = "pdat",
               sort: str = "relevance") -> List[str]:
        """PMIDs of ``term`` (PubMed query syntax), best first, at most ``retmax`` (1..10000).

        ``mindate`` / ``maxdate`` (``YYYY``, ``YYYY/MM`` or ``YYYY/MM/DD``, given together) limit the
        ``datetype`` date (``pdat`` publication, ``edat`` Entrez, ``mdat`` modification).
        """
        if not isinstance(term, str) or not term.strip():
            raise ValueError("term must be a non-empty string")
        if isinstance(retmax, bool) or not isinstance(retmax, int) or not 1 <= retmax <= MAX_RETMAX:
            raise ValueError(f"retmax must be an integer in 1..{MAX_RETMAX}, got {retmax!r}")
        if (mindate is None) != (maxdate is None):
            raise ValueError("mindate and maxdate go together (E-utilities needs both)")
        params: Dict[str, Any] = {"db": "pubmed", "term": " ".join(term.split()), "retmax": retmax,
                                  "sort": sort, "retmode": "json"}
        if mindate is not None:
            for name, value in (("mindate", mindate), ("maxdate", maxdate)):
                if not isinstance(value, str) or not _DATE.match(value):
                    raise ValueError(f"{name} must look like YYYY, YYYY/MM or YYYY/MM/DD, got {value!r}")
            if datetype not in ("pdat", "edat", "mdat"):
                raise ValueError(f"datetype must be pdat, edat or mdat, got {datetype!r}")
            params.update(datetype=datetype, mindate=mindate, maxdate=maxdate)
        if self.cache is not None:
            cached = self.cache.get_search(params)
            if cached is not None:
                return cached
        clock = _Clock(deadline_ms)
        body = self._request("GET", "esearch.fcgi", params, clock, "esearch")
        ids = _esearch_ids(body)[:retmax]
        if self.cache is not None:
            self.cache.put_search(params, ids)
        return ids

    # ------------------------------------------------------------- efetch
    def fetch(self, pmids: Iterable[Union[str, int]], deadline_ms: Optional[float] = None,
              report: Optional[ReadReport] = None) -> List[Record]:
        """The records of ``pmids``, in the order asked (PMIDs PubMed does not have are left out; malformed
        citations are skipped into ``report``). On a deadline, :class:`PubMedTimeout` carries the records
        fetched so far in its ``records``."""
        wanted = _check_pmids(pmids)
        report = report if report is not None else ReadReport()
        found: Dict[str, Optional[Record]] = {}
        todo = []
        for pmid in wanted:
            hit = self.cache.get_record(pmid) if self.cache is not None else None
            if hit is None:
                todo.append(pmid)
            else:
                found[pmid] = None if hit == PubMedCache.MISSING else hit  # type: ignore[assignment]
        clock = _Clock(deadline_ms)
        for start in range(0, len(todo), EFETCH_BATCH):
            batch = todo[start:start + EFETCH_BATCH]
            try:
                body = self._request("POST", "efetch.fcgi", {"db": "pubmed", "id": ",".join(batch),
                                                               "retmode": "xml"}, clock, "efetch")
            except PubMedTimeout as exc:
                raise PubMedTimeout(str(exc), _in_order(wanted, found)) from None
            by_id = {r.id: r for r in _efetch_records(body, report)}
            for pmid in batch:
                found[pmid] = by_id.get(pmid)
                if self.cache is not None:
                    self.cache.put_record(pmid, found[pmid])
        return _in_order(wanted, found)

    def search_records(self, term: str, retmax: int = 100, deadline_ms: Optional[float] = None,
                       **filters: Any) -> List[Record]:
        """:meth:`search` then :meth:`fetch` under one deadline (ms)."""
        clock = _Clock(deadline_ms)
        ids = self.search(term, retmax, deadline_ms, **filters)
        left = None if clock.end is None else max(clock.left_s() * 1000.0, 0.0)
        return self.fetch(ids, left)

    # ------------------------------------------------------------- HTTP
    def _params(self, params: Dict[str, Any]) -> Dict[str, Any]:
        out = dict(params, tool=self.tool)
        if self.email:
            out["email"] = self.email
        if self.api_key:
            out["api_key"] = self.api_key
        return out

    def _request(self, method: str, endpoint: str, params: Dict[str, Any], clock: _Clock, what: str) -> bytes:
        """One E-utilities call with the rate limit, retries and the deadline; returns the 200 reply's body."""
        import httpx

        url = self.base_url + endpoint
        full = self._params(params)
        last = ""
        for attempt in range(self.max_retries + 1):
            clock.check(what)
            try:
                with self.limiter.slot(clock.end):
                    timeout = min(self.timeout_s, clock.left_s())
                    if timeout <= 0:
                        raise PubMedTimeout(f"deadline: no time left for {what} after waiting for the rate limit")
                    with self._count_lock:
                        self.requests_sent += 1
                    if method == "GET":
                        resp = self._client.get(url, params=full, timeout=timeout)
                    else:
                        resp = self._client.post(url, data=full, timeout=timeout)
            except httpx.TimeoutException:
                if clock.left_s() <= 0:
                    raise PubMedTimeout(f"deadline: {what} did not answer within {clock.budget_ms:.0f} ms") from None
                last = f"{what} timed out after {timeout:.1f} s"
                wait = _backoff(attempt)
            except httpx.TransportError as exc:
                last = f"cannot reach {url}: {type(exc).__name__}: {exc}"
                wait = _backoff(attempt)
            else:
                if resp.status_code == 200:
                    return resp.content
                message = _error_text(resp)
                if resp.status_code not in _RETRY_STATUS:
                    raise PubMedHTTPError(resp.status_code, f"{what}: {message}")
                last = f"HTTP {resp.status_code} from {what}: {message}"
                asked = _retry_after(resp) if resp.status_code == 429 else None
                wait = _backoff(attempt) if asked is None else asked
            if attempt == self.max_retries:
                break
            if wait >= clock.left_s():
                raise PubMedTimeout(f"deadline: {last}; the next try would start after the deadline")
            time.sleep(wait)
        raise PubMedError(f"{last} (gave up after {self.max_retries + 1} tries)")


# --------------------------------------------------------------------------- replies


def _esearch_ids(body: bytes) -> List[str]:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise PubMedBadResponse(f"esearch reply is not JSON ({exc}): {body[:120]!r}") from None
    result = data.get("esearchresult") if isinstance(data, dict) else None
    if not isinstance(result, dict):
        raise PubMedBadResponse(f"esearch reply has no 'esearchresult' object: {body[:200]!r}")
    if result.get("ERROR"):
        raise PubMedBadResponse(f"esearch error: {result['ERROR']}")
    ids = result.get("idlist", [])
    if not isinstance(ids, list) or not all(isinstance(i, (str, int)) and _PMID.match(str(i)) for i in ids):
        raise PubMedBadResponse(f"esearch 'idlist' is not a list of PMIDs: {str(ids)[:200]}")
    return [str(i) for i in ids]


def _efetch_records(body: bytes, report: ReadReport) -> List[Record]:
    local = ReadReport()
    records = parse_medline(body, "efetch reply", errors="skip", report=local)
    broken = [m for w, m in local.skipped if "XML parse error" in m]
    if broken:
        raise PubMedBadResponse(f"efetch reply is not well-formed XML: {broken[0]}")
    if not records and b"PubmedArticleSet" not in body[:2000]:
        raise PubMedBadResponse(f"efetch reply is not a PubmedArticleSet: {body[:200]!r}")
    report.records += local.records
    report.skipped.extend(local.skipped)
    return records


def _check_pmids(pmids: Iterable[Union[str, int]]) -> List[str]:
    if isinstance(pmids, (str, bytes)):
        raise TypeError("pmids must be a list of PMIDs, not one string")
    out: List[str] = []
    seen = set()
    for p in pmids:
        s = str(p).strip()
        if isinstance(p, bool) or not _PMID.match(s):
            raise ValueError(f"not a PMID (digits only): {p!r}")
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


def _in_order(wanted: Sequence[str], found: Dict[str, Optional[Record]]) -> List[Record]:
    return [r for r in (found.get(p) for p in wanted) if r is not None]


def _backoff(attempt: int) -> float:
    return min(0.5 * (2 ** attempt), 8.0)


def _retry_after(resp: Any) -> Optional[float]:
    value = resp.headers.get("Retry-After")
    try:
        return max(float(value), 0.0) if value is not None else None
    except ValueError:  # an HTTP date: use the backoff instead
        return None


def _error_text(resp: Any) -> str:
    try:
        data = resp.json()
        if isinstance(data, dict) and data.get("error"):
            return str(data["error"])[:200]
    except ValueError:
        pass
    return resp.text[:200].strip() or resp.reason_phrase
