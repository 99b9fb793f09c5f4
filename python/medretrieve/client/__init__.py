"""Clients of a medretrieve server: :class:`Client` (blocking) and :class:`AsyncClient`, returning the library's
``SearchResult`` and ``Answer``, with timeouts, retries on 429 / 503 after Retry-After, and typed errors
(:mod:`.errors`). Needs httpx and pydantic (the ``serve`` extra); loads no engine."""
from .client import AnswerEvent, AsyncClient, Client
from .errors import (BadResponse, ClientError, DeadlineExceeded, Forbidden, InvalidRequest, NotFound, NotReady,
                     Overloaded, ServerError, Unavailable)

__all__ = ["Client", "AsyncClient", "AnswerEvent", "ClientError", "InvalidRequest", "NotFound", "Forbidden",
           "Overloaded", "NotReady", "DeadlineExceeded", "ServerError", "BadResponse", "Unavailable"]
