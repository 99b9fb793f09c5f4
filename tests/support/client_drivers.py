"""Both HTTP clients behind one blocking surface, so that a client test runs with ``Client`` and ``AsyncClient``
alike: :class:`SyncedAsyncClient` drives an ``AsyncClient`` from sync code on an event loop of its own (where its
connections live); ``CLIENTS`` names the two for ``pytest.mark.parametrize``."""
from __future__ import annotations

import asyncio
import inspect
from typing import Any, Callable, Dict, Iterator

from medretrieve.client import AsyncClient, Client

CLIENTS = ("Client", "AsyncClient")


class SyncedAsyncClient:
    """An AsyncClient with Client's blocking methods: a coroutine method is run to its end, an async iterator
    (``stream_answer``) is iterated one event at a time."""

    def __init__(self, url: str, **settings: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.client = AsyncClient(url, **settings)

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.client, name)
        if inspect.isasyncgenfunction(method):
            return lambda *args, **kwargs: self._iterate(method(*args, **kwargs))
        if inspect.iscoroutinefunction(method):
            return lambda *args, **kwargs: self.loop.run_until_complete(method(*args, **kwargs))
        return method

    def _iterate(self, events: Any) -> Iterator[Any]:
        try:
            while True:
                try:
                    yield self.loop.run_until_complete(events.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            self.loop.run_until_complete(events.aclose())

    def __enter__(self) -> "SyncedAsyncClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()


MAKERS: Dict[str, Callable[..., Any]] = {"Client": Client, "AsyncClient": SyncedAsyncClient}
