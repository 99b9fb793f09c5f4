"""Argument normalisation shared by the index classes (dtype, contiguity, 1-d rows, ids, label lists)."""
from __future__ import annotations

import operator
from typing import Any, Optional, Sequence, Union

import numpy as np

SPACES = ("l2", "ip", "cosine")
DTYPES = ("float32", "int8")
MAX_LABEL = 2**32 - 1
MAX_ID = 2**63 - 1
ID_RULE = "ids must be integers in [0, 2**63 - 1] (search returns int64 ids, with -1 as padding)"

LabelsArg = Union[None, int, Sequence[int], Sequence[Sequence[int]], np.ndarray]


class IndexInputError(ValueError, RuntimeError):
    """Bad input to an index call.

    Subclasses both ``ValueError`` (what the native API promises) and ``RuntimeError`` (what hnswlib raises for the
    same mistakes), so code written for either keeps catching it.
    """


# ---------------------------------------------------------------------------
# input normalisation


def as_rows(data: Any, dim: int, what: str = "vectors") -> np.ndarray:
    """C-contiguous float32 rows of width ``dim`` (1-d = one row). NaN / inf are rejected natively."""
    if type(data) is np.ndarray and data.dtype == np.float32 and data.flags.c_contiguous and data.ndim in (1, 2):
        arr = data  # fast path for the latency-critical single query: no copy, no reshape
    else:
        arr = np.asarray(data)
        if arr.dtype.kind not in "fiu":
            raise TypeError(f"{what} must be a numeric array (float or int), got dtype {arr.dtype}")
        if arr.ndim not in (1, 2):
            raise IndexInputError(f"{what} must be a 1-d or 2-d array, got {arr.ndim} dimensions")
        if arr.dtype != np.float32:
            with np.errstate(over="ignore", invalid="ignore"):
                arr = arr.astype(np.float32)  # values beyond float32 range become inf: rejected natively
        arr = np.ascontiguousarray(arr)
    if arr.shape[-1] != dim:
        raise IndexInputError(f"Wrong dimensionality of the {what}: got {arr.shape[-1]}, the index has dim={dim}")
    return arr if arr.ndim == 2 else arr.reshape(1, -1)


def as_ids(ids: Any, n: int) -> Optional[np.ndarray]:
    """uint64 ids, one per row, or None (default ids)."""
    return None if ids is None else id_array(ids, n)


def id_array(ids: Any, n: int) -> np.ndarray:
    """``n`` ids as C-contiguous uint64, checked against the id rule (module docstring, "Ids")."""
    arr = ids if isinstance(ids, np.ndarray) else ids_from_python(ids)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise IndexInputError("ids must be a scalar or a 1-d sequence")
    if arr.shape[0] != n:
        raise IndexInputError(f"The input label shape {arr.shape[0]} does not match the input data vector shape {n}")
    if arr.dtype.kind not in "iu":  # floats (even integral-valued ones would round above 2**53), bools, objects
        raise TypeError(f"ids must be integers, got dtype {arr.dtype}")
    if arr.size:
        if arr.dtype.kind == "i" and arr.min() < 0:
            raise IndexInputError("ids must be non-negative integers")
        if arr.dtype.kind == "u" and int(arr.max()) > MAX_ID:
            raise IndexInputError(f"id {int(arr.max())} is out of range: {ID_RULE}")
    return np.ascontiguousarray(arr, dtype=np.uint64)


def item_ids(ids: Any) -> np.ndarray:
    """The ids of a ``get_items`` call: a sequence or array of any shape (flattened, as hnswlib reads the labels
    ``knn_query`` returns); a single id is a ``ValueError`` (not a RuntimeError), as in hnswlib."""
    arr = np.asarray(ids)
    if arr.ndim == 0:
        raise ValueError("get_items takes a list of ids and returns one vector per id: pass [id] for one")
    return id_array(arr.reshape(-1), arr.size)


def ids_from_python(ids: Any) -> np.ndarray:
    """Python ids (an int, a list, a range...) as an integer array, exactly: NumPy's own conversion when it gives
    integers, else item by item (a list mixing large and negative ints would otherwise become float64)."""
    arr = np.asarray(ids)
    if arr.dtype.kind in "iu":
        return arr
    items = [ids] if arr.ndim == 0 else list(ids)
    return np.array([as_id(v) for v in items], dtype=np.uint64)


def as_id(value: Any) -> int:
    """One id as a Python int, checked against the id rule."""
    if isinstance(value, (bool, np.bool_)) or isinstance(value, (float, np.floating)):
        raise TypeError(f"ids must be integers, got {type(value).__name__} {value!r}")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"ids must be integers, got {type(value).__name__}") from None
    if v < 0:
        raise IndexInputError("ids must be non-negative integers")
    if v > MAX_ID:
        raise IndexInputError(f"id {v} is out of range: {ID_RULE}")
    return v


def int_arg(value: Any, what: str) -> int:
    """An integer argument as a Python int: ints and NumPy integers, never bools or floats (no silent rounding)."""
    if type(value) is int:  # the common case first: every search checks k and num_threads
        return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} must be an integer, got {type(value).__name__}")
    return int(value)


def label_list(row: Any) -> list[int]:
    if isinstance(row, (str, bytes)):
        raise TypeError("labels must be integers")
    try:
        items = [row] if isinstance(row, (int, np.integer, bool, np.bool_)) else list(row)
    except TypeError as exc:
        raise TypeError("labels must be integers or lists of integers") from exc
    vals = [int_arg(v, "labels") for v in items]
    for v in vals:
        if v < 0 or v > MAX_LABEL:
            raise IndexInputError(f"labels must be in [0, 2**32 - 1], got {v}")
    return vals


def labels_csr(labels: LabelsArg, n: int) -> tuple[Optional[np.ndarray], Optional[np.ndarray]]:
    """Per-row labels -> (offsets int64 [n+1], values uint32): one int per row, a list of int lists, or None."""
    if labels is None:
        return None, None
    if isinstance(labels, np.ndarray) and labels.ndim == 1 and labels.dtype.kind in "iu":
        if labels.shape[0] != n:
            raise IndexInputError(f"labels must have one entry per row ({n}), got {labels.shape[0]}")
        if labels.size and (labels.min() < 0 or labels.max() > MAX_LABEL):
            raise IndexInputError("labels must be in [0, 2**32 - 1]")
        return np.arange(n + 1, dtype=np.int64), np.ascontiguousarray(labels.astype(np.uint32))
    if isinstance(labels, (int, np.integer)):
        raise TypeError("labels must be a sequence with one entry (an int or a list of ints) per row")
    rows = list(labels)
    if len(rows) != n:
        raise IndexInputError(f"labels must have one entry per row ({n}), got {len(rows)}")
    lists = [label_list(r) for r in rows]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum([len(x) for x in lists], out=offsets[1:])
    values = np.fromiter((v for x in lists for v in x), dtype=np.uint32, count=int(offsets[-1]))
    return offsets, values


def query_labels(labels: Any) -> Optional[list[int]]:
    if labels is None:
        return None
    return label_list(labels)


def check_count(value: Any, what: str) -> int:
    """A positive integer argument (k, fetch_k, ef). Bounds relative to the index are checked natively."""
    v = int_arg(value, what)
    if v < 1:
        raise IndexInputError(f"{what} must be a positive integer, got {v}")
    if v > MAX_ID:
        raise IndexInputError(f"{what}={v} is too large")
    return v


def check_k(k: Any) -> int:
    return check_count(k, "k")


def check_threads(num_threads: Any) -> int:
    """num_threads: an integer; <= 0 means every core, larger counts are capped at the hardware threads natively."""
    if num_threads is None:
        return -1
    return max(-1, min(int_arg(num_threads, "num_threads"), 2**31 - 1))


def as_ef(ef: Any, nq: int) -> Optional[np.ndarray]:
    if ef is None:
        return None
    if isinstance(ef, (bool, np.bool_)):
        raise TypeError("ef must be an int or an array of ints")
    arr = np.asarray(ef)
    if arr.dtype.kind == "O" and all(isinstance(v, int) and not isinstance(v, bool) for v in arr.reshape(-1)):
        raise IndexInputError("ef values must be integers in [1, 2**63 - 1]")  # Python ints beyond uint64
    if arr.dtype.kind not in "iu":
        raise TypeError("ef must be an int or an array of ints")
    arr = arr.reshape(-1)
    if arr.shape[0] not in (1, nq):
        raise IndexInputError(f"ef must be one int or one per query ({nq}), got {arr.shape[0]}")
    if arr.size and (arr < 1).any():
        raise IndexInputError("ef values must be positive")
    if arr.size and arr.dtype.kind == "u" and int(arr.max()) > MAX_ID:
        raise IndexInputError("ef values must be integers in [1, 2**63 - 1]")
    return np.ascontiguousarray(arr.astype(np.uint64))


def check_space(space: str) -> str:
    if space not in SPACES:
        raise IndexInputError("Space name must be one of l2, ip, or cosine.")
    return space


def check_dim(dim: Any) -> int:
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
        raise IndexInputError(f"dim must be a positive integer, got {dim!r}")
    return int(dim)


def check_dtype(dtype: str) -> str:
    dtype = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    if dtype not in DTYPES:
        raise IndexInputError(f"dtype must be 'float32' or 'int8', got {dtype!r}")
    return dtype

