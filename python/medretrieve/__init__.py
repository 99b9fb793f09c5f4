"""medretrieve: the retrieval core for grounded medical RAG.

Native core (``medretrieve._core``): SIMD kernels chosen at run time, an int8 HNSW index (``Index``, a drop-in for
``hnswlib.Index``), exact flat search and fused MMR / RRF operators. The Python layer is laid out in wings, each
importing only the ones below it: ``models`` (encoders), ``corpus`` (readers, chunking, BM25, collections),
``retrieval`` (search under a deadline), ``training`` (rankers and encoders from questions), ``generation``
(LLMs, grounded answers), ``evaluation`` (BioASQ, MedRGB), ``integrations`` (LangChain, LlamaIndex, Haystack,
MCP) and ``cli``. This module re-exports the public names, each loaded on first use (PEP 562): ``import
medretrieve`` costs nothing, the native core loads with the first ``Index`` or ``mmr``, onnxruntime with the first
pipeline class.
"""
from __future__ import annotations

import os as _os
from typing import TYPE_CHECKING, Any

# Developer builds: MEDRETRIEVE_CORE_DIR points at a CMake build folder that
# holds _core*.so, so several build trees can share one source checkout.
if _os.environ.get("MEDRETRIEVE_CORE_DIR"):
    __path__.insert(0, _os.environ["MEDRETRIEVE_CORE_DIR"])

if TYPE_CHECKING:  # what the lazy names below resolve to, for type checkers and IDEs (explicit re-exports)
    from ._version import __version__ as __version__
    from .fusion import cuda_available as cuda_available
    from .fusion import fuse_scores as fuse_scores
    from .fusion import lambda_for as lambda_for
    from .fusion import mmr as mmr
    from .fusion import mmr_batch as mmr_batch
    from .fusion import rrf as rrf
    from .index import BFIndex as BFIndex
    from .index import FlatIndex as FlatIndex
    from .index import Index as Index
    from .corpus.collection import Collection as Collection
    from .corpus.snapshot import CollectionSnapshot as CollectionSnapshot
    from .corpus.store import CollectionChanged as CollectionChanged
    from .corpus.store import DamagedCollection as DamagedCollection
    from .corpus.memory import MemoryCollection as MemoryCollection
    from .corpus.pubmed import PubMedSource as PubMedSource
    from .records import Answer as Answer
    from .generation.generate import Answerer as Answerer
    from .integrations.haystack import HaystackRetriever as HaystackRetriever
    from .integrations.langchain import LangChainRetriever as LangChainRetriever
    from .integrations.llamaindex import LlamaIndexRetriever as LlamaIndexRetriever
    from .retrieval.online import OnlineStage as OnlineStage
    from .retrieval.query import Query as Query
    from .retrieval.learned_ranker import LinearRanker as LinearRanker
    from .records import Hit as Hit
    from .records import SearchResult as SearchResult
    from .records import StageInfo as StageInfo
    from .retrieval.retriever import Retriever as Retriever
    from .retrieval.settings import Settings as Settings


def simd_level() -> str:
    """SIMD level the native kernels run at (``scalar``, ``avx2``, ``avx512``, ``avx512_vnni``).

    The best level the CPU supports is chosen at import; the environment
    variable ``MEDRETRIEVE_SIMD`` caps it (useful to test each level).
    """
    from . import _core

    return str(_core.simd_level())


def cpu_simd_level() -> str:
    """Highest SIMD level this CPU supports, ignoring ``MEDRETRIEVE_SIMD``."""
    from . import _core

    return str(_core.cpu_simd_level())


def _check_simd_env() -> None:
    value = _os.environ.get("MEDRETRIEVE_SIMD")
    if value and value not in ("scalar", "avx2", "avx512", "avx512_vnni"):
        import warnings

        warnings.warn(
            f"MEDRETRIEVE_SIMD={value!r} is not one of scalar, avx2, avx512, avx512_vnni; ignored",
            RuntimeWarning,
            stacklevel=2,
        )


_check_simd_env()

# public name -> module that defines it, imported on first use: importing medretrieve (or a light part of it such
# as medretrieve.client) loads neither the native core nor numpy until a name that needs them is used
_LAZY = {
    "__version__": "_version",  # importlib.metadata is slow to import
    "Index": "index",
    "FlatIndex": "index",
    "BFIndex": "index",
    "mmr": "fusion",
    "mmr_batch": "fusion",
    "rrf": "fusion",
    "fuse_scores": "fusion",
    "lambda_for": "fusion",
    "cuda_available": "fusion",
    "Collection": "corpus.collection",
    "CollectionSnapshot": "corpus.snapshot",
    "DamagedCollection": "corpus.store",
    "CollectionChanged": "corpus.store",
    "MemoryCollection": "corpus.memory",
    "PubMedSource": "corpus.pubmed",
    "OnlineStage": "retrieval.online",
    "Retriever": "retrieval.retriever",
    "Settings": "retrieval.settings",
    "SearchResult": "records",
    "Hit": "records",
    "StageInfo": "records",
    "Query": "retrieval.query",
    "LinearRanker": "retrieval.learned_ranker",
    "Answerer": "generation.generate",
    "Answer": "records",
    # framework doors, each behind its extra (langchain, llamaindex, haystack)
    "LangChainRetriever": "integrations.langchain",
    "LlamaIndexRetriever": "integrations.llamaindex",
    "HaystackRetriever": "integrations.haystack",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'medretrieve' has no attribute {name!r}")


def __dir__() -> list:
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["simd_level", "cpu_simd_level", *_LAZY]
