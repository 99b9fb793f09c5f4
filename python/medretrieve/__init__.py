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
import os as _os
import typing as _typing

from ._exports import attach as _attach

# Developer builds: MEDRETRIEVE_CORE_DIR points at a CMake build folder that
# holds _core*.so, so several build trees can share one source checkout. The
# core is looked up there before any other finder runs: an editable install's
# finder would otherwise always load the installed one.
if _os.environ.get("MEDRETRIEVE_CORE_DIR"):
    import importlib.machinery as _machinery
    import sys as _sys

    class _CoreDirFinder:
        """Finds ``medretrieve._core`` in MEDRETRIEVE_CORE_DIR (nothing else)."""

        def __init__(self, directory: str) -> None:
            self.directory = directory

        def find_spec(self, name: str, path: _typing.Optional[_typing.Sequence[str]] = None,
                      target: _typing.Any = None) -> _typing.Optional[_machinery.ModuleSpec]:
            if name != __name__ + "._core":
                return None
            spec = _machinery.PathFinder.find_spec(name, [self.directory])
            if spec is None:  # not the installed core instead: the developer asked for this build
                raise ImportError(f"MEDRETRIEVE_CORE_DIR={self.directory} holds no native core (_core*.so): "
                                  "build it there (docs/development.md) or unset the variable")
            return spec

    __path__.insert(0, _os.environ["MEDRETRIEVE_CORE_DIR"])
    _sys.meta_path.insert(0, _CoreDirFinder(_os.environ["MEDRETRIEVE_CORE_DIR"]))

if _typing.TYPE_CHECKING:  # the public API, declared once: type checkers read it here, _exports.attach at run time
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
    from .records import Answer as Answer
    from .records import Hit as Hit
    from .records import SearchResult as SearchResult
    from .records import StageInfo as StageInfo
    from .corpus import Collection as Collection
    from .corpus import CollectionChanged as CollectionChanged
    from .corpus import CollectionSnapshot as CollectionSnapshot
    from .corpus import DamagedCollection as DamagedCollection
    from .corpus import MemoryCollection as MemoryCollection
    from .corpus import PubMedSource as PubMedSource
    from .retrieval import LinearRanker as LinearRanker
    from .retrieval import OnlineStage as OnlineStage
    from .retrieval import Query as Query
    from .retrieval import Retriever as Retriever
    from .retrieval import Settings as Settings
    from .generation import Answerer as Answerer
    # framework doors, each behind its extra (langchain, llamaindex, haystack)
    from .integrations import HaystackRetriever as HaystackRetriever
    from .integrations import LangChainRetriever as LangChainRetriever
    from .integrations import LlamaIndexRetriever as LlamaIndexRetriever


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

# each public name is imported on first use: importing medretrieve (or a light part of it such as
# medretrieve.client) loads neither the native core nor numpy until a name that needs them is used
__getattr__, __dir__, __all__ = _attach(__name__, __file__, extra=("simd_level", "cpu_simd_level"))
