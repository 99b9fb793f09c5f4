"""Clients of a medretrieve server: :class:`Client` (blocking) and :class:`AsyncClient`, returning the library's
``SearchResult`` and ``Answer``, with timeouts, retries on 429 / 503 after Retry-After, and typed errors
(:mod:`.errors`). Needs httpx and pydantic (the ``serve`` extra); loads no engine."""
from .client import API_KEY_ENV, AnswerEvent, AsyncClient, Client
from .errors import (BadResponse, ClientError, DeadlineExceeded, Forbidden, InvalidRequest, NotFound, NotReady,
                     Overloaded, ServerError, Unauthorized, Unavailable)

__all__ = ["Client", "AsyncClient", "AnswerEvent", "API_KEY_ENV", "ClientError", "InvalidRequest", "Unauthorized", "NotFound", "Forbidden",
           "Overloaded", "NotReady", "DeadlineExceeded", "ServerError", "BadResponse", "Unavailable"]
