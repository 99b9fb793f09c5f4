"""Talking to NCBI's E-utilities: the error types, the shared rate limiter, and one bounded call with its retries.

:class:`EutilsClient` makes one E-utilities call (:meth:`EutilsClient.call`) the way NCBI asks and a faulty
upstream cannot abuse:

- **Rate**: at most 3 requests per second without an API key and 10 with one, through one :class:`RateLimiter`
  per E-utilities root and key, shared by every thread and every client of the process; a slot is free again
  1.05 s after its request *finished*.
- **One deadline per call** (:class:`CallClock`, the package's :class:`~medretrieve.outbound.Deadline`) bounds waiting for the limiter, connecting, sending, the reply's
  headers, its body and every retry together; each attempt is also bounded as a whole by ``timeout_s``. The
  exchange runs on one process-wide asyncio loop (httpx's async client) under ``asyncio.wait_for``, so a server
  that trickles its headers or body a byte at a time is cut at the deadline, not at each read's timeout.
- **Reply size cap** (``max_reply_bytes``), enforced while streaming on the *decoded* bytes: gzip / deflate are
  decoded here with a bounded output, so neither a flood nor a compression bomb costs more than the cap.
- **Retries**, as the package's outbound policy decides (:class:`~medretrieve.outbound.OutboundPolicy`): 429, 5xx
  and dropped connections are retried ``max_retries`` times with exponential backoff (0.5 s, 1 s, 2 s, ... at
  most 8 s). A ``Retry-After`` (seconds or an HTTP date, :func:`~medretrieve.outbound.parse_retry_after`) takes
  precedence; one that is not finite and non-negative (``nan``, ``inf``, ``-1``, garbage) is refused
  (:class:`PubMedBadResponse`), one longer than ``max_retry_after_s`` is not slept (:class:`PubMedRateLimited`),
  one past the deadline neither (:class:`PubMedTimeout`). Other 4xx fail at once (:class:`PubMedHTTPError`).

Every failure is a :class:`PubMedError` subclass naming what went wrong.
"""
from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import os
import re
import threading
import time
import zlib
from dataclasses import dataclass
from typing import Any, Coroutine, Deque, Dict, Iterator, List, Optional, Tuple, TypeVar

from ..outbound import Deadline, OutboundPolicy, RetryAfterError, parse_retry_after

DEFAULT_BASE_URL = "https://eutils.ncbi.nlm.nih.gov/entrez/eutils/"
RATE_NO_KEY = 3  # requests per second NCBI allows without an API key
RATE_WITH_KEY = 10  # ... and with one
DEFAULT_MAX_REPLY_BYTES = 64 << 20  # an efetch of 200 abstracts is ~1-4 MB of XML
DEFAULT_MAX_RETRY_AFTER_S = 60.0
ERROR_BODY_BYTES = 64 << 10  # of an error reply, only the start is read (for the message)
_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
T = TypeVar("T")


# --------------------------------------------------------------------------- errors


class PubMedError(RuntimeError):
    """E-utilities could not answer; the subclass says how."""


class PubMedTimeout(PubMedError):
    """The call did not finish within its deadline; ``records``: what ``fetch`` had fetched by then."""

    def __init__(self, message: str, records: Optional[List[Any]] = None) -> None:
        super().__init__(message)
        self.records: List[Any] = list(records or [])


class PubMedHTTPError(PubMedError):
    """E-utilities answered with an HTTP error that retrying does not fix (``status``)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class PubMedRateLimited(PubMedHTTPError):
    """NCBI asked to wait ``retry_after_s`` seconds, longer than the client's ``max_retry_after_s``."""

    def __init__(self, status: int, message: str, retry_after_s: float) -> None:
        super().__init__(status, message)
        self.retry_after_s = retry_after_s


class PubMedUnavailable(PubMedError):
    """E-utilities could not be reached, or kept failing (dropped connections, 429 / 5xx) until the retries ran
    out."""


class PubMedBadResponse(PubMedError):
    """A reply that is not what NCBI documents: not esearch JSON or efetch MEDLINE XML, nested too deep, an
    unknown content encoding, a ``Retry-After`` that is not a finite, non-negative delay."""


class PubMedTooLarge(PubMedBadResponse):
    """A reply larger than the client's ``max_reply_bytes`` (``limit_bytes``); reading stopped at the cap."""

    def __init__(self, message: str, limit_bytes: int) -> None:
        super().__init__(message)
        self.limit_bytes = limit_bytes


class PubMedCacheError(PubMedError):
    """The cache folder cannot be created."""


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


# --------------------------------------------------------------------------- the whole-call deadline


class CallClock(Deadline):
    """A whole call's deadline (``deadline_ms`` None: none): the package's :class:`~medretrieve.outbound.Deadline`
    with ValueError for any budget that is not a number >= 0 and PubMed's own timeout error."""

    def __init__(self, deadline_ms: Optional[float]) -> None:
        if deadline_ms is not None and (isinstance(deadline_ms, bool) or not isinstance(deadline_ms, (int, float))
                                        or not deadline_ms >= 0):
            raise ValueError(f"deadline_ms must be a number >= 0 or None, got {deadline_ms!r}")
        super().__init__(deadline_ms)

    def left_ms(self) -> Optional[float]:
        """Milliseconds left (None without a deadline), never negative: what a nested call gets."""
        return None if self.unlimited else max(self.remaining_ms(), 0.0)

    def check(self, what: str) -> None:
        if self.expired():
            raise PubMedTimeout(f"deadline: {self.budget_ms:.0f} ms passed before {what}")


# --------------------------------------------------------------------------- one bounded exchange


class _IOLoop:
    """The process's E-utilities I/O thread: one asyncio loop every client's exchanges run on (a fork gets a
    fresh one)."""

    _lock = threading.Lock()
    _loop: Optional[asyncio.AbstractEventLoop] = None
    _pid = 0

    @classmethod
    def get(cls) -> asyncio.AbstractEventLoop:
        with cls._lock:
            if cls._loop is None or cls._pid != os.getpid():
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="medretrieve-eutils-io", daemon=True).start()
                cls._loop, cls._pid = loop, os.getpid()
            return cls._loop


def run_on_loop(coro: Coroutine[Any, Any, T], limit_s: float) -> T:
    """Run ``coro`` on the I/O loop, waiting at most ``limit_s`` (+1 s of grace for the loop to cancel it);
    ``asyncio.TimeoutError`` when it did not finish."""
    fut = asyncio.run_coroutine_threadsafe(asyncio.wait_for(coro, limit_s), _IOLoop.get())
    try:
        return fut.result(limit_s + 1.0)
    except BaseException:
        fut.cancel()
        raise


class _Decoder:
    """Content decoding (identity, gzip, deflate) whose output never exceeds ``limit`` bytes: ``feed`` returns
    False once the reply would pass it."""

    def __init__(self, encoding: str, limit: int) -> None:
        codings = [c.strip().lower() for c in encoding.split(",") if c.strip() and c.strip().lower() != "identity"]
        if len(codings) > 1 or (codings and codings[0] not in ("gzip", "x-gzip", "deflate")):
            raise PubMedBadResponse(f"reply in a content encoding not asked for: {encoding[:80]!r}")
        self.coding = codings[0] if codings else ""
        self.limit = limit
        self.body = bytearray()
        self._raw_deflate = False
        self._z: Any = None
        if self.coding in ("gzip", "x-gzip"):
            self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif self.coding == "deflate":
            self._z = zlib.decompressobj()

    def feed(self, data: bytes) -> bool:
        if self._z is None:
            self.body += data[: max(self.limit + 1 - len(self.body), 0)]
            return len(self.body) <= self.limit
        try:
            out = self._z.decompress(data, self.limit + 1 - len(self.body))
        except zlib.error:
            if self.coding != "deflate" or self._raw_deflate or self.body:
                raise PubMedBadResponse(f"reply is not valid {self.coding} data") from None
            self._raw_deflate = True  # some servers send raw deflate without the zlib header
            self._z = zlib.decompressobj(-zlib.MAX_WBITS)
            return self.feed(data)
        self.body += out
        # the output limit stopped the decoder with input left: the reply is larger than the cap
        return len(self.body) <= self.limit and not self._z.unconsumed_tail


@dataclass
class Reply:
    """A reply as read: ``status``, ``headers`` (lower-case names), ``body`` (decoded; for a non-200 reply at
    most :data:`ERROR_BODY_BYTES`)."""

    status: int
    headers: Dict[str, str]
    body: bytes


class _Transport:
    """One client's connection pool on the I/O loop; :meth:`send` is one bounded exchange."""

    def __init__(self, user_agent: str, max_reply_bytes: int) -> None:
        self.user_agent = user_agent
        self.max_reply_bytes = max_reply_bytes
        self._client: Any = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None

    def _http(self) -> Any:
        import httpx

        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client = httpx.AsyncClient(follow_redirects=True, headers={
                "User-Agent": self.user_agent, "Accept-Encoding": "gzip, deflate"})
            self._loop = loop
        return self._client

    async def _exchange(self, method: str, url: str, params: Dict[str, Any], limit_s: float) -> Reply:
        import httpx

        kw: Dict[str, Any] = {"params": params} if method == "GET" else {"data": params}
        async with self._http().stream(method, url, timeout=httpx.Timeout(limit_s), **kw) as resp:
            ok = resp.status_code == 200
            cap = self.max_reply_bytes if ok else ERROR_BODY_BYTES
            declared = resp.headers.get("content-length", "")
            if ok and re.fullmatch(r"[0-9]{1,20}", declared) and int(declared) > cap:
                raise PubMedTooLarge(f"reply of {int(declared)} bytes (Content-Length) is larger than "
                                     f"max_reply_bytes={cap}", cap)
            decoder = _Decoder(resp.headers.get("content-encoding", ""), cap)
            async for raw in resp.aiter_raw():
                if not decoder.feed(raw):
                    if ok:
                        raise PubMedTooLarge(f"reply is larger than max_reply_bytes={cap} (stopped reading there)",
                                             cap)
                    break  # an error reply: its start is enough for the message
            headers = {k.lower(): v for k, v in resp.headers.items()}
            return Reply(resp.status_code, headers, bytes(decoder.body[:cap]))

    def send(self, method: str, url: str, params: Dict[str, Any], limit_s: float) -> Reply:
        """One request and its whole reply within ``limit_s`` seconds. Raises ``asyncio.TimeoutError`` (or an
        httpx timeout) when it did not finish, ``httpx.HTTPError`` when the transport failed, and
        :class:`PubMedBadResponse` / :class:`PubMedTooLarge` for a reply refused while reading."""
        return run_on_loop(self._exchange(method, url, params, limit_s), limit_s)

    def close(self) -> None:
        client, loop = self._client, self._loop
        self._client = None
        if client is not None and loop is not None and loop.is_running():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(client.aclose(), loop).result(5.0)


# --------------------------------------------------------------------------- retries


def retry_after_s(value: Optional[str], what: str, status: int) -> Optional[float]:
    """Seconds a ``Retry-After`` header asks to wait (None when absent), by the package's one rule
    (:func:`medretrieve.outbound.parse_retry_after`); anything it cannot read, ``nan``, ``inf`` and negative
    delays included, refuses the reply (:class:`PubMedBadResponse`)."""
    try:
        return parse_retry_after(value)
    except RetryAfterError as exc:
        raise PubMedBadResponse(f"{what}: HTTP {status} with {exc}") from None


def _error_text(reply: Reply) -> str:
    import json

    text = reply.body.decode("utf-8", "replace")
    try:
        data = json.loads(text)
        if isinstance(data, dict) and data.get("error"):
            return str(data["error"])[:200]
    except (ValueError, RecursionError):
        pass
    return " ".join(text[:200].split()) or f"status {reply.status}"


class EutilsClient:
    """E-utilities calls with NCBI's parameters, the shared rate limit, retries and one deadline per call
    (module docstring). ``requests_sent``: HTTP requests made (retries included)."""

    def __init__(self, base_url: str, api_key: Optional[str], email: Optional[str], tool: str, timeout_s: float,
                 max_retries: int, max_reply_bytes: int, max_retry_after_s: float) -> None:
        self.base_url = base_url
        self.api_key = api_key
        self.email = email
        self.tool = tool
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.max_retry_after_s = max_retry_after_s
        # the package's outbound policy with NCBI's settings: backoff 0.5 s, 1 s, 2 s, ... at most 8 s
        self.policy = OutboundPolicy(timeout_s=timeout_s, max_retries=max_retries, backoff_s=0.5, max_backoff_s=8.0,
                                     max_retry_after_s=max_retry_after_s, max_reply_bytes=max_reply_bytes)
        self.limiter = shared_limiter(base_url, api_key)
        self.requests_sent = 0
        self._count_lock = threading.Lock()
        self._transport = _Transport(f"{tool} (medretrieve)", self.policy.max_reply_bytes)

    def close(self) -> None:
        self._transport.close()

    def _params(self, params: Dict[str, Any]) -> Dict[str, Any]:
        out = dict(params, tool=self.tool)
        if self.email:
            out["email"] = self.email
        if self.api_key:
            out["api_key"] = self.api_key
        return out

    def _attempt(self, method: str, url: str, params: Dict[str, Any], clock: CallClock, what: str
                 ) -> Tuple[Optional[Reply], str]:
        """One try: the reply, or None and why it failed in a way a retry may fix."""
        import httpx

        with self.limiter.slot(clock.monotonic_end()):
            limit = self.policy.attempt_s(clock)
            if limit <= 0:
                raise PubMedTimeout(f"deadline: no time left for {what} after waiting for the rate limit")
            with self._count_lock:
                self.requests_sent += 1
            try:
                return self._transport.send(method, url, params, limit), ""
            except (asyncio.TimeoutError, concurrent.futures.TimeoutError, httpx.TimeoutException):
                if clock.remaining_s() <= 0.01:
                    raise PubMedTimeout(f"deadline: {what} did not finish within {clock.budget_ms:.0f} ms "
                                        "(connect, headers and body together)") from None
                return None, f"{what} did not finish within timeout_s={self.timeout_s:g} s"
            except httpx.HTTPError as exc:
                return None, f"cannot reach {url}: {type(exc).__name__}: {str(exc)[:200]}"

    def call(self, method: str, endpoint: str, params: Dict[str, Any], clock: CallClock, what: str) -> bytes:
        """One E-utilities call (``what`` names it in errors); returns the 200 reply's body."""
        url = self.base_url + endpoint
        full = self._params(params)
        last = ""
        for attempt in range(self.max_retries + 1):
            clock.check(what)
            reply, last = self._attempt(method, url, full, clock, what)
            asked: Optional[str] = None
            if reply is not None:
                if reply.status == 200:
                    return reply.body
                message = _error_text(reply)
                if reply.status not in _RETRY_STATUS:
                    raise PubMedHTTPError(reply.status, f"{what}: {message}")
                last = f"HTTP {reply.status} from {what}: {message}"
                asked = reply.headers.get("retry-after")
                retry_after_s(asked, what, reply.status)  # PubMedBadResponse when it cannot be read
            retry = self.policy.retry(attempt, clock, asked)
            if retry.why_not == "retry_after" and reply is not None and retry.asked_s is not None:
                raise PubMedRateLimited(reply.status, f"{what}: E-utilities asks to wait {retry.asked_s:.0f} s "
                                        f"before retrying, more than max_retry_after_s="
                                        f"{self.max_retry_after_s:g}", retry.asked_s)
            if retry.why_not == "retries":
                break
            if retry.wait_s is None:
                raise PubMedTimeout(f"deadline: {last}; the next try would start after the deadline")
            time.sleep(retry.wait_s)
        raise PubMedUnavailable(f"{last} (gave up after {self.max_retries + 1} tries)")
