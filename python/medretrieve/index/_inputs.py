"""What the index classes check themselves: the arguments of a constructor that runs before any native object
exists (space, dim, dtype) and of the hnswlib-style limits kept in Python. Every other argument goes to the
native binding unchanged, which checks it once (``csrc/bindings/args.h``) and raises ``IndexInputError`` (a
``ValueError`` and a ``RuntimeError``) or ``TypeError``."""
from __future__ import annotations

from typing import Any, Sequence, Union

import numpy as np

from .. import _core

IndexInputError = _core.IndexInputError

SPACES = ("l2", "ip", "cosine")
DTYPES = ("float32", "int8")

LabelsArg = Union[None, int, Sequence[int], Sequence[Sequence[int]], np.ndarray]


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


def non_negative(value: Any, what: str) -> int:
    """An integer >= 0 (ints and NumPy integers; never bools or floats)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} must be an integer, got {type(value).__name__}")
    if value < 0:
        raise IndexInputError(f"{what} must be >= 0, got {value}")
    return int(value)
