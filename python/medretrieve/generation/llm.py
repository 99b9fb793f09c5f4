"""LLM backends behind one small interface.

``backend.generate(messages, *, max_tokens=512, temperature=0.0, deadline_ms=None,
response_format=None) -> str`` where ``messages`` is a chat list of
``{"role": "system"|"user"|"assistant", "content": str}``.

- :class:`OpenAIBackend` talks to any OpenAI-compatible chat-completions
  server (vLLM, OpenAI, llama.cpp's server, Ollama) over ``httpx``.
- :class:`TransformersBackend` runs a small local Hugging Face model
  (optional extra: torch + transformers, imported only when it is built).

Failures are typed: :class:`LLMTimeout` (deadline or per-request timeout),
:class:`LLMUnavailable` (refused connection, 5xx / 429 after retries, auth),
:class:`LLMBadResponse` (malformed reply, rejected request) and its subclass
:class:`LLMContextTooLong` (prompt + max_tokens exceed the model context).
All derive from :class:`LLMError` so callers can report them in one place.
"""
from __future__ import annotations

import json
import os
import re
import threading
import time
from typing import Any, Callable, Iterator, Optional, Protocol, Sequence, Union, runtime_checkable

from ..outbound import Deadline, OutboundPolicy, RetryAfterError

__all__ = [
    "Backend",
    "StreamingBackend",
    "LLMError",
    "LLMTimeout",
    "LLMUnavailable",
    "LLMBadResponse",
    "LLMContextTooLong",
    "LLMCancelled",
    "Cancel",
    "OpenAIBackend",
    "TransformersBackend",
    "check_messages",
    "normalize_response_format",
]

ResponseFormat = Union[None, str, dict]


class LLMError(RuntimeError):
    """Base class of every backend failure."""


class LLMTimeout(LLMError):
    """The deadline (or the per-request timeout) ran out before a reply came."""


class LLMUnavailable(LLMError):
    """The server cannot be used now: refused connection, 5xx/429 after retries, auth failure."""


class LLMBadResponse(LLMError):
    """The server replied with something unusable, or rejected the request as invalid."""


class LLMContextTooLong(LLMBadResponse):
    """The prompt plus ``max_tokens`` does not fit in the model's context window."""


class LLMCancelled(LLMError):
    """The caller cancelled the generation (:class:`Cancel`), e.g. because its own client went away."""


class Cancel:
    """A cancellation signal for a generation, set from any thread (:meth:`set`): a backend that takes one
    (``OpenAIBackend.stream(..., cancel=...)``) stops reading and closes its upstream request at once, even while
    it waits for the next piece, and raises :class:`LLMCancelled`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._set = False
        self._hooks: list = []

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        """Cancel: run every registered hook once (in this thread; they only close sockets)."""
        with self._lock:
            if self._set:
                return
            self._set = True
            hooks, self._hooks = self._hooks, []
        for hook in hooks:
            hook()

    def on_set(self, hook: Callable[[], None]) -> Callable[[], None]:
        """Run ``hook`` when cancelled (now, when already cancelled); returns a function that unregisters it."""
        with self._lock:
            if not self._set:
                self._hooks.append(hook)
                return lambda: self._forget(hook)
        hook()
        return lambda: None

    def _forget(self, hook: Callable[[], None]) -> None:
        with self._lock:
            if hook in self._hooks:
                self._hooks.remove(hook)


@runtime_checkable
class Backend(Protocol):
    """What the generation pipeline needs from an LLM."""

    def generate(
        self,
        messages: Sequence[dict],
        *,
        max_tokens: int = 512,
        temperature: float = 0.0,
        deadline_ms: Optional[float] = None,
        response_format: ResponseFormat = None,
    ) -> str: ...


@runtime_checkable
class StreamingBackend(Backend, Protocol):
    """A backend that can also hand its reply over piece by piece, and be cancelled from another thread (the
    HTTP server streams answers through it and cancels the generation when its client goes away). ``options``
    are :meth:`generate`'s keyword arguments."""

    def stream(self, messages: Sequence[dict], *, cancel: Optional["Cancel"] = None,
               **options: Any) -> Iterator[str]: ...


_ROLES = ("system", "user", "assistant")


def check_messages(messages: Sequence[dict]) -> list[dict]:
    """Validate a chat message list; returns plain ``{"role", "content"}`` dicts.

    Raises ``TypeError``/``ValueError`` naming the offending message.
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise TypeError("messages must be a list of {'role', 'content'} dicts")
    if not messages:
        raise ValueError("messages is empty")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise TypeError(f"messages[{i}] must be a dict, got {type(m).__name__}")
        role, content = m.get("role"), m.get("content")
        if role not in _ROLES:
            raise ValueError(f"messages[{i}]['role'] must be one of {_ROLES}, got {role!r}")
        if not isinstance(content, str):
            raise TypeError(f"messages[{i}]['content'] must be a str, got {type(content).__name__}")
        out.append({"role": role, "content": content})
    return out


def _checked_request(messages: Sequence[dict], max_tokens: int, temperature: float, deadline_ms: Optional[float],
                     response_format: ResponseFormat) -> tuple:
    """Every backend's ``generate`` arguments, validated: ``(messages, response format dict or None)``."""
    msgs = check_messages(messages)
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise ValueError(f"max_tokens must be a positive int, got {max_tokens!r}")
    if not isinstance(temperature, (int, float)) or not 0.0 <= temperature <= 2.0:
        raise ValueError(f"temperature must be in [0, 2], got {temperature!r}")
    if deadline_ms is not None and (not isinstance(deadline_ms, (int, float)) or deadline_ms != deadline_ms):
        raise ValueError(f"deadline_ms must be a number of ms or None, got {deadline_ms!r}")
    return msgs, normalize_response_format(response_format)


def normalize_response_format(response_format: ResponseFormat) -> Optional[dict]:
    """``"json"`` -> ``{"type": "json_object"}``; a dict passes through (e.g. a
    ``{"type": "json_schema", "json_schema": {...}}``); ``None``/``"text"`` -> None."""
    if response_format is None or response_format == "text":
        return None
    if response_format == "json":
        return {"type": "json_object"}
    if isinstance(response_format, dict) and isinstance(response_format.get("type"), str):
        return response_format
    raise ValueError(
        f"response_format must be None, 'text', 'json' or a dict with a 'type', got {response_format!r}"
    )


# Phrases servers use for an over-long prompt (OpenAI, vLLM, llama.cpp, Ollama, TGI).
_CONTEXT_PATTERNS = re.compile(
    r"context[_ ]length|maximum context|context window|context[_ ]size|exceeds? (the )?(model'?s? )?context|"
    r"too many tokens|exceeds token limit|prompt is too long|input is too long|max_model_len|n_ctx",
    re.IGNORECASE,
)


def _deadline(deadline_ms: Optional[float]) -> Deadline:
    """The call's deadline (``deadline_ms`` checked by :func:`_checked_request`; one already negative: expired)."""
    return Deadline(None if deadline_ms is None else max(float(deadline_ms), 0.0))


class _Reply:
    """A reply read whole within its time limit and size cap: status, headers and the decoded body."""

    def __init__(self, status_code: int, headers: Any, content: bytes, where: str) -> None:
        self.status_code = status_code
        self.headers = headers
        self.content = content
        self._where = where

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body as JSON; LLMBadResponse (never RecursionError) for anything else."""
        try:
            return json.loads(self.content)
        except RecursionError:
            raise LLMBadResponse(f"LLM server {self._where} sent JSON nested too deeply to read") from None
        except ValueError as exc:
            raise LLMBadResponse(f"LLM server {self._where} sent a reply that is not JSON: "
                                 f"{self.text[:200]!r}") from exc


def _read_body(response: Any, attempt: Deadline, max_bytes: int, where: str) -> bytes:
    """The decoded body of a streamed httpx ``response``, read before the ``attempt``'s deadline and at most
    ``max_bytes`` long (after decompression: a small gzip body may expand to gigabytes).

    Why a watchdog: httpx's timeouts bound each read, not the whole body, so a server that trickles a byte every
    half second would hold the call for as long as it likes; at the deadline the watchdog shuts the socket down,
    which wakes the blocked read. gzip and deflate are decoded here, in bounded steps.
    """
    import zlib

    encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("identity", "", "gzip", "x-gzip", "deflate"):
        raise LLMBadResponse(f"LLM server {where} sent a body in an encoding medretrieve does not accept: {encoding}")
    decoder = None if encoding in ("identity", "") else zlib.decompressobj(
        zlib.MAX_WBITS | 16 if "gzip" in encoding else zlib.MAX_WBITS)
    timed_out = threading.Event()

    def abort() -> None:
        timed_out.set()
        _shut_down(response)

    watchdog = threading.Timer(max(0.0, attempt.remaining_s()), abort)
    watchdog.daemon = True
    watchdog.start()
    out = bytearray()
    try:
        for raw in response.iter_raw():
            data = raw
            if decoder is not None:
                data = decoder.decompress(raw, max_bytes + 1 - len(out))
            out += data
            if len(out) > max_bytes or (decoder is not None and decoder.unconsumed_tail):
                raise LLMBadResponse(f"LLM server {where} sent a reply over max_response_bytes={max_bytes}")
            if timed_out.is_set():
                break
    except zlib.error as exc:
        raise LLMBadResponse(f"LLM server {where} sent a body that is not valid {encoding}: {exc}") from None
    except Exception as exc:
        if not timed_out.is_set() or isinstance(exc, LLMBadResponse):
            raise
    finally:
        watchdog.cancel()
    if timed_out.is_set():
        raise LLMTimeout(f"LLM server {where} had not finished its reply ({len(out)} bytes so far) by the deadline")
    return bytes(out)


def _shut_down(response: Any) -> None:
    """Shut an open httpx response's socket down from any thread: a read blocked on it in another thread wakes
    with an error, and the server sees the connection close."""
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    try:
        if sock is not None:
            sock.shutdown(2)  # socket.SHUT_RDWR
    except OSError:
        pass


def _error_message(response: Any) -> str:
    """The server's error text (OpenAI ``{"error": {"message"}}`` or raw body), shortened."""
    text = response.text
    try:
        body = json.loads(text)
    except (ValueError, RecursionError):
        return text.strip()[:500]
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("detail") or json.dumps(err)
            code = err.get("code")
            return f"{msg} ({code})" if code else str(msg)[:500]
        if isinstance(err, str):
            return err[:500]
        if "detail" in body:
            return str(body["detail"])[:500]
    return text.strip()[:500]


def _message_text(content: Any) -> Optional[str]:
    """Chat content as text: a str, or a list of parts ``{"type": "text", "text": ...}``."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, dict) and p.get("type", "text") == "text"]
        return "".join(parts)
    return None


class OpenAIBackend:
    """Client for an OpenAI-compatible ``/chat/completions`` endpoint.

    ``base_url`` is the API root, e.g. ``http://127.0.0.1:8000/v1`` (a bare
    ``http://host:port`` gets ``/v1`` appended; a URL ending in
    ``/chat/completions`` is accepted too). The API key comes from ``api_key``,
    else ``MEDRETRIEVE_LLM_API_KEY``, else ``OPENAI_API_KEY``; without one no
    ``Authorization`` header is sent (local servers).

    Each attempt takes at most ``timeout_s`` seconds, reading the reply included (a server that trickles its
    body is cut off), and a reply may hold at most ``max_response_bytes`` (16 MiB) once decoded; 429, 5xx and
    connection errors are retried ``max_retries`` times with exponential backoff
    (``backoff_s * 2**attempt``, jitter x0.5-1.5, capped at ``max_backoff_s``)
    or the server's ``Retry-After``. ``deadline_ms`` caps the whole call,
    retries and waits included. ``response_format`` (``"json"`` or an OpenAI
    ``response_format`` dict) is sent when given; if the server rejects it
    (400/422) the request is repeated once without it and the backend stops
    sending it (prompts ask for JSON in words as well). :meth:`stream` yields the reply as the server writes it
    (``"stream": true``, server-sent events), with the same retries before the first byte and the same errors.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: Optional[str] = None,
        timeout_s: float = 30.0,
        max_retries: int = 2,
        *,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        max_retry_after_s: float = 60.0,
        extra_body: Optional[dict] = None,
        max_response_bytes: int = 16 << 20,
    ) -> None:
        import httpx  # optional extra "llm"

        if not isinstance(base_url, str) or not re.match(r"^https?://[^/\s]+", base_url):
            raise ValueError(f"base_url must be an http(s) URL like http://127.0.0.1:8000/v1, got {base_url!r}")
        if not isinstance(model, str) or not model.strip():
            raise ValueError("model must be a non-empty model name")
        if not timeout_s or timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s!r}")
        if not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries must be an int >= 0, got {max_retries!r}")
        if not isinstance(max_response_bytes, int) or isinstance(max_response_bytes, bool) or max_response_bytes < 1:
            raise ValueError(f"max_response_bytes must be a positive int, got {max_response_bytes!r}")
        self.max_response_bytes = max_response_bytes
        url = base_url.rstrip("/")
        if url.endswith("/chat/completions"):
            url = url[: -len("/chat/completions")]
        elif re.match(r"^https?://[^/]+$", url):
            url += "/v1"
        self.base_url = url
        self.url = url + "/chat/completions"
        self.model = model
        self.timeout_s = float(timeout_s)
        self.max_retries = max_retries
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.max_retry_after_s = float(max_retry_after_s)
        # the package's outbound policy with these settings (medretrieve.outbound): retries, their waits, caps
        self.policy = OutboundPolicy(timeout_s=self.timeout_s, max_retries=max_retries, backoff_s=self.backoff_s,
                                     max_backoff_s=self.max_backoff_s, jitter=True,
                                     max_retry_after_s=self.max_retry_after_s, max_reply_bytes=max_response_bytes)
        self.extra_body = dict(extra_body or {})
        key = api_key or os.environ.get("MEDRETRIEVE_LLM_API_KEY") or os.environ.get("OPENAI_API_KEY")
        # only encodings _read_body decodes itself, in bounded steps
        headers = {"Content-Type": "application/json", "Accept-Encoding": "gzip, deflate"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._httpx = httpx
        self._client = httpx.Client(headers=headers, timeout=self.timeout_s)
        self._response_format_ok = True
        self._lock = threading.Lock()
        #: finish_reason and usage of the last successful call ("length" = truncated at max_tokens).
        self.last_finish_reason: Optional[str] = None
        self.last_usage: Optional[dict] = None

    def __repr__(self) -> str:
        return f"OpenAIBackend({self.base_url!r}, model={self.model!r})"

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "OpenAIBackend":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def generate(
        self,
        messages: Sequence[dict],
        *,
        max_tokens: int = 512,
        temperature: float = 0.0,
        deadline_ms: Optional[float] = None,
        response_format: ResponseFormat = None,
    ) -> str:
        """The assistant's reply text. Raises an :class:`LLMError` subclass on failure."""
        body = self._request_body(messages, max_tokens, temperature, deadline_ms, response_format)
        deadline = _deadline(deadline_ms)
        response = self._post_with_retries(body, deadline)
        if response.status_code in (400, 422) and "response_format" in body:
            message = _error_message(response)
            if not _CONTEXT_PATTERNS.search(message):
                # The server does not do structured output: ask again in plain mode.
                with self._lock:
                    self._response_format_ok = False
                body.pop("response_format")
                response = self._post_with_retries(body, deadline)
        return self._read_reply(response)

    def stream(
        self,
        messages: Sequence[dict],
        *,
        max_tokens: int = 512,
        temperature: float = 0.0,
        deadline_ms: Optional[float] = None,
        response_format: ResponseFormat = None,
        cancel: Optional[Cancel] = None,
    ) -> Iterator[str]:
        """The assistant's reply in pieces as the server writes them (their concatenation is the reply
        :meth:`generate` returns). ``deadline_ms`` also bounds the time between the pieces and the whole reply;
        the streamed text is capped at ``max_response_bytes``. ``cancel`` set (from any thread) closes the
        upstream request at once and raises :class:`LLMCancelled`; so does closing the iterator early. Raises an
        :class:`LLMError` subclass on failure, also part-way through."""
        body = {**self._request_body(messages, max_tokens, temperature, deadline_ms, response_format),
                "stream": True}
        deadline = _deadline(deadline_ms)
        cancel = cancel or Cancel()
        if cancel.is_set():
            raise LLMCancelled("cancelled before the request was sent")
        response = self._post_with_retries(body, deadline, stream=True)
        if isinstance(response, _Reply):  # not 200: read whole already
            self._read_reply(response)  # raises the typed error of the status
            raise LLMBadResponse(f"{self._where()} answered a stream request without a stream")
        forget = cancel.on_set(lambda: _shut_down(response))
        received = 0
        try:
            for line in response.iter_lines():
                if cancel.is_set():
                    raise LLMCancelled(f"cancelled while {self._where()} was writing")
                received += len(line) + 1
                if received > self.policy.max_reply_bytes:
                    raise LLMBadResponse(f"LLM server {self._where()} streamed more than "
                                         f"max_response_bytes={self.max_response_bytes}")
                piece = self._stream_piece(line)
                if piece is None:
                    break
                if piece:
                    yield piece
                if deadline.expired():
                    raise LLMTimeout(f"the deadline passed while {self._where()} was still writing")
            if cancel.is_set():  # the shut-down socket read as the end of the stream
                raise LLMCancelled(f"cancelled while {self._where()} was writing")
        except self._httpx.TransportError as exc:
            if cancel.is_set():  # the read woke because the cancel shut the socket down
                raise LLMCancelled(f"cancelled while {self._where()} was writing") from None
            if isinstance(exc, self._httpx.TimeoutException):
                raise LLMTimeout(f"{self._where()} stopped writing for {self.timeout_s} s") from exc
            raise LLMUnavailable(f"the stream from {self._where()} broke: {type(exc).__name__}: {exc}") from exc
        finally:
            forget()
            response.close()

    def _request_body(self, messages: Sequence[dict], max_tokens: int, temperature: float,
                      deadline_ms: Optional[float], response_format: ResponseFormat) -> dict:
        """The chat-completions request body, every argument checked."""
        msgs, fmt = _checked_request(messages, max_tokens, temperature, deadline_ms, response_format)
        body: dict = {**self.extra_body, "model": self.model, "messages": msgs,
                      "max_tokens": max_tokens, "temperature": float(temperature)}
        if fmt is not None and self._response_format_ok:
            body["response_format"] = fmt
        return body

    def _stream_piece(self, line: str) -> Optional[str]:
        """The text of one server-sent-events line: "" for lines without text, None at ``[DONE]``."""
        if not line.startswith("data:"):
            return ""
        data = line[5:].strip()
        if data == "[DONE]":
            return None
        try:
            choice = json.loads(data)["choices"][0]
            self.last_finish_reason = choice.get("finish_reason") or self.last_finish_reason
            return _message_text((choice.get("delta") or {}).get("content")) or ""
        except (ValueError, KeyError, IndexError, TypeError, AttributeError, RecursionError) as exc:
            raise LLMBadResponse(f"{self._where()} streamed an unreadable event: {data[:200]!r}") from exc

    # -- internals ---------------------------------------------------------
    def _post_with_retries(self, body: dict, deadline: Deadline, stream: bool = False) -> Any:
        """The first reply that is neither 429 nor 5xx, read whole (:class:`_Reply`); with ``stream`` a 200
        reply comes back as the open httpx response, its body unread (the caller closes it). Retries and their
        waits as ``self.policy`` decides (:meth:`medretrieve.outbound.OutboundPolicy.retry`)."""
        httpx = self._httpx
        last_problem = ""
        for attempt in range(self.max_retries + 1):
            if deadline.expired():
                raise LLMTimeout(f"deadline passed before the LLM replied ({self._where()}){last_problem}")
            per_try = self.policy.attempt_s(deadline)
            try:
                response = self._exchange(body, per_try, stream)
            except (httpx.TimeoutException, LLMTimeout) as exc:
                if deadline.expired():
                    raise LLMTimeout(
                        f"no reply from {self._where()} within the deadline ({per_try * 1000:.0f} ms)"
                    ) from exc
                last_problem = f"; last attempt timed out after {per_try:.1f} s"
                if attempt == self.max_retries:
                    raise LLMTimeout(
                        f"no reply from {self._where()} within timeout_s={self.timeout_s} s "
                        f"({attempt + 1} attempts)"
                    ) from exc
                continue
            except (httpx.TransportError, OSError) as exc:
                wait = self.policy.retry(attempt, deadline).wait_s
                if wait is None:
                    raise LLMUnavailable(
                        f"cannot reach the LLM server at {self.url} ({attempt + 1} attempts): "
                        f"{type(exc).__name__}: {exc}"
                    ) from exc
                time.sleep(wait)
                continue
            status = response.status_code
            if status == 429 or status >= 500:
                message = _error_message(response)
                last_problem = f"; last reply: HTTP {status}: {message}"
                time.sleep(self._retry_wait(response, attempt, deadline, message))
                continue
            return response
        raise AssertionError("unreachable")  # the loop returns or raises

    def _retry_wait(self, response: Any, attempt: int, deadline: Deadline, message: str) -> float:
        """Seconds to wait before retrying after a 429 / 5xx ``response``, or the LLMUnavailable that says why
        not (a Retry-After that cannot be read counts as none)."""
        status = response.status_code
        try:
            retry = self.policy.retry(attempt, deadline, response.headers.get("Retry-After"))
        except RetryAfterError:
            retry = self.policy.retry(attempt, deadline)
        if retry.why_not == "retry_after":
            raise LLMUnavailable(
                f"LLM server {self._where()} asks to retry after {retry.asked_s:.0f} s "
                f"(more than max_retry_after_s={self.max_retry_after_s:.0f}): HTTP {status}: {message}"
            )
        if retry.why_not == "retries":
            raise LLMUnavailable(
                f"LLM server {self._where()} answered HTTP {status} after {attempt + 1} attempts: {message}"
            )
        if retry.wait_s is None:
            asked = "" if retry.asked_s is None else f" ({retry.asked_s:.2f} s)"
            raise LLMUnavailable(
                f"LLM server {self._where()} answered HTTP {status} and the retry wait{asked} does not fit in "
                f"the deadline: {message}"
            )
        return retry.wait_s

    def _exchange(self, body: dict, limit_s: float, stream: bool = False) -> Any:
        """One request whose reply is read whole within ``limit_s`` seconds (see :func:`_read_body`); with
        ``stream``, a 200 reply is returned open instead."""
        attempt = Deadline(max(limit_s, 0.0) * 1000.0)
        request = self._client.build_request("POST", self.url, json=body, timeout=limit_s)
        response = self._client.send(request, stream=True)
        if stream and response.status_code == 200:
            return response
        try:
            content = _read_body(response, attempt, self.policy.max_reply_bytes, self._where())
            return _Reply(response.status_code, response.headers, content, self._where())
        finally:
            response.close()

    def _where(self) -> str:
        return f"{self.url} (model {self.model})"

    def _read_reply(self, response: Any) -> str:
        status = response.status_code
        if status != 200:
            message = _error_message(response)
            if status in (400, 413, 422) and _CONTEXT_PATTERNS.search(message):
                raise LLMContextTooLong(
                    f"the prompt plus max_tokens does not fit in the context window of {self.model}: {message} "
                    "(use fewer or shorter sources, or a smaller max_tokens)"
                )
            if status in (401, 403):
                raise LLMUnavailable(
                    f"LLM server {self._where()} refused the credentials (HTTP {status}): {message}; "
                    "set MEDRETRIEVE_LLM_API_KEY or OPENAI_API_KEY"
                )
            if status == 404:
                raise LLMUnavailable(
                    f"LLM endpoint or model not found at {self._where()} (HTTP 404): {message}"
                )
            raise LLMBadResponse(f"LLM server {self._where()} rejected the request (HTTP {status}): {message}")
        data = response.json()
        try:
            choice = data["choices"][0]
            text = _message_text(choice["message"].get("content"))
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise LLMBadResponse(
                f"LLM server {self._where()} sent JSON without choices[0].message.content: {str(data)[:200]}"
            ) from exc
        if text is None:
            raise LLMBadResponse(f"LLM server {self._where()} sent an empty message (content is null)")
        self.last_finish_reason = choice.get("finish_reason")
        self.last_usage = data.get("usage") if isinstance(data.get("usage"), dict) else None
        return text


class TransformersBackend:
    """A local Hugging Face causal LM (small models; CPU by default).

    ``model_dir`` holds a model and tokenizer saved with ``save_pretrained``;
    nothing is downloaded (``local_files_only``). The tokenizer's chat
    template formats the messages when it has one; otherwise a plain
    ``System:/User:/Assistant:`` transcript is used. ``temperature=0`` is
    greedy decoding. ``deadline_ms`` stops generation (``MaxTimeCriteria``) and
    raises :class:`LLMTimeout` when it is hit. ``response_format`` cannot be
    enforced here and is ignored (the prompts ask for the format in words).
    Needs the optional extra ``torch`` + ``transformers``.
    """

    max_concurrency = 1  # one generation at a time (a lock): callers size their thread pools by it

    def __init__(
        self,
        model_dir: Union[str, os.PathLike],
        *,
        device: str = "cpu",
        dtype: Optional[str] = None,
        max_context: Optional[int] = None,
        trust_remote_code: bool = False,
    ) -> None:
        try:
            import torch
            import transformers
        except ImportError as exc:
            raise ImportError(
                "TransformersBackend needs torch and transformers (pip install 'medretrieve[export]')"
            ) from exc
        path = os.fspath(model_dir)
        if not os.path.isdir(path):
            raise FileNotFoundError(f"model_dir {path!r} is not a folder with a saved model")
        self._torch = torch
        self._transformers = transformers
        self.model_dir = path
        self.device = device
        self.tokenizer: Any  # transformers' classes, loaded below
        self.model: Any
        try:
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(
                path, local_files_only=True, trust_remote_code=trust_remote_code
            )
            kwargs: dict = {"local_files_only": True, "trust_remote_code": trust_remote_code}
            if dtype is not None:
                if not isinstance(getattr(torch, str(dtype), None), torch.dtype):
                    raise ValueError(f"dtype must name a torch dtype such as 'float32' or 'bfloat16', got {dtype!r}")
                # transformers 5 calls it dtype; 4.x torch_dtype.
                key = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
                kwargs[key] = getattr(torch, dtype)
            self.model = transformers.AutoModelForCausalLM.from_pretrained(path, **kwargs)
        except OSError as exc:
            raise LLMUnavailable(f"cannot load a causal LM from {path!r}: {exc}") from exc
        except ValueError as exc:
            if "dtype must name" in str(exc):
                raise
            raise LLMUnavailable(f"cannot load a causal LM from {path!r}: {exc}") from exc
        self.model.to(device)
        self.model.eval()
        cfg = self.model.config
        self.max_context = int(
            max_context
            or getattr(cfg, "max_position_embeddings", None)
            or getattr(cfg, "n_positions", None)
            or 2048
        )
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"TransformersBackend({self.model_dir!r}, device={self.device!r})"

    def _prompt_ids(self, msgs: list[dict]) -> Any:
        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_tensors="pt")
            if hasattr(ids, "keys"):  # newer transformers return a BatchEncoding
                ids = ids["input_ids"]
            return ids
        transcript = "".join(f"{m['role'].capitalize()}: {m['content']}\n" for m in msgs) + "Assistant:"
        return tok(transcript, return_tensors="pt")["input_ids"]

    def generate(
        self,
        messages: Sequence[dict],
        *,
        max_tokens: int = 512,
        temperature: float = 0.0,
        deadline_ms: Optional[float] = None,
        response_format: ResponseFormat = None,
    ) -> str:
        """The model's continuation of the chat, decoded without special tokens."""
        msgs, _ = _checked_request(messages, max_tokens, temperature, deadline_ms, response_format)
        # (a response format is validated but cannot be enforced on a local model)
        if deadline_ms is not None and deadline_ms <= 0:
            raise LLMTimeout("deadline passed before generation started")
        torch, transformers = self._torch, self._transformers
        deadline = Deadline(deadline_ms)
        input_ids = self._prompt_ids(msgs).to(self.device)
        n_prompt = int(input_ids.shape[-1])
        if n_prompt + max_tokens > self.max_context:
            raise LLMContextTooLong(
                f"prompt ({n_prompt} tokens) + max_tokens ({max_tokens}) exceeds the context window "
                f"of {self.max_context} tokens of {self.model_dir} (use fewer or shorter sources)"
            )
        gen_kwargs: dict = {
            "max_new_tokens": max_tokens,
            "attention_mask": torch.ones_like(input_ids),
            "pad_token_id": self.tokenizer.pad_token_id
            if self.tokenizer.pad_token_id is not None
            else self.tokenizer.eos_token_id,
        }
        if temperature > 0:
            gen_kwargs.update(do_sample=True, temperature=float(temperature))
        else:
            gen_kwargs.update(do_sample=False)
        max_time = None
        if deadline_ms is not None:
            max_time = deadline.remaining_s()
            if max_time <= 0:
                raise LLMTimeout("deadline passed while the prompt was being tokenized")
            gen_kwargs["stopping_criteria"] = transformers.StoppingCriteriaList(
                [transformers.MaxTimeCriteria(max_time=max_time)]
            )
        with self._lock, torch.no_grad():
            try:
                out = self.model.generate(input_ids, **gen_kwargs)
            except RuntimeError as exc:
                raise LLMBadResponse(f"local generation failed: {exc}") from exc
        if deadline.expired():
            raise LLMTimeout(
                f"local generation stopped at the deadline ({deadline_ms:.0f} ms) after "
                f"{int(out.shape[-1]) - n_prompt} tokens"
            )
        return str(self.tokenizer.decode(out[0, n_prompt:], skip_special_tokens=True))
