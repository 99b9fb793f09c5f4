"""A metadata filter (:mod:`medretrieve.filters`) as PubMed esearch terms, so an online search asks PubMed for
the records that can pass it rather than filtering a page of the wrong ones.

The fields a MEDLINE record gives (:data:`MEDLINE_FIELDS`) map onto PubMed's search tags: ``year`` and
``publication_date`` -> ``[dp]`` dates and ranges (``2015:3000[dp]``), ``publication_type`` -> ``[pt]``, ``mesh``
-> ``[mh]``, ``mesh_major`` -> ``[majr]``, ``journal`` (the journal's title) -> ``[jour]``, ``language`` ->
``[la]``, ``retracted`` -> ``retracted publication[pt]``; ``and`` / ``or`` / ``not`` -> ``AND`` / ``OR`` / ``NOT``
(``not x`` alone: ``all[sb] NOT x``, PubMed's NOT needing a left side).

A part that does not map (another field, a date PubMed cannot write) is left out where leaving it out only widens
the search (a part of an ``and``); where it would narrow it (a part of an ``or``, the inside of a ``not``) the
whole ``or`` / ``not`` is left out. So the term asks for a superset of the records passing the filter, as PubMed
indexes them; the records fetched are then filtered by their own parsed metadata, which decides (a record PubMed
indexes otherwise never passes a filter it fails).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ..filters import All, AnyOf, Compare, Filter, Flag, Member, Not
from .metadata import MetadataColumns, date_days
from .sources import Record

__all__ = ["MEDLINE_FIELDS", "esearch_filter", "filtered_term", "records_passing"]

#: the metadata fields of a MEDLINE / PubMed record (:func:`~.sources.read_medline`), name -> type
MEDLINE_FIELDS: Dict[str, str] = {
    "journal": "keyword", "language": "keywords", "mesh": "keywords", "mesh_major": "keywords",
    "publication_date": "date", "publication_type": "keywords", "retracted": "boolean", "year": "integer"}
_TAGS = {"publication_type": "pt", "mesh": "mh", "mesh_major": "majr", "journal": "jour", "language": "la"}
_RETRACTED = "retracted publication[pt]"
_EVERY = "all[sb]"  # every PubMed record: the left side of a NOT that stands alone
_FIRST, _LAST = 1000, 3000  # the open ends of a [dp] range


@dataclass
class _And:
    """Terms ANDed (``having``) with terms NOTed (``lacking``): PubMed reads ``a AND b NOT c`` left to right."""

    having: List[str] = field(default_factory=list)
    lacking: List[str] = field(default_factory=list)

    def text(self, lead: Optional[str] = None) -> str:
        having = ([lead] if lead else []) + self.having
        return " AND ".join(having or [_EVERY]) + "".join(f" NOT {t}" for t in self.lacking)

    def part(self) -> str:
        """As a part of a larger term: in parentheses unless a single term."""
        return self.having[0] if len(self.having) == 1 and not self.lacking else f"({self.text()})"


def esearch_filter(where: Filter) -> Optional[str]:
    """The esearch term asking for the records that can pass ``where`` (module docstring); None when no part of
    it maps onto PubMed's tags."""
    got = _term(where, widen=True)
    return None if got is None else got.text()


def filtered_term(term: str, where: Optional[Filter]) -> str:
    """An esearch ``term`` narrowed by the filter ``where``: ``(term) AND ...`` with the filter's parts (module
    docstring); ``term`` as it is without a filter or a part that maps."""
    got = None if where is None else _term(where, widen=True)
    return term if got is None else got.text(f"({term})")


def records_passing(records: Sequence[Record], where: Optional[Filter],
                    fields: Mapping[str, str] = MEDLINE_FIELDS) -> Tuple[List[Record], int]:
    """The ``records`` whose own metadata passes ``where`` (None: all), read with the field types ``fields``, and
    how many did not; FilterError naming a field ``fields`` lacks or an ill-typed comparison."""
    if where is None or not records:
        return list(records), 0
    passed = MetadataColumns([r.metadata for r in records], fields).mask(where)
    kept = [r for r, ok in zip(records, passed.tolist()) if ok]
    return kept, len(records) - len(kept)


def _term(node: Filter, widen: bool) -> Optional[_And]:
    """``node`` as esearch terms: a superset of what passes it when ``widen``, else a subset (what a NOT may take
    out); None when nothing can be said (widen: everything; narrow: nothing)."""
    if isinstance(node, (All, AnyOf)):
        parts = [_term(p, widen) for p in node.parts]
        if isinstance(node, All) != widen and any(p is None for p in parts):
            return None  # an OR widened, or an AND narrowed, past what a term can say
        kept = [p for p in parts if p is not None]
        if not kept:
            return None
        if isinstance(node, All):
            return _And([t for p in kept for t in p.having], [t for p in kept for t in p.lacking])
        return _And([kept[0].part() if len(kept) == 1 else "(" + " OR ".join(p.part() for p in kept) + ")"])
    if isinstance(node, Not):
        inner = _term(node.part, not widen)
        return None if inner is None else _And([], [inner.part()])
    return _leaf(node, widen)


def _leaf(node: Filter, widen: bool) -> Optional[_And]:
    """A comparison, membership or flag on a field PubMed indexes, as its terms (the same either way, but for
    ``!=`` and a date's strict bound, which only widen: a record without the field, the bound's own day)."""
    name = node.fields()[0]
    if isinstance(node, Flag) or (isinstance(node, Compare) and name == "retracted" and node.op in ("==", "!=")):
        if name != "retracted":
            return None
        wanted = True if isinstance(node, Flag) else (node.value is True) == (node.op == "==")
        return _And([_RETRACTED]) if wanted else _And([], [_RETRACTED])
    if isinstance(node, Member):
        found = [_value_term(name, "==", v) for v in node.values]
        parts = [p for p in found if p is not None]
        if len(parts) != len(found) or not parts:
            return None
        return _And([parts[0] if len(parts) == 1 else "(" + " OR ".join(parts) + ")"])
    assert isinstance(node, Compare)
    if node.op == "!=":
        equal = _value_term(name, "==", node.value)
        return None if equal is None or not widen else _And([], [equal])
    if name == "publication_date" and node.op in ("<", ">") and not widen:
        return None
    got = _value_term(name, node.op, node.value)
    return None if got is None else _And([got])


def _value_term(name: str, op: str, value: Union[str, int, float, bool]) -> Optional[str]:
    if name in _TAGS and isinstance(value, str):
        phrase = " ".join(re.sub(r'["\[\]()]', " ", value).split())
        return f'"{phrase}"[{_TAGS[name]}]' if phrase else None
    if name == "year" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return _year_range(op, float(value))
    if name == "publication_date" and date_days(value) is not None:
        day = str(value).replace("-", "/")
        return {"==": f"{day}[dp]", ">=": f"{day}:{_LAST}[dp]", ">": f"{day}:{_LAST}[dp]",  # (> widened to >=)
                "<=": f"{_FIRST}:{day}[dp]", "<": f"{_FIRST}:{day}[dp]"}[op]
    return None


def _year_range(op: str, value: float) -> Optional[str]:
    if op == "==":
        return f"{int(value)}[dp]" if value.is_integer() else None
    low, high = {">=": (math.ceil(value), _LAST), ">": (math.floor(value) + 1, _LAST),
                 "<=": (_FIRST, math.floor(value)), "<": (_FIRST, math.ceil(value) - 1)}[op]
    return f"{low}:{high}[dp]"
