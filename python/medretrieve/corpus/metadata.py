"""Typed document metadata and the filters over it: a collection's fields (name -> type), each document's values
in columns, a parsed filter (:mod:`medretrieve.filters`) compiled to a boolean mask over documents (then over rows
by each row's document), and facet counts.

Types (:data:`~medretrieve.filters.FIELD_TYPES`) are declared at build time or inferred from the values
(:func:`infer_fields`): booleans, integers, floats, ISO dates (``YYYY``, ``YYYY-MM``, ``YYYY-MM-DD``), strings
(keyword) and lists of strings (keywords). A value that does not fit its field's type counts as missing; a
comparison with a missing value is false (``not`` of it true).
"""
from __future__ import annotations

import datetime as _dt
import re
from collections import Counter
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..filters import (FIELD_TYPES, All, AnyOf, Compare, Filter, FilterError, Flag, Member, Not, check_fields,
                       parse_filter)

__all__ = ["infer_fields", "FieldInference", "check_declared", "declared_fields", "fits", "misfits", "MetadataColumns", "date_days"]

_EPOCH = _dt.date(1970, 1, 1)
_DATE = re.compile(r"(\d{4})(?:-(\d{2})(?:-(\d{2}))?)?$")
# record bookkeeping, not document fields a user filters by
_NOT_FIELDS = {"source", "snippet_offsets"}


def date_days(value: Any) -> Optional[float]:
    """Days since 1970-01-01 of an ISO date ``YYYY[-MM[-DD]]`` (a year alone: its 1 January), None when not one."""
    if isinstance(value, int) and not isinstance(value, bool) and 1000 <= value <= 9999:
        value = str(value)
    m = _DATE.match(value) if isinstance(value, str) else None
    if m is None:
        return None
    try:
        day = _dt.date(int(m.group(1)), int(m.group(2) or 1), int(m.group(3) or 1))
    except ValueError:
        return None
    return float((day - _EPOCH).days)


def _kind_of(value: Any) -> Optional[str]:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "date" if date_days(value) is not None else "keyword"
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return "keywords"
    return None


class FieldInference:
    """The fields of documents' metadata inferred as they stream by (:meth:`add` each document's, then
    :meth:`fields`): what :func:`infer_fields` gives, without holding the documents (an out-of-core build)."""

    def __init__(self) -> None:
        self._seen: Dict[str, set] = {}

    def add(self, meta: Mapping[str, Any]) -> None:
        """Count one document's metadata."""
        for name, value in meta.items():
            if name in _NOT_FIELDS or value is None:
                continue
            self._seen.setdefault(name, set()).add(_kind_of(value))

    def fields(self) -> Dict[str, str]:
        """Field name -> type over the documents added (:func:`infer_fields`)."""
        out: Dict[str, str] = {}
        for name, seen in sorted(self._seen.items()):
            kinds = set(seen)
            if None in kinds:
                continue
            if kinds <= {"integer", "float"}:
                out[name] = "float" if "float" in kinds else "integer"
            elif kinds <= {"keyword", "keywords", "date"}:
                out[name] = "keywords" if "keywords" in kinds else "date" if kinds == {"date"} else "keyword"
            elif len(kinds) == 1:
                out[name] = kinds.pop()
        return out


def infer_fields(metadata: Iterable[Mapping[str, Any]]) -> Dict[str, str]:
    """Field name -> type over documents' metadata: a field whose values agree on one type (integers with floats:
    float; keywords with keyword lists: keywords; dates with other strings: keyword) gets it; others (nested
    objects, mixed types) are not filterable."""
    inference = FieldInference()
    for meta in metadata:
        inference.add(meta)
    return inference.fields()


def check_declared(fields: Mapping[str, str]) -> Dict[str, str]:
    """Declared fields (name -> type) checked: ValueError naming an unknown type."""
    bad = {n: t for n, t in fields.items() if t not in FIELD_TYPES or not isinstance(n, str) or not n}
    if bad:
        raise ValueError(f"metadata fields {bad} have unknown types; known: {', '.join(FIELD_TYPES)}")
    return dict(fields)


def fits(kind: str, value: Any) -> bool:
    """Whether ``value`` is one of a ``kind`` field's values (what :class:`MetadataColumns` reads; any other
    value counts as missing): a boolean, an integer (a whole float too), a number, an ISO date (or a year), a
    string, or a string or list of strings for ``keywords``."""
    if kind == "boolean":
        return isinstance(value, bool)
    if kind in ("integer", "float"):
        number = _number(value)
        return number is not None and (kind == "float" or float(number).is_integer())
    if kind == "date":
        return date_days(value) is not None
    if kind == "keyword":
        return isinstance(value, str)
    return isinstance(value, str) or (isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value))


def misfits(metadata: Iterable[Mapping[str, Any]], fields: Mapping[str, str]) -> Dict[str, Tuple[int, Any]]:
    """Per declared field, the documents whose value (present, not None) does not fit its type, counted, with the
    first such value: ``{name: (count, example)}``, only the fields with any."""
    out: Dict[str, Tuple[int, Any]] = {}
    for meta in metadata:
        for name, kind in fields.items():
            value = meta.get(name)
            if value is not None and not fits(kind, value):
                count, example = out.get(name, (0, value))
                out[name] = (count + 1, example)
    return out


def declared_fields(manifest: Mapping[str, Any]) -> Optional[Dict[str, str]]:
    """The fields a collection's manifest records as declared (:meth:`Collection.declare_metadata
    <.collection.Collection.declare_metadata>`), None when its fields are inferred from the values."""
    recorded = manifest.get("metadata") or {}
    return dict(recorded.get("fields") or {}) if recorded.get("declared") else None


class MetadataColumns:
    """Per-document values of typed fields, as arrays (numbers, dates as days, booleans) and inverted lists
    (keyword values -> documents); filters compile to document masks, kept per filter text."""

    def __init__(self, metadata: Sequence[Mapping[str, Any]], fields: Mapping[str, str]) -> None:
        self.fields = dict(fields)
        self.n = len(metadata)
        self._numbers: Dict[str, np.ndarray] = {}
        self._flags: Dict[str, np.ndarray] = {}
        self._postings: Dict[str, Dict[str, np.ndarray]] = {}
        for name, kind in self.fields.items():
            values = [m.get(name) for m in metadata]
            if kind in ("integer", "float", "date"):
                read = date_days if kind == "date" else _number
                self._numbers[name] = np.array([_nan(read(v)) for v in values], dtype=np.float64)
            elif kind == "boolean":
                self._flags[name] = np.array([v is True for v in values], dtype=bool)
                self._numbers[name] = np.array([1.0 if v is True else 0.0 if v is False else np.nan
                                                for v in values])
            else:
                lists: Dict[str, List[int]] = {}
                for doc, v in enumerate(values):
                    for item in ([v] if isinstance(v, str) else v if isinstance(v, (list, tuple)) else ()):
                        if isinstance(item, str):
                            lists.setdefault(item, []).append(doc)
                self._postings[name] = {k: np.unique(np.asarray(d, dtype=np.int64)) for k, d in lists.items()}
        self._masks: Dict[str, np.ndarray] = {}

    def present(self, name: str) -> np.ndarray:
        """Boolean mask over documents holding a value of field ``name`` that fits its type."""
        if name in self._postings:
            out = np.zeros(self.n, dtype=bool)
            for docs in self._postings[name].values():
                out[docs] = True
            return out
        return ~np.isnan(self._numbers[name])

    def mask(self, where: Any) -> np.ndarray:
        """Boolean mask over documents of the filter (text, JSON or parsed), read-only and kept per filter;
        FilterError naming an unknown field or an ill-typed comparison."""
        parsed = parse_filter(where)
        key = parsed.text()
        got = self._masks.get(key)
        if got is None:
            check_fields(parsed, self.fields)
            got = self._eval(parsed)
            got.flags.writeable = False
            if len(self._masks) >= 256:  # distinct filters kept: a bounded cache
                self._masks.pop(next(iter(self._masks)))
            self._masks[key] = got
        return got

    def _eval(self, node: Filter) -> np.ndarray:
        if isinstance(node, All):
            out = self._eval(node.parts[0]).copy()
            for p in node.parts[1:]:
                out &= self._eval(p)
            return out
        if isinstance(node, AnyOf):
            out = self._eval(node.parts[0]).copy()
            for p in node.parts[1:]:
                out |= self._eval(p)
            return out
        if isinstance(node, Not):
            return ~self._eval(node.part)
        if isinstance(node, Flag):
            return self._flags[node.field].copy()
        name = node.fields()[0]
        kind = self.fields[name]
        if name in self._postings:
            postings = self._postings[name]
            wanted = node.values if isinstance(node, Member) else (node.value,)  # type: ignore[attr-defined]
            out = np.zeros(self.n, dtype=bool)
            for v in wanted:
                got = postings.get(v) if isinstance(v, str) else None  # (check_fields: keyword values are strings)
                if got is not None:
                    out[got] = True
            if isinstance(node, Compare) and node.op == "!=":
                return self.present(name) & ~out
            return out
        column = self._numbers[name]
        if isinstance(node, Member):
            targets = [self._target(kind, v) for v in node.values]
            return np.isin(column, targets)
        assert isinstance(node, Compare)
        target = self._target(kind, node.value)
        with np.errstate(invalid="ignore"):
            if node.op == "==":
                return column == target
            if node.op == "!=":
                return ~np.isnan(column) & (column != target)
            return {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal}[node.op](
                column, target)

    @staticmethod
    def _target(kind: str, value: Any) -> float:
        if kind == "boolean":
            return 1.0 if value else 0.0
        if kind == "date":
            days = date_days(value)
            if days is None:
                raise FilterError(f"where: {value!r} is not a date (YYYY, YYYY-MM or YYYY-MM-DD)")
            return days
        return float(value)

    def facet(self, name: str, docs: np.ndarray, top: Optional[int] = None) -> List[Tuple[Any, int]]:
        """Counts of ``name``'s values over the documents ``docs`` (indices, a document counted once per value),
        most frequent first (ties by value); FilterError for an unknown field. Dates count by year."""
        kind = self.fields.get(name)
        if kind is None:
            raise FilterError(f"facet: unknown field {name!r}; the collection's fields: "
                              f"{', '.join(sorted(self.fields)) or 'none'}", name)
        docs = np.unique(np.asarray(docs, dtype=np.int64))
        counts: Counter = Counter()
        if name in self._postings:
            for value, holders in self._postings[name].items():
                n = int(np.isin(holders, docs, assume_unique=True).sum())
                if n:
                    counts[value] = n
        else:
            column = self._numbers[name][docs]
            column = column[~np.isnan(column)]
            if kind == "date":
                column = np.array([(_EPOCH + _dt.timedelta(days=int(d))).year for d in column], dtype=np.float64)
            values, tallies = np.unique(column, return_counts=True)
            for v, c in zip(values.tolist(), tallies.tolist()):
                counts[_display(kind, v)] = int(c)
        ordered = sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0])))
        return ordered[:top] if top is not None else ordered


def _number(value: Any) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _nan(value: Optional[float]) -> float:
    return np.nan if value is None else value


def _display(kind: str, value: float) -> Any:
    if kind == "boolean":
        return bool(value)
    if kind in ("integer", "date"):
        return int(value)
    return float(value)
