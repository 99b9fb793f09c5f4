"""A Ray Serve deployment of sharded search: replicas that each serve medretrieve's HTTP API over a
:class:`~.search.ShardedRetriever`.

    from ray import serve
    from medretrieve.distributed.serve import app
    serve.run(app("/data/pubmed-shards", replicas=2), route_prefix="/")
    # POST http://127.0.0.1:8000/v1/search {"question": "What causes gout?", "k": 10}

Each replica is a Serve ingress around the app of ``medretrieve serve`` (:func:`medretrieve.server.app.create_app`)
over its ``ShardedRetriever`` (a ``Retriever``): the same endpoints, request schema, strictness, error bodies
(``{"error": {"type", "message", "field"}}``), admission, deadlines and ``Server-Timing`` header, one OpenAPI
document for both (``GET /openapi.json``); only the work underneath fans out to the shards. ``server_options``
are the server's settings (:class:`~medretrieve.server.config.ServerConfig` fields: ``deadline_ms``,
``max_inflight``, ``max_queue``, ``max_batch``, ``max_body_bytes``, ...); answers are extractive (``/v1/answer``
with ``mode`` ``cite``). Reloading is off: a deployment is redeployed instead.

Python callers of the deployment use its handle, which searches as :meth:`ShardedRetriever.search` does (the same
options, refused the same way) and answers the result as a dict (``SearchResult.from_dict`` reads it back), and
counts facets as :meth:`ShardedRetriever.facets` does::

    handle = serve.run(app("/data/pubmed-shards"))
    result = handle.search.remote("What causes gout?", k=10, deadline_ms=300).result()
    counts = handle.facets.remote(["year"], where="not retracted").result()

``share_shards=True`` makes all replicas use one set of shard actors (named after the shard directories and
detached, so they outlive any replica; stop them with :func:`stop_shared_shards`); otherwise each replica starts
its own and they stop with it.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Mapping, Optional, Sequence, Union

from ray import serve

from ..server.app import create_app
from ..server.config import ServerConfig
from .fanout import default_name_prefix, ensure_ray
from .layout import PathLike, shard_dirs
from .search import ShardedRetriever


@serve.ingress()
class ShardedSearch:
    """One replica: a :class:`ShardedRetriever` over ``shards`` built with ``retriever_options`` (its keyword
    arguments: ranker, settings, actor_options, ...), served by the HTTP API's app with ``server_options``."""

    def __init__(self, shards: Union[PathLike, Sequence[PathLike]],
                 retriever_options: Optional[Mapping[str, Any]] = None, share_shards: bool = False,
                 server_options: Optional[Mapping[str, Any]] = None) -> None:
        self.retriever = ShardedRetriever(shards, shared=share_shards, **dict(retriever_options or {}))
        self.server_options = dict(server_options or {})

    def __serve_build_asgi_app__(self) -> Any:
        """Serve's hook: the replica's ASGI app, built once the retriever is (the HTTP API over it)."""
        return create_app(self.retriever, **self.server_options)

    def search(self, question: str, **options: Any) -> Dict[str, Any]:
        """:meth:`ShardedRetriever.search` with ``options`` (its keyword arguments, checked as it checks them), the
        result as a dict (``SearchResult.from_dict`` reads it back)."""
        return self.retriever.search(question, **options).to_dict()

    def facets(self, fields: Sequence[str], **options: Any) -> Dict[str, Any]:
        """:meth:`ShardedRetriever.facets` (``where``, ``include_retracted``, ``top``): the shards' counts summed."""
        return self.retriever.facets(fields, **options)

    def __del__(self) -> None:
        retriever = getattr(self, "retriever", None)
        if retriever is not None:
            retriever.close()


def app(shards: Union[PathLike, Sequence[PathLike]], replicas: int = 1,
        retriever_options: Optional[Mapping[str, Any]] = None, share_shards: bool = False,
        ray_actor_options: Optional[Mapping[str, Any]] = None,
        server_options: Optional[Mapping[str, Any]] = None) -> Any:
    """The Serve application: ``replicas`` replicas of :class:`ShardedSearch` (``ray_actor_options``: each
    replica's resources; ``server_options``: the HTTP API's settings, checked here), ready for ``serve.run``."""
    options = dict(server_options or {})
    if options.get("enable_reload"):
        raise ValueError("server_options: a deployment does not reload its shards (redeploy it instead)")
    ServerConfig("shards", **options)  # the settings' own checks, before any replica starts
    deployment: Any = serve.deployment(ShardedSearch, name="medretrieve-sharded-search", num_replicas=replicas,
                                       ray_actor_options=dict(ray_actor_options or {}))
    # absolute paths: a replica's working directory is not the caller's
    where = os.path.abspath(shards) if isinstance(shards, (str, os.PathLike)) else [os.path.abspath(s) for s in shards]
    return deployment.bind(where, dict(retriever_options or {}), share_shards, options)


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
