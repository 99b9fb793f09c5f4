"""Fusion operators: MMR diversification, reciprocal rank fusion, score fusion.

The work happens in the native core (``medretrieve._core``, ``csrc/fusion``):
SIMD distance kernels, no n x n similarity matrix, the GIL released. This
module converts arguments to the dtypes the core expects, checks what the
binding cannot see (``device``, ``k`` and ``top_n`` as Python ints, per-query
list lengths) and documents the rules; the binding checks the rest (metric,
lambda, RRF ``k`` and weights, finite vectors...) with clear ``ValueError`` /
``TypeError``.

* :func:`mmr` / :func:`mmr_batch` -- maximal marginal relevance,
  ``MMR(d) = lambda * rel(d) - (1 - lambda) * max_{j in selected} sim(d, d_j)``.
* :func:`lambda_for` -- the dynamic lambda policy per query type.
* :func:`rrf` -- reciprocal rank fusion of ranked id lists.
* :func:`fuse_scores` -- min-max / z-score normalised, weighted score fusion.
* :func:`cuda_available`, :func:`cuda_exact_search` -- the optional CUDA back end
  (``device="cuda"`` on the operators above).
"""
from __future__ import annotations

import numbers
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _core

__all__ = [
    "mmr",
    "mmr_batch",
    "rrf",
    "fuse_scores",
    "lambda_for",
    "LAMBDA_POLICY",
    "LAMBDA_ALIASES",
    "cuda_available",
    "cuda_unavailable_reason",
    "cuda_exact_search",
]

ArrayLike = Union[np.ndarray, Sequence[float]]
Ranked = Tuple[np.ndarray, np.ndarray]

_METRICS = ("ip", "cosine", "l2")
_DEVICES = ("cpu", "cuda")

# --------------------------------------------------------------------------
# Dynamic lambda policy
# --------------------------------------------------------------------------

#: lambda per query type, all in [0.3, 0.9]. High lambda = relevance first
#: (fact-checking questions need the few passages that settle them; near
#: duplicates are harmless), low lambda = diversity first (exploratory
#: questions -- "treatment options", lists, summaries -- need coverage of
#: distinct aspects). Unknown types use ``"general"``. Edit this dict (or pass
#: ``overrides=``) to change the policy.
LAMBDA_POLICY: Dict[str, float] = {
    "yesno": 0.9,  # BioASQ yes/no: one decisive piece of evidence
    "factoid": 0.85,  # BioASQ factoid: a single entity or number
    "test": 0.8,  # which test / diagnostic value: precise facts
    "symptom": 0.7,  # symptoms of X: fairly focused, some spread
    "general": 0.5,  # no type known: balanced
    "summary": 0.4,  # BioASQ summary: several aspects of one topic
    "list": 0.35,  # BioASQ list: many distinct answers
    "treatment": 0.3,  # treatment options: widest coverage
}

#: Spellings accepted for the types above (after lower-casing and turning
#: spaces / hyphens / slashes into underscores).
LAMBDA_ALIASES: Dict[str, str] = {
    "yes_no": "yesno",
    "boolean": "yesno",
    "fact_check": "yesno",
    "fact_checking": "yesno",
    "factual": "factoid",
    "diagnostic": "test",
    "diagnosis": "test",
    "lab_test": "test",
    "tests": "test",
    "symptoms": "symptom",
    "treatments": "treatment",
    "treatment_options": "treatment",
    "therapy": "treatment",
    "management": "treatment",
    "exploratory": "treatment",
    "overview": "summary",
    "unknown": "general",
    "other": "general",
}


def _normalise_type(query_type: str) -> str:
    key = query_type.strip().lower()
    for ch in " -/":
        key = key.replace(ch, "_")
    return key


def _check_lambda(value: object, what: str) -> float:
    if type(value) is float and 0.0 <= value <= 1.0:  # the common case, fast
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be a real number, got {type(value).__name__}")
    value = float(value)
    if not (0.0 <= value <= 1.0):  # also rejects NaN
        raise ValueError(f"{what} must be in [0, 1], got {value}")
    return value


def lambda_for(query_type: str, overrides: Optional[Mapping[str, float]] = None) -> float:
    """MMR lambda for a query type: relevance-heavy for fact checks, diverse for exploration.

    Looks ``query_type`` up (case-insensitive; ``"treatment options"``,
    ``"yes/no"`` and the other spellings in :data:`LAMBDA_ALIASES` work) first
    in ``overrides``, then in :data:`LAMBDA_POLICY`. Unknown types get the
    ``"general"`` value (0.5 by default). The shipped policy stays in
    [0.3, 0.9]; overrides may use any value in [0, 1].

    >>> lambda_for("yesno"), lambda_for("Treatment options"), lambda_for("???")
    (0.9, 0.3, 0.5)
    """
    if not isinstance(query_type, str):
        raise TypeError(f"query_type must be a str, got {type(query_type).__name__}")
    table: Dict[str, float] = {}
    for name, value in LAMBDA_POLICY.items():
        table[_normalise_type(name)] = value
    if overrides is not None:
        if not isinstance(overrides, Mapping):
            raise TypeError("overrides must be a mapping of query type -> lambda")
        for name, value in overrides.items():
            if not isinstance(name, str):
                raise TypeError("override keys must be query-type strings")
            table[_normalise_type(name)] = _check_lambda(value, f"override for {name!r}")
    key = _normalise_type(query_type)
    if key not in table:
        key = LAMBDA_ALIASES.get(key, key)
    if key not in table:
        key = "general"
    if key not in table:
        raise ValueError("LAMBDA_POLICY has no 'general' entry for unknown query types")
    return _check_lambda(table[key], f"lambda for {query_type!r}")


# --------------------------------------------------------------------------
# Argument checks shared by the operators
# --------------------------------------------------------------------------


def _check_k(k: object, what: str = "k") -> int:
    if type(k) is int and k >= 0:  # the common case, fast
        return k
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise TypeError(f"{what} must be an int, got {type(k).__name__}")
    if k < 0:
        raise ValueError(f"{what} must be >= 0, got {k}")
    return int(k)


def _check_device(device: str) -> None:
    if device not in _DEVICES:
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if device == "cuda":
        ok, why = _core._cuda_available()
        if not ok:
            raise RuntimeError(f"CUDA is not available: {why}")


def _candidates(candidates: object, what: str = "candidates") -> np.ndarray:
    if not isinstance(candidates, np.ndarray):
        candidates = np.asarray(candidates)
    if candidates.ndim != 2:
        raise ValueError(f"{what} must be a 2-d array (n, dim), got shape {candidates.shape}")
    if candidates.dtype == np.int8:
        return np.ascontiguousarray(candidates)
    if candidates.dtype.kind == "f":
        return np.ascontiguousarray(candidates, dtype=np.float32)
    raise TypeError(f"{what} must be float32 or int8, got dtype {candidates.dtype}")


def _float_vector(x: object, length: int, what: str, check_finite: bool = True) -> np.ndarray:
    if type(x) is np.ndarray and x.dtype == np.float32 and x.ndim == 1 and x.flags.c_contiguous:
        if x.shape[0] != length:
            raise ValueError(f"{what} must be 1-d with {length} entries, got shape {x.shape}")
        if check_finite and not np.isfinite(x).all():
            raise ValueError(f"{what} contains NaN or inf")
        return x
    arr = np.asarray(x)
    if arr.dtype.kind not in "fiu" or arr.dtype == np.bool_:
        raise TypeError(f"{what} must be numeric, got dtype {arr.dtype}")
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    if arr.ndim != 1 or arr.shape[0] != length:
        raise ValueError(f"{what} must be 1-d with {length} entries, got shape {arr.shape}")
    if check_finite and not np.isfinite(arr).all():
        raise ValueError(f"{what} contains NaN or inf")
    return arr


def _mmr_args(
    query: object,
    candidates: object,
    relevance: object,
    scales: object,
    metric: str,
    what: str,
) -> Tuple[np.ndarray, Optional[np.ndarray], Optional[np.ndarray], Optional[np.ndarray]]:
    # NaN / inf, negative scales, scales beside float32 rows, neither a query
    # nor a relevance vector: refused by the binding (convert.cpp, one pass
    # over each vector, no extra copies). Here only conversions and shapes.
    if type(candidates) is np.ndarray and candidates.ndim == 2 and candidates.flags.c_contiguous and (
        candidates.dtype == np.float32 or candidates.dtype == np.int8
    ):
        cand = candidates
    else:
        cand = _candidates(candidates, f"{what}candidates")
    n, dim = cand.shape
    q = None if query is None else _float_vector(query, dim, f"{what}query", False)
    rel = None if relevance is None else _float_vector(relevance, n, f"{what}relevance", False)
    sc = None if scales is None else _float_vector(scales, n, f"{what}scales", False)
    return cand, q, rel, sc


# --------------------------------------------------------------------------
# MMR
# --------------------------------------------------------------------------


def mmr(
    query: Optional[ArrayLike],
    candidates: np.ndarray,
    k: int,
    lambda_: float = 0.5,
    relevance: Optional[ArrayLike] = None,
    *,
    metric: str = "ip",
    scales: Optional[ArrayLike] = None,
    device: str = "cpu",
) -> Ranked:
    """Maximal marginal relevance: pick ``k`` diverse, relevant candidates.

    ``MMR(d) = lambda_ * rel(d) - (1 - lambda_) * max_{j selected} sim(d, d_j)``,
    chosen greedily; each pick updates every remaining candidate's max-similarity
    with one kernel call (O(k * n * dim), no n x n matrix).

    Args:
        query: float (or int8, read as its values) vector of ``dim``; may be
            ``None`` when ``relevance`` is given.
        candidates: (n, dim) float32 or int8 matrix (other float dtypes are
            converted to float32). int8 rows stand for ``scales[i] * row_i``.
        k: how many to select (``k > n`` selects all n).
        lambda_: in [0, 1]; 1 = pure relevance, 0 = pure diversity.
        relevance: optional (n,) relevance scores overriding ``sim(query, d)``.
        metric: similarity used for ``rel`` and between candidates:
            ``"ip"`` (inner product), ``"cosine"`` or ``"l2"`` (``-||a - b||^2``).
        scales: optional (n,) per-row scales of int8 candidates (default 1.0).
        device: ``"cpu"`` or ``"cuda"``.

    Returns:
        ``(order, scores)``: int64 positions into ``candidates`` in pick order
        and float32 MMR values at selection time. The first pick is the most
        relevant candidate (score ``lambda_ * rel``); ties go to the higher
        relevance, then to the lower position.
    """
    k = _check_k(k)
    _check_device(device)
    cand, q, rel, sc = _mmr_args(query, candidates, relevance, scales, metric, "")
    if device == "cuda":
        results, _ = _core._cuda_mmr_batch(
            [cand], k, lambda_, None if q is None else [q],
            None if rel is None else [rel], metric, None if sc is None else [sc],
        )
        return results[0]
    return _core._mmr(cand, k, lambda_, q, rel, metric, sc)


def mmr_batch(
    queries: Optional[Sequence[ArrayLike]],
    candidates_list: Sequence[np.ndarray],
    k: int,
    lambdas: Union[float, ArrayLike] = 0.5,
    relevances: Optional[Sequence[Optional[ArrayLike]]] = None,
    *,
    metric: str = "ip",
    scales: Optional[Sequence[Optional[ArrayLike]]] = None,
    device: str = "cpu",
    threads: int = 0,
) -> List[Ranked]:
    """:func:`mmr` for many queries at once, on a native thread pool (GIL released).

    ``candidates_list[b]`` is query ``b``'s candidate matrix (sizes may differ);
    ``lambdas`` is one value for all or one per query; ``queries``,
    ``relevances`` and ``scales`` are ``None`` or one entry per query (an entry
    may be ``None``). ``threads=0`` uses every core. Returns one
    ``(order, scores)`` pair per query, identical to calling :func:`mmr`.
    On ``device="cuda"`` every candidate matrix must share dtype and dim.
    """
    k = _check_k(k)
    threads = _check_k(threads, "threads")
    _check_device(device)
    if isinstance(candidates_list, np.ndarray) and candidates_list.ndim == 3:
        candidates_list = list(candidates_list)
    if not isinstance(candidates_list, (list, tuple)):
        raise TypeError("candidates_list must be a list of (n, dim) matrices")
    B = len(candidates_list)
    def per_query(seq: Optional[Sequence[object]], name: str) -> List[object]:
        if seq is None:
            return [None] * B
        if len(seq) != B:
            raise ValueError(f"{name} has {len(seq)} entries for {B} candidate matrices")
        return list(seq)

    qs, rels, scs = per_query(queries, "queries"), per_query(relevances, "relevances"), per_query(scales, "scales")
    cands: List[np.ndarray] = []
    q_out: List[Optional[np.ndarray]] = []
    r_out: List[Optional[np.ndarray]] = []
    s_out: List[Optional[np.ndarray]] = []
    for b in range(B):
        c, q, r, s = _mmr_args(qs[b], candidates_list[b], rels[b], scs[b], metric, f"query {b}: ")
        cands.append(c)
        q_out.append(q)
        r_out.append(r)
        s_out.append(s)
    if device == "cuda":
        results, _ = _core._cuda_mmr_batch(cands, k, lambdas, q_out, r_out, metric, s_out)
        return results
    return _core._mmr_batch(cands, k, lambdas, q_out, r_out, metric, s_out, threads)


# --------------------------------------------------------------------------
# RRF and score fusion
# --------------------------------------------------------------------------


def _check_top_n(top_n: Optional[int]) -> Optional[int]:
    if top_n is None:
        return None
    return _check_k(top_n, "top_n")


def _check_lists(lists: object, what: str) -> list:
    if isinstance(lists, (str, bytes)) or not isinstance(lists, (list, tuple, np.ndarray)):
        raise TypeError(f"{what} must be a list of ranked id lists")
    return list(lists)


def _first(ids: np.ndarray, scores: np.ndarray, top: Optional[int]) -> Ranked:
    """The binding's result, cut to zero entries when the caller asked for top_n=0 (the binding's "all")."""
    return (ids[:0], scores[:0]) if top == 0 else (ids, scores)


def rrf(
    ranked_lists: Sequence[Union[np.ndarray, Sequence[int]]],
    k: float = 60,
    weights: Optional[Sequence[float]] = None,
    top_n: Optional[int] = None,
    *,
    device: str = "cpu",
) -> Ranked:
    """Reciprocal rank fusion: ``score(id) = sum_l w_l / (k + rank_l(id))``, ranks from 1.

    Args:
        ranked_lists: any number of lists of integer ids, best first, of any
            lengths (NumPy integer arrays are read without copying; Python
            lists of ints are read item by item). Map string ids to ints first.
            Ids must fit in int64 (uint64 ids >= 2**63 are a ValueError, as in
            ``Index``: results are int64); bools and floats are a TypeError.
        k: the RRF constant (>= 0; 60 is the usual choice).
        weights: optional per-list weights (finite, >= 0; default 1).
        top_n: keep the best ``top_n`` ids (default all).
        device: ``"cpu"`` or ``"cuda"``.

    Rules: ranks are positions in each list as given; an id repeated inside a
    list counts once, at its first (best) position. Output order is
    deterministic: higher fused score, then better best single rank over all
    lists, then smaller id. Sums run in float64; scores come back float32.

    Returns:
        ``(ids int64, scores float32)``, best first.
    """
    lists = _check_lists(ranked_lists, "ranked_lists")
    top = _check_top_n(top_n)
    _check_device(device)
    # The binding checks k and weights (and reads top_n=0 as "all"): top_n=0
    # goes through it too, so bad arguments are refused whatever top_n is.
    if device == "cuda":
        ids, scores, _ = _core._cuda_rrf(lists, k, weights, top or 0)
    else:
        ids, scores = _core._rrf(lists, k, weights, top or 0)
    return _first(ids, scores, top)


def fuse_scores(
    id_lists: Sequence[Union[np.ndarray, Sequence[int]]],
    score_lists: Sequence[ArrayLike],
    method: str = "minmax",
    weights: Optional[Sequence[float]] = None,
    top_n: Optional[int] = None,
) -> Ranked:
    """Score-level fusion: normalise each list's scores, weight and sum them.

    * ``"minmax"``: ``(s - min) / (max - min)`` per list (a list whose scores
      are all equal maps them to 1); an id missing from a list gets 0 from it.
    * ``"zscore"``: ``(s - mean) / std`` per list (population std; a constant
      list maps to 0); an id missing from a list gets that list's minimum
      normalised value, i.e. it counts as ranked below everything returned.

    An id repeated inside one list keeps its highest score (statistics use one
    score per id). Output order: higher fused score, then smaller id. Ids
    follow :func:`rrf`'s rule (int64 range, no bools or floats).

    Returns:
        ``(ids int64, scores float32)``, best first, at most ``top_n``.
    """
    ids = _check_lists(id_lists, "id_lists")
    scores = _check_lists(score_lists, "score_lists")
    top = _check_top_n(top_n)
    # The binding checks the method, the list counts and the weights.
    score_arrays = []
    for i, s in enumerate(scores):
        arr = np.asarray(s)
        if arr.dtype.kind not in "fiu" or arr.dtype == np.bool_:
            raise TypeError(f"score list {i} must be numeric, got dtype {arr.dtype}")
        score_arrays.append(np.ascontiguousarray(arr, dtype=np.float32))
    fused_ids, fused_scores = _core._fuse_scores(ids, score_arrays, method, weights, top or 0)
    return _first(fused_ids, fused_scores, top)


# --------------------------------------------------------------------------
# CUDA back end
# --------------------------------------------------------------------------


def cuda_available() -> bool:
    """True when the CUDA kernels can run: built with CUDA and a GPU + driver are present."""
    return bool(_core._cuda_available()[0])


def cuda_unavailable_reason() -> str:
    """Why :func:`cuda_available` is False ("" when it is True)."""
    ok, why = _core._cuda_available()
    return "" if ok else str(why)


def cuda_exact_search(
    queries: np.ndarray,
    database: np.ndarray,
    k: int,
    metric: str = "ip",
    *,
    query_scales: Optional[ArrayLike] = None,
    database_scales: Optional[ArrayLike] = None,
) -> Ranked:
    """Exact top-``k`` search on the GPU (int8 on tensor cores with int32 sums, or float32).

    ``queries`` (nq, dim) and ``database`` (n, dim) are both float32 or both
    int8 (int8 rows stand for ``scale * code``; scales default to 1).
    ``metric``: ``"ip"``, ``"l2"`` (scores ``-||q - x||^2``) or ``"cosine"``
    (float32 only). Returns ``(ids (nq, k) int64, scores (nq, k) float32)``,
    best first, ties to the smaller row id; when ``k > n`` the tail is id -1,
    score -inf. Raises RuntimeError when CUDA is not available.
    """
    _check_device("cuda")
    if metric not in _METRICS:
        raise ValueError(f"metric must be one of {_METRICS}, got {metric!r}")
    k = _check_k(k)
    q = _candidates(queries, "queries")
    db = _candidates(database, "database")
    if q.dtype != db.dtype:
        raise TypeError(f"queries ({q.dtype}) and database ({db.dtype}) must share a dtype")
    if q.shape[1] != db.shape[1]:
        raise ValueError(f"queries have dim {q.shape[1]}, database {db.shape[1]}")
    qs = ds = None
    if db.dtype == np.int8:
        if metric == "cosine":
            raise ValueError("cosine needs float32 vectors (normalise them first)")
        if query_scales is not None:
            qs = _float_vector(query_scales, q.shape[0], "query_scales")
        if database_scales is not None:
            ds = _float_vector(database_scales, db.shape[0], "database_scales")
    elif query_scales is not None or database_scales is not None:
        raise ValueError("scales apply only to int8 vectors")
    if metric == "cosine":
        q = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), np.finfo(np.float32).tiny)
        db = db / np.maximum(np.linalg.norm(db, axis=1, keepdims=True), np.finfo(np.float32).tiny)
        metric = "ip"
    if k == 0 or q.shape[0] == 0:
        return np.zeros((q.shape[0], k), np.int64), np.zeros((q.shape[0], k), np.float32)
    ids, scores, _ = _core._cuda_exact_search(q, db, k, metric, qs, ds)
    return ids, scores
