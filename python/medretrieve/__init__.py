"""medretrieve: the retrieval core for grounded medical RAG.

Native core (``medretrieve._core``): SIMD kernels chosen at run time, an int8
HNSW index (``Index``, a drop-in for ``hnswlib.Index``), exact flat search and
fused MMR / RRF operators. The Python layer adds ONNX encoders, chunking,
hybrid search under a deadline, grounded generation and evaluation.
"""
from __future__ import annotations

import os as _os

# Developer builds: MEDRETRIEVE_CORE_DIR points at a CMake build folder that
# holds _core*.so, so several build trees can share one source checkout.
if _os.environ.get("MEDRETRIEVE_CORE_DIR"):
    __path__.insert(0, _os.environ["MEDRETRIEVE_CORE_DIR"])  # type: ignore[name-defined]

from . import _core  # noqa: E402

from .fusion import cuda_available, fuse_scores, lambda_for, mmr, mmr_batch, rrf  # noqa: E402
from .index import FlatIndex, Index  # noqa: E402

__version__ = "0.1.0"


def simd_level() -> str:
    """SIMD level the native kernels run at (``scalar``, ``avx2``, ``avx512``, ``avx512_vnni``).

    The best level the CPU supports is chosen at import; the environment
    variable ``MEDRETRIEVE_SIMD`` caps it (useful to test each level).
    """
    return _core.simd_level()


def cpu_simd_level() -> str:
    """Highest SIMD level this CPU supports, ignoring ``MEDRETRIEVE_SIMD``."""
    return _core.cpu_simd_level()


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

# Pipeline classes load lazily (importing them pulls in onnxruntime, ~0.3 s).
_LAZY = {"Collection": "collection", "Retriever": "retrieve", "SearchResult": "retrieve", "Hit": "retrieve"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'medretrieve' has no attribute {name!r}")


__all__ = [
    "simd_level", "cpu_simd_level", "__version__",
    "Index", "FlatIndex",
    "mmr", "mmr_batch", "rrf", "fuse_scores", "lambda_for", "cuda_available",
    *_LAZY,
]
