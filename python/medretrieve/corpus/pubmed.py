"""PubMed as an online source, through NCBI's E-utilities: esearch (PMIDs by relevance) and efetch (MEDLINE).

``PubMedSource(...).search(term, retmax=100)`` returns PMIDs (``esearch.fcgi``, ``db=pubmed``,
``retmode=json``, ``sort=relevance``, optional ``datetype``/``mindate``/``maxdate``); ``.search_many(terms)``
runs several searches at once (one PubMed query per question variant); ``.fetch(pmids)`` returns the
:class:`~medretrieve.corpus.sources.Record` of each (``efetch.fcgi``, ``retmode=xml``, POSTed in batches of
``efetch_batch`` ids, the batches in parallel, parsed by the MEDLINE reader of :mod:`.sources`), in the order
asked.

How each call talks to E-utilities (:mod:`.eutils`): NCBI's rate (3 requests/s, 10 with an API key, one limiter
per root and key shared by the whole process), ``tool`` / ``email`` / ``api_key`` on every request, one deadline
per call (``deadline_ms``) that bounds the rate-limit waits, connecting, headers, body and retries together, a
reply size cap (``max_reply_bytes``), bounded retries of 429 / 5xx / dropped connections (a ``Retry-After``
honoured up to ``max_retry_after_s`` and the deadline, refused when not a finite delay). Every failure raises a
:class:`PubMedError` subclass: :class:`PubMedTimeout` (whose ``records`` hold what ``fetch`` had by then),
:class:`PubMedHTTPError`, :class:`PubMedRateLimited`, :class:`PubMedUnavailable`, :class:`PubMedBadResponse`,
:class:`PubMedTooLarge`, :class:`PubMedCacheError`.

With ``cache_dir`` (:mod:`.pubmed_cache`), every search (keyed by its parameters) and every record (keyed by
PMID, including PMIDs PubMed did not return) is kept on disk, so a re-run makes no request and works offline;
an online search also keeps the records' chunk vectors there, per encoder. Transport failures and malformed
replies are never cached; damaged entries are fetched again and rewritten; a cache write that fails is logged
and the result still returned.
"""
from __future__ import annotations

import concurrent.futures
import json
import os
import re
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

from .eutils import (  # noqa: F401  (the error types and the limiter are part of this module's API)
    DEFAULT_BASE_URL, DEFAULT_MAX_REPLY_BYTES, DEFAULT_MAX_RETRY_AFTER_S, RATE_NO_KEY, RATE_WITH_KEY, CallClock,
    EutilsClient, PubMedBadResponse, PubMedCacheError, PubMedError, PubMedHTTPError, PubMedRateLimited,
    PubMedTimeout, PubMedTooLarge, PubMedUnavailable, RateLimiter, shared_limiter,
)
from .pubmed_cache import PubMedCache, is_pmid
from .sources import ReadReport, Record, parse_medline

EFETCH_BATCH = 200  # ids per efetch request (NCBI: up to ~200 ids in a GET; POST allows more)
MAX_RETMAX = 10_000  # esearch returns at most this many ids per call
_DATE = re.compile(r"[0-9]{4}(/[0-9]{2}(/[0-9]{2})?)?")


class PubMedSource:
    """PubMed through E-utilities (module docstring).

    - ``base_url``: the E-utilities root (default NCBI's; tests point it at a local server);
    - ``api_key``: NCBI API key (10 requests/s instead of 3); ``email`` / ``tool``: who is asking, sent with
      every request as NCBI asks;
    - ``cache_dir``: on-disk cache (None: no cache);
    - ``timeout_s``: longest single request, connecting to the last byte of the reply (s);
    - ``max_retries``: retries of a 429 / 5xx / dropped request; ``max_retry_after_s``: longest ``Retry-After``
      honoured (s; a longer one raises :class:`PubMedRateLimited`);
    - ``max_reply_bytes``: largest reply read (decoded bytes; larger raises :class:`PubMedTooLarge`);
    - ``efetch_batch``: ids per efetch request (1..10000); ``parallel``: efetch / esearch requests in flight at
      once for one call (still within NCBI's rate).

    Thread-safe; close it (or use ``with``). ``requests_sent``: HTTP requests made (cache hits make none).
    """

    def __init__(self, base_url: str = DEFAULT_BASE_URL, api_key: Optional[str] = None, email: Optional[str] = None,
                 tool: str = "medretrieve", cache_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
                 timeout_s: float = 30.0, max_retries: int = 4, *,
                 max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
                 max_retry_after_s: float = DEFAULT_MAX_RETRY_AFTER_S,
                 efetch_batch: int = EFETCH_BATCH, parallel: int = RATE_NO_KEY) -> None:
        import httpx  # noqa: F401  (fail here, with the extra to install, not on the first request)

        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL of the E-utilities root, got {base_url!r}")
        if not isinstance(tool, str) or not tool.strip() or re.search(r"\s", tool):
            raise ValueError(f"tool must be a name without spaces (NCBI's rule), got {tool!r}")
        for name, value, low in (("timeout_s", timeout_s, 0.0), ("max_retry_after_s", max_retry_after_s, 0.0)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not low < value < float("inf"):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        for name, value, lo, hi in (("max_retries", max_retries, 0, 100), ("max_reply_bytes", max_reply_bytes, 1024,
                                    1 << 40), ("efetch_batch", efetch_batch, 1, MAX_RETMAX),
                                    ("parallel", parallel, 1, 64)):
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise ValueError(f"{name} must be an integer in {lo}..{hi}, got {value!r}")
        self.base_url = base_url.rstrip("/") + "/"
        self.api_key = api_key or None
        self.email = email or None
        self.tool = tool
        self.timeout_s = float(timeout_s)
        self.max_retries = max_retries
        self.max_reply_bytes = max_reply_bytes
        self.efetch_batch = efetch_batch
        self.parallel = parallel
        self.cache = PubMedCache(cache_dir) if cache_dir is not None else None
        self._eutils = EutilsClient(self.base_url, self.api_key, self.email, tool, self.timeout_s, max_retries,
                                    max_reply_bytes, float(max_retry_after_s))
        self.limiter = self._eutils.limiter

    @property
    def requests_sent(self) -> int:
        return self._eutils.requests_sent

    def __enter__(self) -> "PubMedSource":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._eutils.close()

    # ------------------------------------------------------------- esearch
    def search(self, term: str, retmax: int = 100, deadline_ms: Optional[float] = None, *,
               mindate: Optional[str] = None, maxdate: Optional[str] = None, datetype: str = "pdat",
               sort: str = "relevance") -> List[str]:
        """PMIDs of ``term`` (PubMed query syntax), best first, at most ``retmax`` (1..10000).

        ``mindate`` / ``maxdate`` (``YYYY``, ``YYYY/MM`` or ``YYYY/MM/DD``, given together) limit the
        ``datetype`` date (``pdat`` publication, ``edat`` Entrez, ``mdat`` modification).
        """
        params = _search_params(term, retmax, mindate, maxdate, datetype, sort)
        clock = CallClock(deadline_ms)
        return self._search(params, clock)

    def search_many(self, terms: Sequence[str], retmax: int = 100, deadline_ms: Optional[float] = None,
                    **filters: Any) -> List[Union[List[str], PubMedError]]:
        """:meth:`search` of each term, up to ``parallel`` at once, under one deadline (ms); per term its PMIDs
        or the :class:`PubMedError` that search raised (one failing variant does not lose the others)."""
        if isinstance(terms, str):
            raise TypeError("terms must be a list of PubMed queries, not one string")
        params = [_search_params(t, retmax, **filters) for t in terms]
        clock = CallClock(deadline_ms)

        def one(p: Dict[str, Any]) -> Union[List[str], PubMedError]:
            try:
                return self._search(p, clock)
            except PubMedError as exc:
                return exc

        return self._in_parallel(one, params)

    def _search(self, params: Dict[str, Any], clock: CallClock) -> List[str]:
        if self.cache is not None:
            cached = self.cache.get_search(params)
            if cached is not None:
                return cached
        body = self._eutils.call("GET", "esearch.fcgi", params, clock, "esearch")
        ids = esearch_ids(body)[: params["retmax"]]
        if self.cache is not None:
            self.cache.put_search(params, ids)
        return ids

    # ------------------------------------------------------------- efetch
    def fetch(self, pmids: Iterable[Union[str, int]], deadline_ms: Optional[float] = None,
              report: Optional[ReadReport] = None) -> List[Record]:
        """The records of ``pmids``, in the order asked (PMIDs PubMed does not have are left out; malformed
        citations are skipped into ``report``). The PMIDs not cached are asked in batches of ``efetch_batch``,
        up to ``parallel`` batches at once. On a deadline, :class:`PubMedTimeout` carries the records fetched so
        far in its ``records``; another failure raises after every batch has ended (the batches that succeeded
        are cached)."""
        wanted = check_pmids(pmids)
        report = report if report is not None else ReadReport()
        found: Dict[str, Optional[Record]] = {}
        todo = []
        for pmid in wanted:
            hit = self.cache.get_record(pmid) if self.cache is not None else None
            if hit is None:
                todo.append(pmid)
            else:
                found[pmid] = hit if isinstance(hit, Record) else None
        clock = CallClock(deadline_ms)
        batches = [todo[i:i + self.efetch_batch] for i in range(0, len(todo), self.efetch_batch)]

        def one(batch: List[str]) -> Optional[PubMedError]:
            try:
                body = self._eutils.call("POST", "efetch.fcgi", {"db": "pubmed", "id": ",".join(batch),
                                                                 "retmode": "xml"}, clock, "efetch")
                local = ReadReport()
                by_id = {r.id: r for r in efetch_records(body, local)}
            except PubMedError as exc:
                return exc
            for pmid in batch:  # dict writes are atomic; the report is merged by the caller's thread below
                found[pmid] = by_id.get(pmid)
                if self.cache is not None:
                    self.cache.put_record(pmid, found[pmid])
            reports.append(local)
            return None

        reports: List[ReadReport] = []
        errors = [e for e in self._in_parallel(one, batches) if e is not None]
        for local in reports:
            report.records += local.records
            report.skipped.extend(local.skipped)
        if errors:
            first = next((e for e in errors if isinstance(e, PubMedTimeout)), errors[0])
            if isinstance(first, PubMedTimeout):
                raise PubMedTimeout(str(first), _in_order(wanted, found)) from None
            raise first
        return _in_order(wanted, found)

    def search_records(self, term: str, retmax: int = 100, deadline_ms: Optional[float] = None,
                       **filters: Any) -> List[Record]:
        """:meth:`search` then :meth:`fetch` under one deadline (ms)."""
        clock = CallClock(deadline_ms)
        ids = self.search(term, retmax, deadline_ms, **filters)
        return self.fetch(ids, clock.left_ms())

    def _in_parallel(self, fn: Any, items: Sequence[Any]) -> List[Any]:
        """``fn`` of each item, up to ``parallel`` at once (the rate limiter still spaces the requests)."""
        if len(items) <= 1 or self.parallel == 1:
            return [fn(x) for x in items]
        with concurrent.futures.ThreadPoolExecutor(min(self.parallel, len(items)),
                                                   thread_name_prefix="medretrieve-pubmed") as pool:
            return list(pool.map(fn, items))


# --------------------------------------------------------------------------- arguments and replies


def _search_params(term: str, retmax: int, mindate: Optional[str] = None, maxdate: Optional[str] = None,
                   datetype: str = "pdat", sort: str = "relevance") -> Dict[str, Any]:
    if not isinstance(term, str) or not term.strip():
        raise ValueError("term must be a non-empty string")
    if isinstance(retmax, bool) or not isinstance(retmax, int) or not 1 <= retmax <= MAX_RETMAX:
        raise ValueError(f"retmax must be an integer in 1..{MAX_RETMAX}, got {retmax!r}")
    if (mindate is None) != (maxdate is None):
        raise ValueError("mindate and maxdate go together (E-utilities needs both)")
    if sort not in ("relevance", "pub_date", "Author", "JournalName"):
        raise ValueError(f"sort must be relevance, pub_date, Author or JournalName, got {sort!r}")
    params: Dict[str, Any] = {"db": "pubmed", "term": " ".join(term.split()), "retmax": retmax,
                              "sort": sort, "retmode": "json"}
    if mindate is not None:
        for name, value in (("mindate", mindate), ("maxdate", maxdate)):
            if not isinstance(value, str) or not _DATE.fullmatch(value):
                raise ValueError(f"{name} must look like YYYY, YYYY/MM or YYYY/MM/DD, got {value!r}")
        if datetype not in ("pdat", "edat", "mdat"):
            raise ValueError(f"datetype must be pdat, edat or mdat, got {datetype!r}")
        params.update(datetype=datetype, mindate=mindate, maxdate=maxdate)
    return params


def esearch_ids(body: bytes) -> List[str]:
    """The PMIDs of an esearch JSON reply; :class:`PubMedBadResponse` for anything else (not JSON, nested too
    deep, no ``esearchresult``, an ``ERROR``, ids that are not PMIDs)."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise PubMedBadResponse(f"esearch reply is not JSON ({str(exc)[:100]}): {body[:120]!r}") from None
    except RecursionError:
        raise PubMedBadResponse("esearch reply is JSON nested too deep to read") from None
    result = data.get("esearchresult") if isinstance(data, dict) else None
    if not isinstance(result, dict):
        raise PubMedBadResponse(f"esearch reply has no 'esearchresult' object: {body[:200]!r}")
    if result.get("ERROR"):
        raise PubMedBadResponse(f"esearch error: {str(result['ERROR'])[:200]}")
    ids = result.get("idlist", [])
    if not isinstance(ids, list):
        raise PubMedBadResponse(f"esearch 'idlist' is not a list: {str(ids)[:200]}")
    out = [str(i) if isinstance(i, int) and not isinstance(i, bool) else i for i in ids]
    bad = [i for i in out if not is_pmid(i)]
    if bad:
        raise PubMedBadResponse(f"esearch 'idlist' holds values that are not PMIDs (ASCII digits): "
                                f"{str(bad[:3])[:200]}")
    return list(dict.fromkeys(out))


def efetch_records(body: bytes, report: ReadReport) -> List[Record]:
    """The records of an efetch MEDLINE XML reply (malformed citations skipped into ``report``);
    :class:`PubMedBadResponse` when the reply is not well-formed XML or not a ``PubmedArticleSet``."""
    local = ReadReport()
    try:
        records = parse_medline(body, "efetch reply", errors="skip", report=local)
    except RecursionError:
        raise PubMedBadResponse("efetch reply is XML nested too deep to read") from None
    broken = [m for w, m in local.skipped if "XML parse error" in m]
    if broken:
        raise PubMedBadResponse(f"efetch reply is not well-formed XML: {broken[0][:300]}")
    if not records and b"PubmedArticleSet" not in body[:2000]:
        raise PubMedBadResponse(f"efetch reply is not a PubmedArticleSet: {body[:200]!r}")
    report.records += local.records
    report.skipped.extend(local.skipped)
    return records


def check_pmids(pmids: Iterable[Union[str, int]]) -> List[str]:
    """``pmids`` as distinct PMID strings in order (ints allowed); ValueError naming the first that is not one
    (only ASCII digits count), TypeError for a single string."""
    if isinstance(pmids, (str, bytes)):
        raise TypeError("pmids must be a list of PMIDs, not one string")
    out: List[str] = []
    seen = set()
    for p in pmids:
        if isinstance(p, bool) or not isinstance(p, (str, int)) and not hasattr(p, "__index__"):
            raise ValueError(f"not a PMID (ASCII digits only): {p!r}")
        s = p.strip() if isinstance(p, str) else str(int(p))
        if not is_pmid(s):
            raise ValueError(f"not a PMID (ASCII digits only): {p!r}")
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


def _in_order(wanted: Sequence[str], found: Dict[str, Optional[Record]]) -> List[Record]:
    return [r for r in (found.get(p) for p in wanted) if r is not None]
