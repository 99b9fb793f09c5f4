"""Clients of a medretrieve server (``medretrieve serve``), sync (:class:`Client`, over the lean keep-alive
transport of :mod:`.transport`) and async (:class:`AsyncClient`, over its asyncio twin, :mod:`.async_transport`). They return the library's own
records (:mod:`medretrieve.records`): ``search`` a :class:`~medretrieve.records.SearchResult`, ``answer`` an
:class:`~medretrieve.records.Answer`, and build their requests with the server's own request models
(:mod:`medretrieve.wire`), so a request the server would refuse as invalid is refused before it is sent
(:class:`~.errors.InvalidRequest` with ``status`` 0, naming the field). They load no engine: no native core, numpy
or encoders.

Failures raise the typed errors of :mod:`.errors`. 429 (shed) and 503 (still loading) are retried up to
``retries`` times after the server's Retry-After (a refused connection after a short backoff), unless the wait is
longer than ``max_retry_after_s`` or would not leave time before the call's ``deadline_ms``; a retried search
carries what is left of its deadline. Every attempt waits at most ``timeout_s`` seconds, and at most 1 s past
the call's deadline (a streamed answer: each read). Bodies are read and written with orjson.
"""
from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Type, TypeVar, Union

import httpx
import orjson
from pydantic import BaseModel, TypeAdapter, ValidationError

from ..filters import Filter
from ..outbound import Deadline, OutboundPolicy, RetryAfterError, parse_retry_after
from ..records import Answer, Hit, SearchResult
from ..wire import (DEFAULT_K, FILTER_OPTIONS, AnswerRequest, BatchSearchRequest, FacetsRequest, SearchOptions,
                    SearchOptionTypeError, SearchOptionValueError, SearchRequest, WordedQuestion, check_search_options,
                    field_errors)
from .errors import BadResponse, ClientError, InvalidRequest, Unavailable, error_for
from .async_transport import AsyncHttpxTransport, AsyncLeanTransport
from .http11 import ReplyCut, ReplyError
from .transport import REFUSED, TIMED_OUT, TRANSPORT_ERRORS, HttpxTransport, LeanTransport

_DEADLINE_GRACE_S = 1.0  # how long past a call's deadline the client still waits for the server's reply (s)
API_KEY_ENV = "MEDRETRIEVE_API_KEY"  # the key a client sends when it is given none


def _with_key(headers: Optional[Dict[str, str]], api_key: Optional[str]) -> Optional[Dict[str, str]]:
    """``headers`` plus ``Authorization: Bearer <key>``: ``api_key``, else ``$MEDRETRIEVE_API_KEY`` when it is
    set and ``headers`` has no Authorization of its own. ValueError for a key that cannot go in a header."""
    own = any(name.lower() == "authorization" for name in headers or {})
    if api_key is None:
        api_key = None if own else os.environ.get(API_KEY_ENV) or None
    elif own:
        raise ValueError("give the key as api_key or as an Authorization header, not both")
    if api_key is None:
        return headers
    if not isinstance(api_key, str) or not api_key.isascii() or not api_key.isprintable() or " " in api_key:
        raise ValueError(f"api_key must be the server's key as text (printable ASCII, no spaces); check "
                         f"api_key= or ${API_KEY_ENV}")
    return {**(headers or {}), "Authorization": f"Bearer {api_key}"}


@dataclass
class AnswerEvent:
    """One event of a streamed answer: ``evidence`` (``hits``), ``delta`` (a piece of ``text``), ``answer``."""

    kind: str
    hits: List[Hit] = field(default_factory=list)
    text: str = ""
    answer: Optional[Answer] = None


def _refused(errors: Any) -> InvalidRequest:
    first = field_errors(errors)[0]
    return InvalidRequest(f"refused before sending: {first['message']}", 0, "invalid_request", first["field"])


def _request(model: Type[BaseModel], **fields: Any) -> Dict[str, Any]:
    """The JSON body of a request: ``fields`` (those not None) checked by the server's own ``model`` (Python
    values as given: numpy integers pass), with only the fields given. InvalidRequest naming the field when the
    server would refuse it."""
    given = {name: value for name, value in fields.items() if value is not None}
    try:
        checked: BaseModel = model.model_validate(given, strict=False)
    except ValidationError as exc:
        raise _refused(exc.errors()) from None
    return checked.model_dump(mode="json", exclude_unset=True)


_QUESTION = TypeAdapter(WordedQuestion)
_SCALARS = (int, float, bool)
_CHECKED_OPTIONS: Dict[Tuple[Tuple[str, type, Any], ...], Dict[str, Any]] = {}  # by (name, type, value)s


def _search_body(question: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    """``_request(SearchRequest, question=question, **fields)``, cheaper when the options are plain numbers and
    switches (a service sends the same ``k`` and deadline again and again): the options are checked by
    ``SearchOptions`` once per distinct set and the question by ``WordedQuestion`` (SearchRequest is exactly the
    two, so the same rules and messages; a test holds them equal)."""
    given = {name: value for name, value in fields.items() if value is not None}
    if not all(type(value) in _SCALARS for value in given.values()):
        return _request(SearchRequest, question=question, **given)
    key = tuple((name, type(value), value) for name, value in given.items())
    options = _CHECKED_OPTIONS.get(key)
    if options is None:
        options = _request(SearchOptions, **given)
        if len(_CHECKED_OPTIONS) >= 256:  # bounded: a caller that varies its deadline on every call
            _CHECKED_OPTIONS.clear()
        _CHECKED_OPTIONS[key] = options
    try:
        checked = _QUESTION.validate_python(question)
    except ValidationError as exc:
        raise _refused([{**e, "loc": ("question", *e["loc"])} for e in exc.errors()]) from None
    return {"question": checked, **options}


def _checked_fields(questions: Sequence[Any], k: int, deadline_ms: Optional[float], per_document: Optional[int],
                    sections: Optional[Sequence[str]], explain: bool, stages: Dict[str, Any]) -> Dict[str, Any]:
    """:func:`_search_fields`, once the options are checked by the search request's declaration
    (:func:`medretrieve.wire.check_search_options`), as ``Retriever.search`` checks them: an unknown (misspelt)
    option or a value of the wrong type (``k="5"``, ``k=True``, ``deadline_ms="300"``) raises a TypeError naming
    it, one out of bounds :class:`~.errors.InvalidRequest` (a ValueError, ``status`` 0) naming its field; nothing
    is sent either way. A question that is not a string is a TypeError too (its words are checked with the
    request)."""
    for question in questions:
        if not isinstance(question, str):
            raise SearchOptionTypeError(f"question must be a string, got {type(question).__name__}", "question")
    if not isinstance(explain, bool):
        raise TypeError(f"explain must be true or false (a bool), got {explain!r}")
    try:
        check_search_options({"k": k, "deadline_ms": deadline_ms, "per_document": per_document, "sections": sections,
                              **stages})
    except SearchOptionValueError as exc:
        raise InvalidRequest(f"refused before sending: {exc}", 0, "invalid_request", exc.option) from None
    return _search_fields(k, deadline_ms, per_document, sections, explain, stages)


def _filter_options(where: Any, include_retracted: Optional[bool], evidence_prior: Optional[bool],
                    recency_half_life: Optional[float]) -> Dict[str, Any]:
    """The metadata options given: the filter (``where``: its text or JSON form, a parsed filter sent as its
    text), retracted articles, the priors."""
    given = {"where": where, "include_retracted": include_retracted, "evidence_prior": evidence_prior,
             "recency_half_life": recency_half_life}
    return {name: value for name, value in given.items() if value is not None}


def _search_fields(k: int, deadline_ms: Optional[float], per_document: Optional[int],
                   sections: Optional[Sequence[str]], explain: bool, stages: Dict[str, Any]) -> Dict[str, Any]:
    # (the options beside the stage switches travel at the top of the body, as the declaration places them)
    fields = {name: stages[name] for name in FILTER_OPTIONS if name in stages}
    switches = {name: value for name, value in stages.items() if name not in FILTER_OPTIONS}
    if isinstance(fields.get("where"), Filter):
        fields["where"] = fields["where"].text()
    return {"k": k, "deadline_ms": deadline_ms, "per_document": per_document,
            "sections": None if sections is None else list(sections), "explain": explain or None,
            "stages": switches or None, **fields}


def _facets_body(fields: Sequence[str], where: Any, include_retracted: Optional[bool], top: Optional[int]
                 ) -> Dict[str, Any]:
    if isinstance(fields, str):
        raise TypeError(f"fields must be a list of field names, got the string {fields!r}")
    return _request(FacetsRequest, fields=list(fields), where=where.text() if isinstance(where, Filter) else where,
                    include_retracted=include_retracted, top=top)


def _answer_body(question: str, k: int, deadline_ms: Optional[float], qtype: Optional[str], mode: str,
                 max_tokens: int, stream: bool, explain: bool, filters: Dict[str, Any]) -> Dict[str, Any]:
    """The body of ``POST /v1/answer``; ``filters``: :func:`_filter_options`, checked as a search's are (a wrong
    type a TypeError, a bad value InvalidRequest, both naming the option; nothing sent)."""
    try:
        checked = check_search_options(filters)
    except SearchOptionValueError as exc:
        raise InvalidRequest(f"refused before sending: {exc}", 0, "invalid_request", exc.option) from None
    if isinstance(checked.get("where"), Filter):
        checked["where"] = checked["where"].text()
    return _request(AnswerRequest, question=question, k=k, deadline_ms=deadline_ms, qtype=qtype, mode=mode,
                    max_tokens=max_tokens, stream=stream or None, explain=explain or None, **checked)


def _encoded(body: Optional[Dict[str, Any]]) -> Optional[bytes]:
    return None if body is None else orjson.dumps(body)


def _server_timing(header: str) -> Dict[str, float]:
    """``queue;dur=0.01, work;dur=20.5, total;dur=21.2`` as ``{"queue": 0.01, ...}`` (ms; malformed parts
    skipped)."""
    out: Dict[str, float] = {}
    for part in header.split(","):
        name, _, value = part.strip().partition(";dur=")
        try:
            out[name] = float(value)
        except ValueError:
            continue
    return out


def _retry_after(response: Any) -> Optional[float]:
    """The reply's Retry-After (s) by the package's one rule (:func:`medretrieve.outbound.parse_retry_after`);
    None when it has none or one that cannot be read."""
    try:
        return parse_retry_after(response.headers.get("Retry-After"))
    except RetryAfterError:
        return None


def _parsed(response: Any) -> Any:
    """The JSON of a 2xx response (an ``httpx.Response`` or a :class:`.transport.Reply`); the typed error of any
    other."""
    try:
        body: Any = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        body = response.text
    if response.is_success:
        return body
    raise error_for(response.status_code, body, _retry_after(response))


_Made = TypeVar("_Made")


def _decoded(make: Callable[[Any], _Made], data: Any, what: str) -> _Made:
    """``make(data)``: the records of a success reply (``what``: the endpoint); BadResponse when the reply is not
    the API's (a proxy's page, another service's JSON) instead of the bare error its shape would raise."""
    try:
        return make(data)
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
        raise BadResponse(f"the reply of {what} is not the medretrieve API's ({type(exc).__name__}: "
                          f"{str(exc)[:200]})", 200) from None


def _search_results(data: Any) -> List[SearchResult]:
    return [SearchResult.from_dict(r) for r in data["results"]]


class _SSE:
    """Server-sent events, line by line: :meth:`feed` returns ``(event, data)`` when a blank line ends one."""

    def __init__(self) -> None:
        self.event = "message"
        self.data: List[str] = []

    def feed(self, line: str) -> Optional[Tuple[str, Any]]:
        if line.startswith("event:"):
            self.event = line[6:].strip()
        elif line.startswith("data:"):
            self.data.append(line[5:].strip())
        elif not line and self.data:
            out = (self.event, orjson.loads("\n".join(self.data)))
            self.event, self.data = "message", []
            return out
        return None


def _answer_event(kind: str, data: Any) -> AnswerEvent:
    if kind == "evidence":
        return AnswerEvent(kind, hits=[Hit.from_dict(h) for h in data["hits"]])
    if kind == "delta":
        return AnswerEvent(kind, text=str(data["text"]))
    if kind == "answer":
        return AnswerEvent(kind, answer=Answer.from_dict(data))
    raise error_for(500, data, None)  # an "error" event: the failure after the stream began


class _AnswerStream:
    """The events of a streamed answer, line by line: BadResponse when the reply is not the API's stream,
    Unavailable when it ends before its ``answer`` event (the connection was cut)."""

    def __init__(self, response: Any) -> None:
        kind = response.headers.get("content-type", "")
        if not kind.startswith("text/event-stream"):
            raise BadResponse(f"the reply of /v1/answer is not the medretrieve API's (stream=true got "
                              f"{kind or 'no content type'}, not text/event-stream)", response.status_code)
        self.sse = _SSE()
        self.answered = False

    def feed(self, line: str) -> Optional[AnswerEvent]:
        event = _decoded(self.sse.feed, line, "/v1/answer")
        if event is None:
            return None
        made = _decoded(lambda e: _answer_event(*e), event, "/v1/answer")
        self.answered = made.kind == "answer"
        return made

    def end(self) -> None:
        if not self.answered:
            raise Unavailable("the answer stream ended before its answer event (the connection was cut)")


class _Base:
    """What both clients share: settings, request bodies, and the retry decision."""

    def __init__(self, url: str, timeout_s: float, retries: int, max_retry_after_s: float) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"url must be an http(s) URL like http://127.0.0.1:8000, got {url!r}")
        if not timeout_s > 0 or retries < 0 or max_retry_after_s < 0:
            raise ValueError("timeout_s must be > 0 s, retries >= 0 and max_retry_after_s >= 0 s")
        self.url = url.rstrip("/")
        self.timeout_s = float(timeout_s)
        self.retries = int(retries)
        self.max_retry_after_s = float(max_retry_after_s)
        # the package's outbound policy with the client's settings: a refused connection is retried after
        # 0.05 s, 0.1 s, ... (the server may be starting); a 429 / 503 after its Retry-After
        self.policy = OutboundPolicy(timeout_s=self.timeout_s, max_retries=self.retries, backoff_s=0.05,
                                     max_backoff_s=1.0, max_retry_after_s=self.max_retry_after_s)
        # the last response's Server-Timing (ms by name: queue, work, total; {} when it had none): round trip
        # minus "total" is what the HTTP door cost (with several threads or tasks: whichever response came last)
        self.last_server_timing: Dict[str, float] = {}

    def _note(self, outcome: Any) -> None:
        """Keep a response's Server-Timing (see ``last_server_timing``)."""
        if not isinstance(outcome, BaseException):
            self.last_server_timing = _server_timing(outcome.headers.get("Server-Timing") or "")

    def _retries(self, body: Optional[Dict[str, Any]], deadline_ms: Optional[float]) -> "_Retries":
        return _Retries(self, body, deadline_ms)


class _Retries:
    """The attempts of one call (see the module docstring): :meth:`attempt` gives the next body and timeout,
    :meth:`wait_after` what to do with what came back."""

    def __init__(self, client: _Base, body: Optional[Dict[str, Any]], deadline_ms: Optional[float]) -> None:
        self.client = client
        self.body = body
        self.clock = Deadline(deadline_ms)
        self.attempts = 0
        self.timeout_s = client.timeout_s

    def attempt(self) -> Tuple[Optional[Dict[str, Any]], float]:
        """The body of the next attempt (with what is left of the deadline) and its timeout (s)."""
        self.attempts += 1
        if self.clock.unlimited:
            return self.body, self.timeout_s
        left_ms = self.clock.remaining_ms()
        body = self.body
        if body is not None and "deadline_ms" in body:
            body = {**body, "deadline_ms": max(left_ms, 1.0)}
        self.timeout_s = min(self.client.timeout_s, max(left_ms / 1000.0, 0.0) + _DEADLINE_GRACE_S)
        return body, self.timeout_s

    def wait_after(self, outcome: Any) -> Optional[float]:
        """Seconds to wait before the next attempt, or None when ``outcome`` (a response) is final. A transport
        error: retried after a short backoff when the connection was refused, else raised as Unavailable (or
        BadResponse: a reply that is not HTTP/1.1 the client can read)."""
        if isinstance(outcome, Exception):
            if not isinstance(outcome, REFUSED):
                raise self.unreachable(outcome) from outcome
            header = None
        elif outcome.status_code in (429, 503):
            header = outcome.headers.get("Retry-After")
        else:
            return None
        try:
            wait = self.client.policy.retry(self.attempts - 1, self.clock, header).wait_s
        except RetryAfterError:  # a Retry-After that cannot be read counts as none
            wait = self.client.policy.retry(self.attempts - 1, self.clock).wait_s
        if wait is None and isinstance(outcome, Exception):
            raise self.unreachable(outcome) from outcome
        return wait

    def unreachable(self, exc: BaseException) -> ClientError:
        """The typed error of an attempt that got no reply: Unavailable (timed out, no connection), or
        BadResponse when what came back is not HTTP/1.1 the client can read (a head over its limits)."""
        if isinstance(exc, ReplyError) and not isinstance(exc, ReplyCut):
            return BadResponse(f"the reply is not one the client can read: {exc}")
        if isinstance(exc, TIMED_OUT):
            return Unavailable(f"no reply within {self.timeout_s:.2f} s ({type(exc).__name__})")
        return Unavailable(f"cannot reach the server: {type(exc).__name__}: {exc}")

    def broken(self, exc: BaseException, status: int) -> ClientError:
        """The typed error of a reply that broke while its body was read (a stream that began): Unavailable when
        the connection was cut, reset or went quiet for the attempt's timeout, BadResponse when its bytes are
        not HTTP/1.1 or not UTF-8 (``status``: the reply's)."""
        if isinstance(exc, ReplyError) and not isinstance(exc, ReplyCut):
            return BadResponse(f"the reply broke off unreadable: {exc}", status)
        if isinstance(exc, TIMED_OUT):
            return Unavailable(f"no reply within {self.timeout_s:.2f} s: the reply stopped coming "
                               f"({type(exc).__name__})")
        return Unavailable(f"the reply broke off: {type(exc).__name__}: {exc}")


class Client(_Base):
    """A blocking client (see the module docstring): ``Client("http://127.0.0.1:8000").search("...")``.

    ``timeout_s``: the longest wait for one reply (s); ``retries``: attempts after a 429 / 503 / refused
    connection; ``max_retry_after_s``: a longer Retry-After is not waited for. ``api_key``: the server's API key,
    sent as ``Authorization: Bearer`` (default: ``$MEDRETRIEVE_API_KEY`` when set; a refused key raises
    :class:`~.errors.Unauthorized` or, lacking the call's scope, :class:`~.errors.Forbidden`); ``headers``: sent
    with every request. ``transport``: an httpx transport
    (tests, or ``httpx.WSGITransport``-style in-process use); without one, an ``http://`` server is reached over
    keep-alive connections on plain sockets (:class:`.transport.LeanTransport`), an ``https://`` one over httpx.
    """

    def __init__(self, url: str, *, timeout_s: float = 10.0, retries: int = 2, max_retry_after_s: float = 5.0,
                 api_key: Optional[str] = None, headers: Optional[Dict[str, str]] = None,
                 transport: Optional[httpx.BaseTransport] = None) -> None:
        super().__init__(url, timeout_s, retries, max_retry_after_s)
        headers = _with_key(headers, api_key)
        self._http: Union[LeanTransport, HttpxTransport] = (
            LeanTransport(self.url, headers) if transport is None and self.url.startswith("http://")
            else HttpxTransport(self.url, headers, transport))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _send(self, method: str, path: str, body: Optional[Dict[str, Any]] = None,
              deadline_ms: Optional[float] = None, stream: bool = False,
              retries: Optional[_Retries] = None) -> Any:
        """The final response (retried as the module docstring says); with ``stream``, unread and open.
        ``retries``: the call's attempts (its timeout maps a stream's later failures: :meth:`_Retries.broken`)."""
        retries = retries or self._retries(body, deadline_ms)
        while True:
            sent, timeout = retries.attempt()
            try:
                outcome: Any = self._http.send(method, path, _encoded(sent), timeout, stream)
            except TRANSPORT_ERRORS as exc:
                outcome = exc
            self._note(outcome)
            wait = retries.wait_after(outcome)
            if wait is None:
                return outcome
            if not isinstance(outcome, Exception):
                outcome.close()
            time.sleep(wait)

    def _call(self, method: str, path: str, body: Optional[Dict[str, Any]] = None,
              deadline_ms: Optional[float] = None) -> Any:
        return _parsed(self._send(method, path, body, deadline_ms))

    def search(self, question: str, k: int = DEFAULT_K, *, deadline_ms: Optional[float] = None,
               per_document: Optional[int] = None, sections: Optional[Sequence[str]] = None,
               where: Any = None, include_retracted: Optional[bool] = None,
               evidence_prior: Optional[bool] = None, recency_half_life: Optional[float] = None,
               explain: bool = False, **stages: bool) -> SearchResult:
        """``Retriever.search`` on the server: the best ``k`` chunks within ``deadline_ms`` (ms, queueing on the
        server included; None: the server's default). ``stages``: switches by their stage-log names, such as
        ``rerank=False`` (:data:`medretrieve.wire.STAGE_SWITCHES`; not given: the server retriever's setting);
        ``explain``: each stage's reason and each hit's per-stage scores too (a compact result without).
        ``where``: a metadata filter (text or JSON form, :mod:`medretrieve.filters`; the server refuses a field its
        collection lacks), ``include_retracted``: keep retracted articles; ``evidence_prior``,
        ``recency_half_life`` (years): priors on the order. The options are checked before anything
        is sent, as ``Retriever.search`` checks them (:func:`_checked_fields`)."""
        body = _search_body(question, _checked_fields([question], k, deadline_ms, per_document, sections, explain,
                                                       {**stages, **_filter_options(where, include_retracted, evidence_prior, recency_half_life)}))
        return _decoded(SearchResult.from_dict, self._call("POST", "/v1/search", body, deadline_ms), "/v1/search")

    def search_batch(self, questions: Sequence[str], k: int = DEFAULT_K, *, deadline_ms: Optional[float] = None,
                     per_document: Optional[int] = None, sections: Optional[Sequence[str]] = None,
                     where: Any = None, include_retracted: Optional[bool] = None,
                     evidence_prior: Optional[bool] = None, recency_half_life: Optional[float] = None,
                     explain: bool = False, **stages: bool) -> List[SearchResult]:
        """Several questions with the same options and one deadline for them all (one result per question)."""
        listed = list(questions)
        body = _request(BatchSearchRequest, questions=listed,
                        **_checked_fields(listed, k, deadline_ms, per_document, sections, explain,
                                         {**stages, **_filter_options(where, include_retracted, evidence_prior, recency_half_life)}))
        return _decoded(_search_results, self._call("POST", "/v1/search:batch", body, deadline_ms),
                        "/v1/search:batch")

    def facets(self, fields: Sequence[str], *, where: Any = None, include_retracted: Optional[bool] = None,
               top: Optional[int] = None) -> Dict[str, Any]:
        """``POST /v1/facets`` (``Retriever.facets`` on the server): ``{"documents": n, "facets": {field:
        [{"value", "count"}, ...]}}`` over the collection's documents passing ``where``, most frequent first."""
        return self._call("POST", "/v1/facets", _facets_body(fields, where, include_retracted, top))

    def answer(self, question: str, k: int = 10, *, deadline_ms: Optional[float] = None,
               qtype: Optional[str] = None, mode: str = "cite", max_tokens: int = 512,
               where: Any = None, include_retracted: Optional[bool] = None,
               evidence_prior: Optional[bool] = None, recency_half_life: Optional[float] = None,
               explain: bool = False) -> Answer:
        """A grounded answer (``Answerer.answer`` on the server: generated by its LLM, else extractive; an LLM
        failure is in ``Answer.error``). ``where``, ``include_retracted``, ``evidence_prior``,
        ``recency_half_life`` (years): the evidence's search options, as :meth:`search` takes them."""
        body = _answer_body(question, k, deadline_ms, qtype, mode, max_tokens, False, explain,
                            _filter_options(where, include_retracted, evidence_prior, recency_half_life))
        return _decoded(Answer.from_dict, self._call("POST", "/v1/answer", body, deadline_ms), "/v1/answer")

    def stream_answer(self, question: str, k: int = 10, *, deadline_ms: Optional[float] = None,
                      qtype: Optional[str] = None, mode: str = "cite", max_tokens: int = 512,
                      where: Any = None, include_retracted: Optional[bool] = None,
                      evidence_prior: Optional[bool] = None, recency_half_life: Optional[float] = None,
                      explain: bool = False) -> Iterator[AnswerEvent]:
        """The answer as it is made: an ``evidence`` event, ``delta`` events, then the ``answer`` (the options:
        :meth:`answer`'s). Closing the iterator early (or leaving its loop) closes the connection, which cancels
        the generation on the server."""
        body = _answer_body(question, k, deadline_ms, qtype, mode, max_tokens, True, explain,
                            _filter_options(where, include_retracted, evidence_prior, recency_half_life))
        retries = self._retries(body, deadline_ms)
        response = self._send("POST", "/v1/answer", body, deadline_ms, stream=True, retries=retries)
        stream: Optional[_AnswerStream] = None
        try:
            try:  # every read of the body, not only the first send, maps its failures to typed errors
                if not response.is_success:
                    response.read()
                    _parsed(response)
                stream = _AnswerStream(response)
                for line in response.iter_lines():
                    event = stream.feed(line)
                    if event is not None:
                        yield event
                stream.end()
            except TRANSPORT_ERRORS as exc:
                if stream is None or not stream.answered:  # after the answer, only the body's end was lost
                    raise retries.broken(exc, response.status_code) from exc
        finally:
            response.close()

    def collection(self) -> Dict[str, Any]:
        """Size, models, index and build info of the served collection."""
        return self._call("GET", "/v1/collection")

    def health(self) -> Dict[str, Any]:
        return self._call("GET", "/healthz")

    def ready(self) -> bool:
        """Whether the server answers searches (no retry: a loading server answers False; an unreachable one
        raises Unavailable)."""
        try:
            return self._http.send("GET", "/readyz", None, self.timeout_s).status_code == 200
        except TRANSPORT_ERRORS as exc:
            raise self._retries(None, None).unreachable(exc) from exc

    def metrics(self) -> str:
        """The Prometheus text of ``/metrics``."""
        response = self._send("GET", "/metrics")
        if not response.is_success:
            _parsed(response)
        return response.text

    def reload(self) -> Dict[str, Any]:
        """Ask the server to load its collection again (it must run with ``--enable-reload``)."""
        return self._call("POST", "/v1/admin/reload")


class AsyncClient(_Base):
    """The asyncio twin of :class:`Client` (same arguments, same methods, awaited)."""

    def __init__(self, url: str, *, timeout_s: float = 10.0, retries: int = 2, max_retry_after_s: float = 5.0,
                 api_key: Optional[str] = None, headers: Optional[Dict[str, str]] = None,
                 transport: Optional[httpx.AsyncBaseTransport] = None) -> None:
        super().__init__(url, timeout_s, retries, max_retry_after_s)
        headers = _with_key(headers, api_key)
        self._http: Union[AsyncLeanTransport, AsyncHttpxTransport] = (
            AsyncLeanTransport(self.url, headers) if transport is None and self.url.startswith("http://")
            else AsyncHttpxTransport(self.url, headers, transport))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def _send(self, method: str, path: str, body: Optional[Dict[str, Any]] = None,
                    deadline_ms: Optional[float] = None, stream: bool = False,
                    retries: Optional[_Retries] = None) -> Any:
        """The final response (retried as the module docstring says); with ``stream``, unread and open.
        ``retries``: the call's attempts (its timeout maps a stream's later failures: :meth:`_Retries.broken`)."""
        retries = retries or self._retries(body, deadline_ms)
        while True:
            sent, timeout = retries.attempt()
            try:
                outcome: Any = await self._http.send(method, path, _encoded(sent), timeout, stream)
            except TRANSPORT_ERRORS as exc:
                outcome = exc
            self._note(outcome)
            wait = retries.wait_after(outcome)
            if wait is None:
                return outcome
            if not isinstance(outcome, Exception):
                await outcome.aclose()
            await asyncio.sleep(wait)

    async def _call(self, method: str, path: str, body: Optional[Dict[str, Any]] = None,
                    deadline_ms: Optional[float] = None) -> Any:
        return _parsed(await self._send(method, path, body, deadline_ms))

    async def search(self, question: str, k: int = DEFAULT_K, *, deadline_ms: Optional[float] = None,
                     per_document: Optional[int] = None, sections: Optional[Sequence[str]] = None,
                     where: Any = None, include_retracted: Optional[bool] = None,
                     evidence_prior: Optional[bool] = None, recency_half_life: Optional[float] = None,
                     explain: bool = False, **stages: bool) -> SearchResult:
        body = _search_body(question, _checked_fields([question], k, deadline_ms, per_document, sections, explain,
                                                       {**stages, **_filter_options(where, include_retracted, evidence_prior, recency_half_life)}))
        return _decoded(SearchResult.from_dict, await self._call("POST", "/v1/search", body, deadline_ms),
                        "/v1/search")

    async def search_batch(self, questions: Sequence[str], k: int = DEFAULT_K, *,
                           deadline_ms: Optional[float] = None,
                           per_document: Optional[int] = None, sections: Optional[Sequence[str]] = None,
                           where: Any = None, include_retracted: Optional[bool] = None,
                           evidence_prior: Optional[bool] = None, recency_half_life: Optional[float] = None,
                           explain: bool = False, **stages: bool) -> List[SearchResult]:
        listed = list(questions)
        body = _request(BatchSearchRequest, questions=listed,
                        **_checked_fields(listed, k, deadline_ms, per_document, sections, explain,
                                         {**stages, **_filter_options(where, include_retracted, evidence_prior, recency_half_life)}))
        return _decoded(_search_results, await self._call("POST", "/v1/search:batch", body, deadline_ms),
                        "/v1/search:batch")

    async def facets(self, fields: Sequence[str], *, where: Any = None, include_retracted: Optional[bool] = None,
                     top: Optional[int] = None) -> Dict[str, Any]:
        """:meth:`Client.facets`, awaited."""
        return await self._call("POST", "/v1/facets", _facets_body(fields, where, include_retracted, top))

    async def answer(self, question: str, k: int = 10, *, deadline_ms: Optional[float] = None,
                     qtype: Optional[str] = None, mode: str = "cite", max_tokens: int = 512,
                     where: Any = None, include_retracted: Optional[bool] = None,
                     evidence_prior: Optional[bool] = None, recency_half_life: Optional[float] = None,
                     explain: bool = False) -> Answer:
        """:meth:`Client.answer`, awaited."""
        body = _answer_body(question, k, deadline_ms, qtype, mode, max_tokens, False, explain,
                            _filter_options(where, include_retracted, evidence_prior, recency_half_life))
        return _decoded(Answer.from_dict, await self._call("POST", "/v1/answer", body, deadline_ms), "/v1/answer")

    async def stream_answer(self, question: str, k: int = 10, *, deadline_ms: Optional[float] = None,
                            qtype: Optional[str] = None, mode: str = "cite", max_tokens: int = 512,
                            where: Any = None, include_retracted: Optional[bool] = None,
                            evidence_prior: Optional[bool] = None, recency_half_life: Optional[float] = None,
                            explain: bool = False) -> AsyncIterator[AnswerEvent]:
        """:meth:`Client.stream_answer`, as an async iterator."""
        body = _answer_body(question, k, deadline_ms, qtype, mode, max_tokens, True, explain,
                            _filter_options(where, include_retracted, evidence_prior, recency_half_life))
        retries = self._retries(body, deadline_ms)
        response = await self._send("POST", "/v1/answer", body, deadline_ms, stream=True, retries=retries)
        stream: Optional[_AnswerStream] = None
        try:
            try:  # every read of the body, not only the first send, maps its failures to typed errors
                if not response.is_success:
                    await response.aread()
                    _parsed(response)
                stream = _AnswerStream(response)
                async for line in response.aiter_lines():
                    event = stream.feed(line)
                    if event is not None:
                        yield event
                stream.end()
            except TRANSPORT_ERRORS as exc:
                if stream is None or not stream.answered:  # after the answer, only the body's end was lost
                    raise retries.broken(exc, response.status_code) from exc
        finally:
            await response.aclose()

    async def collection(self) -> Dict[str, Any]:
        return await self._call("GET", "/v1/collection")

    async def health(self) -> Dict[str, Any]:
        return await self._call("GET", "/healthz")

    async def ready(self) -> bool:
        try:
            return (await self._http.send("GET", "/readyz", None, self.timeout_s)).status_code == 200
        except TRANSPORT_ERRORS as exc:
            raise self._retries(None, None).unreachable(exc) from exc

    async def metrics(self) -> str:
        response = await self._send("GET", "/metrics")
        if not response.is_success:
            _parsed(response)
        return response.text

    async def reload(self) -> Dict[str, Any]:
        return await self._call("POST", "/v1/admin/reload")
