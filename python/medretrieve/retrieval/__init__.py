"""Retrieval: from a question to ranked evidence chunks under a deadline.

Modules, in the order a search uses them: ``query`` (the question analysed once), ``expansion`` (query
variants), ``scope`` (what one search reads: the collection, its first stage, its chunks' tokens),
``first_stage`` (dense + BM25 gathering), ``candidates`` (variants, ef policy, feedback, fusion), ``rerank`` (the
rerank stage: learned ranker, cross-encoder, heuristics) with ``learned_ranker`` (``LinearRanker`` and its
features) and ``shipped_ranker`` (the ranker the package ships and which form of it a collection gets),
``diversify`` (MMR), ``recovery`` (selection, weak questions, pruning), ``online`` and ``pool_filler`` (an online
search's PubMed pool), ``results`` (what a search returns), ``budget`` (deadline and cost estimates), ``settings``
(tuning), ``retriever`` (``Retriever``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._exports import attach as _attach

if TYPE_CHECKING:  # the public names, declared once (medretrieve._exports)
    from .retriever import Retriever as Retriever
    from .settings import Settings as Settings
    from .query import Query as Query
    from .learned_ranker import LinearRanker as LinearRanker
    from .online import OnlineStage as OnlineStage

__getattr__, __dir__, __all__ = _attach(__name__, __file__)
