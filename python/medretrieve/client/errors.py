"""Typed errors of :mod:`medretrieve.client`, one per kind of failure a caller handles differently.

All derive from :class:`ClientError` (``status``: the HTTP status, 0 when no response came; ``type``: the
server's error type; ``field``: the request field at fault; ``retry_after_s``: the server's Retry-After).
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Type


class ClientError(Exception):
    """Base class of every client failure."""

    def __init__(self, message: str, status: int = 0, type_: str = "", field: Optional[str] = None,
                 retry_after_s: Optional[float] = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type_
        self.field = field
        self.retry_after_s = retry_after_s


class InvalidRequest(ClientError, ValueError):
    """400 / 422: the request was refused (``field`` names the field at fault), or refused before sending
    (``status`` 0); do not retry. A ValueError too, as ``Retriever.search``'s refusal of the same request is."""


class Unauthorized(ClientError):
    """401: the server asks for an API key and got none, or one it does not accept (``api_key=``, or
    ``$MEDRETRIEVE_API_KEY``)."""


class NotFound(ClientError):
    """404: no such endpoint (an older server?), or 501: the feature is off on this server (answers)."""


class Forbidden(ClientError):
    """403: the API key lacks the operation's scope (``type`` ``insufficient_scope``), or the operation is off on
    this server (``reload_disabled``)."""


class Overloaded(ClientError):
    """429: the server shed the request (after the client's retries); ``retry_after_s`` says when to retry."""


class NotReady(ClientError):
    """503: the server is still loading its collection, or failed to (after the client's retries)."""


class DeadlineExceeded(ClientError):
    """504: the deadline passed before the server could start the work."""


class ServerError(ClientError):
    """Another 5xx: a bug or a failed reload on the server (its message says which)."""


class BadResponse(ClientError):
    """A success reply that is not the API's (a proxy's page, another service, a wrong shape, a stream that is
    not server-sent events); ``status``: the reply's."""


class Unavailable(ClientError):
    """No response: the connection failed, or the client's own timeout passed."""


_BY_STATUS: Dict[int, Type[ClientError]] = {400: InvalidRequest, 422: InvalidRequest, 401: Unauthorized,
                                             403: Forbidden, 404: NotFound, 405: NotFound, 409: ServerError, 429: Overloaded, 501: NotFound,
                                             503: NotReady, 504: DeadlineExceeded}


def error_for(status: int, body: Any, retry_after_s: Optional[float]) -> ClientError:
    """The typed error of an error response (``body``: its parsed JSON, or its text)."""
    detail = body.get("error") if isinstance(body, dict) else None
    if isinstance(detail, dict):
        message, type_, field = str(detail.get("message", "")), str(detail.get("type", "")), detail.get("field")
    else:
        message, type_, field = (str(body)[:500] if body else f"HTTP {status}"), "", None
    cls = _BY_STATUS.get(status, ServerError if status >= 500 else ClientError)
    return cls(f"HTTP {status}: {message}", status, type_, field, retry_after_s)
