"""A Ray Serve deployment of sharded search: replicas that each hold a :class:`~.search.ShardedRetriever`.

    from ray import serve
    from medretrieve.distributed.serve import app
    handle = serve.run(app("/data/pubmed-shards", replicas=2))
    result = handle.search.remote("What causes gout?", k=10, deadline_ms=300).result()   # SearchResult.to_dict()

Over HTTP (Ray Serve's proxy, ``POST /`` with JSON ``{"question": ..., "k": 10, "deadline_ms": 300, ...}``) it
answers the same dict, or status 400 with ``{"error": ...}`` for a request it cannot read. An HTTP service of its
own (``medretrieve serve``) uses it either way: build a ``ShardedRetriever`` in process (it is a ``Retriever``), or
keep the retrievers in Serve replicas and call ``handle.search`` from the service.

``share_shards=True`` makes all replicas use one set of shard actors (named after the shard directories and
detached, so they outlive any replica; stop them with :func:`stop_shared_shards`); otherwise each replica starts
its own and they stop with it.
"""
from __future__ import annotations

import asyncio
from typing import Any, Dict, Mapping, Optional, Sequence, Union

from ray import serve

from .fanout import default_name_prefix, ensure_ray
from .search import ShardedRetriever
from .layout import PathLike, shard_dirs

_SWITCHES = ("expand", "rerank", "diversify", "recover", "route", "dense", "lexical", "feedback")


class ShardedSearch:
    """One replica: a :class:`ShardedRetriever` over ``shards`` built with ``retriever_options`` (its keyword
    arguments: ranker, settings, actor_options, ...)."""

    def __init__(self, shards: Union[PathLike, Sequence[PathLike]], retriever_options: Optional[Mapping[str, Any]] = None,
                 share_shards: bool = False) -> None:
        self.retriever = ShardedRetriever(shards, shared=share_shards, **dict(retriever_options or {}))

    def search(self, question: str, k: int = 10, deadline_ms: Optional[float] = 300, **switches: Any
               ) -> Dict[str, Any]:
        """:meth:`ShardedRetriever.search`, the result as a dict (``SearchResult.from_dict`` reads it back)."""
        return self.retriever.search(question, k, deadline_ms, **switches).to_dict()

    async def __call__(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        try:
            body = await request.json()
            if not isinstance(body, dict) or not isinstance(body.get("question"), str):
                raise ValueError("the body must be a JSON object with a string 'question'")
            unknown = sorted(set(body) - {"question", "k", "deadline_ms", "per_document", *_SWITCHES})
            if unknown:
                raise ValueError(f"unknown fields {unknown}")
            options = {key: body[key] for key in ("k", "deadline_ms", "per_document", *_SWITCHES) if key in body}
            # search blocks on the shard calls: run it off the event loop
            return await asyncio.to_thread(self.search, body["question"], **options)
        except (ValueError, TypeError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)

    def __del__(self) -> None:
        retriever = getattr(self, "retriever", None)
        if retriever is not None:
            retriever.close()


def app(shards: Union[PathLike, Sequence[PathLike]], replicas: int = 1,
        retriever_options: Optional[Mapping[str, Any]] = None, share_shards: bool = False,
        ray_actor_options: Optional[Mapping[str, Any]] = None):
    """The Serve application: ``replicas`` replicas of :class:`ShardedSearch` (``ray_actor_options``: each
    replica's resources), ready for ``serve.run``."""
    deployment: Any = serve.deployment(ShardedSearch, name="medretrieve-sharded-search", num_replicas=replicas,
                                       ray_actor_options=dict(ray_actor_options or {}))
    return deployment.bind(shards if isinstance(shards, (str, bytes)) or not isinstance(shards, Sequence)
                           else [str(s) for s in shards], dict(retriever_options or {}), share_shards)


def stop_shared_shards(shards: Union[PathLike, Sequence[PathLike]]) -> int:
    """Stop the shared shard actors of a deployment (``share_shards=True``); returns how many were running."""
    ray = ensure_ray()
    prefix = default_name_prefix(shard_dirs(shards))
    stopped = 0
    for i in range(len(shard_dirs(shards))):
        try:
            actor = ray.get_actor(f"{prefix}{i}")
        except ValueError:  # not running
            continue
        ray.kill(actor, no_restart=True)
        stopped += 1
    return stopped
