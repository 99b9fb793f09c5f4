"""Past one machine, on Ray: a corpus built into shards by Ray Data, searched by one Ray actor per shard.

- :func:`~.build.build_sharded` (CLI: ``medretrieve build SOURCES OUT --shards N [--ray ADDRESS]``): Ray Data
  reads and chunks the corpus, ONNX encoders in an actor pool embed it, and one writer per shard builds an
  ordinary collection (``OUT/shard-00000`` ...) out of core; ``OUT/shards.json`` names them. Shard ``i`` equals
  ``Collection.build`` of the documents ``shard_of(id, N) == i`` (same chunk ids, rows and vectors).
- :class:`~.search.ShardedRetriever`: a :class:`~medretrieve.retrieval.retriever.Retriever` over many shards
  (one Ray actor each, collections memory-mapped); a question is fanned out under its deadline, candidates are
  scored comparably and fused, reranked and diversified once; a missing shard gives a partial result. Metadata
  filters (``where``, retracted articles out by default) run on each shard over its own rows and facets sum the
  shards' counts (:mod:`.shard_filter`), giving what one collection of the shards concatenated gives.
- :class:`~.serve.ShardedSearch`: a Ray Serve deployment serving ``medretrieve serve``'s HTTP API over a
  ShardedRetriever (:func:`.serve.app` builds the application).

The single-machine path (``Collection`` + ``Retriever``) stays the default and never imports Ray; this package
imports Ray only when one of these is used (the ``distributed`` extra installs it).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .._exports import attach as _attach

if TYPE_CHECKING:  # the public names, declared once (medretrieve._exports)
    from .build import build_sharded as build_sharded
    from .layout import shard_dirs as shard_dirs
    from .layout import shard_of as shard_of
    from .search import ShardedRetriever as ShardedRetriever
    from .serve import ShardedSearch as ShardedSearch

__getattr__, __dir__, __all__ = _attach(__name__, __file__)
