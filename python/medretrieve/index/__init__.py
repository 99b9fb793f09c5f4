"""Vector indexes: ``Index`` (int8 / float32 HNSW, a drop-in for ``hnswlib.Index``), ``FlatIndex`` (exact) and
``BFIndex`` (``FlatIndex`` behind hnswlib's ``BFIndex`` API, a drop-in for it).

All are thin wrappers over the native core (``medretrieve._core``): this package only normalises inputs (dtype,
contiguity, 1-d rows, ids, label lists) and converts result conventions; every loop runs natively with the GIL
released. ``hnsw.py`` holds ``Index``, ``flat.py`` ``FlatIndex``, ``bruteforce.py`` ``BFIndex``.

Storage (``dtype``):

* ``"float32"``: vectors stored as given (cosine: normalised).
* ``"int8"``: scalar quantization ``x ~= c + s * code`` with a trained per-dimension centre ``c`` (the mean of the
  first add batch, up to 100k rows, or of ``train()``'s sample; a first batch under 256 rows without ``train()``
  leaves ``c = 0``) and one symmetric scale ``s`` per vector. Centring removes the offset embedding models share
  across vectors, so the 8 bits cover what differs between them; the per-vector scale keeps absolute inner-product
  scale (MedCPT's raw scores of ~60-70 survive). It was measured against plain per-vector and
  per-dimension min/max (faiss SQ8) schemes (``bench/RESULTS.md``, "Index"). A slab is ~``dim + 160`` bytes against
  ``4 * dim + 140`` for hnswlib float32 (M=16).
* ``keep_float=True`` (int8 only) also keeps the float32 rows (``4 * dim`` bytes more per vector) and re-scores the
  final ``ef`` candidates exactly before taking the top ``k`` (recall recovery).

Scores: the native API (``search``) returns similarities, higher is better: inner product for ``ip``/``cosine``,
negative squared L2 for ``l2``. The hnswlib API (``knn_query``) returns hnswlib's distances: ``1 - ip``,
``1 - cos`` and squared L2.

Ids: integers in ``[0, 2**63 - 1]``, for every call that takes them (``add``, ``add_items`` with or without
``replace_deleted``, ``mark_deleted``, ``get_items``...). ``search`` returns ids as int64 with ``-1`` as padding, so a
larger id could only come back negative; it is a ``ValueError`` instead (hnswlib takes any uint64). Ids that are not
integers (floats, even integral-valued ones, which lose precision above 2**53; bools; object arrays) are a
``TypeError``. Python ints of any size are converted exactly.

k: a search returns ``k`` results per query, padded with id ``-1`` (score ``-inf``; hnswlib's ``knn_query`` raises
instead) when fewer exist. ``k`` (and ``search_mmr``'s ``fetch_k``) may be at most ``max(element_count, 1024)``: a
larger ``k`` could only add padding (``k = 10**9`` would allocate 12 GB per query) and is a ``ValueError`` naming
``k``.

Row filters: ``search(..., allowed=...)`` keeps only the external ids a bool mask or a packed ``uint64`` bitset
allows (``allowed.py``: ``allowed_bitset`` from ids, ``pack_allowed`` from a mask, ``allowed_count``);
``Index.compile_filter`` compiles one for the searches that reuse it (a ``CompiledFilter``).
"""
from __future__ import annotations

from ._inputs import IndexInputError
from .allowed import CompiledFilter, allowed_bitset, allowed_count, pack_allowed
from .bruteforce import BFIndex
from .flat import FlatIndex
from .hnsw import Index, IndexStats

__all__ = [
    "Index", "FlatIndex", "BFIndex", "IndexInputError", "IndexStats", "CompiledFilter", "allowed_bitset",
    "allowed_count", "pack_allowed",
]
