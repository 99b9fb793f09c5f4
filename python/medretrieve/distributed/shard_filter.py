"""Metadata filters and facets over shards: one schema for all shards, each shard filtering its own rows.

A sharded search filters as one collection of the shards concatenated would:

- the fields are the union of the shards' fields (:func:`merge_fields`, a field typed by the shards that have it
  as :func:`~medretrieve.corpus.metadata.infer_fields` types one over all documents); a field no shard has is
  refused on the caller, with the error one collection gives (:func:`check_filter`); on a shard lacking a field
  its documents have no value for it, as such documents of one collection have none;
- each shard compiles the filter to its own row mask and searches through
  :class:`~medretrieve.retrieval.filtered.FilteredCollection` (the index's row filter, or an exact scan of the
  allowed rows when few pass), one per filter and shard version (:class:`ShardFilters`);
- facet counts are counted per shard and summed (:func:`sum_facets`): every document lives on one shard.

A filter travels to the shards as a :data:`ShardFilter`: its canonical text and the fields it is read against.
"""
from __future__ import annotations

import threading
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..corpus.metadata import MetadataColumns
from ..filters import Filter
from ..retrieval.filtered import FilteredCollection

#: a filter as the shards receive it: (its canonical text, the fields of all shards: name -> type)
ShardFilter = Tuple[str, Dict[str, str]]

_CACHED = 64  # filters kept per shard (the retriever keeps as many scopes)


def merge_fields(per_shard: Sequence[Mapping[str, str]]) -> Dict[str, str]:
    """The fields of all shards, name -> type: a field whose shards agree on its type keeps it; integer with
    float is float, keyword with keywords is keywords, date with keyword is keyword (as ``infer_fields`` types a
    field whose documents mix them); a field of other mixed types is not filterable, as in one collection."""
    kinds: Dict[str, set] = {}
    for fields in per_shard:
        for name, kind in fields.items():
            kinds.setdefault(name, set()).add(kind)
    out: Dict[str, str] = {}
    for name, seen in sorted(kinds.items()):
        if len(seen) == 1:
            out[name] = next(iter(seen))
        elif seen <= {"integer", "float"}:
            out[name] = "float"
        elif seen <= {"keyword", "keywords", "date"}:
            out[name] = "keywords" if "keywords" in seen else "keyword"
    return out


def check_filter(where: Optional[Filter], fields: Mapping[str, str], facets: Sequence[str] = ()) -> None:
    """FilterError, worded as one collection words it, for a filter (None: none) or a facet field that ``fields``
    refuse: an unknown field, an ill-typed comparison or value (checked here, before any shard is asked)."""
    columns = MetadataColumns([], fields)  # no documents: the checks and the value conversions only
    if where is not None:
        columns.mask(where)
    for name in facets:
        columns.facet(name, np.zeros(0, dtype=np.int64))


def sum_facets(per_shard: Sequence[Dict[str, List[Tuple[Any, int]]]], fields: Sequence[str],
               top: Optional[int]) -> Dict[str, List[Tuple[Any, int]]]:
    """Per field, the shards' counts summed by value, most frequent first (ties by value), ``top`` at most."""
    out: Dict[str, List[Tuple[Any, int]]] = {}
    for name in fields:
        counts: Dict[Any, int] = {}
        for shard in per_shard:
            for value, n in shard.get(name, []):
                counts[value] = counts.get(value, 0) + int(n)
        ordered = sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0])))
        out[name] = ordered[:top] if top is not None else ordered
    return out


class ShardFilters:
    """A shard's filtered views (:class:`~medretrieve.retrieval.filtered.FilteredCollection` over the
    collection's snapshot), kept per filter until the collection's next version; ``collection``: a
    :class:`~medretrieve.corpus.collection.Collection`."""

    def __init__(self, collection: Any) -> None:
        self.collection = collection
        self._lock = threading.Lock()
        self._snapshot: Any = None
        self._views: Dict[Tuple[str, Tuple[Tuple[str, str], ...]], Any] = {}
        self._columns: Dict[Tuple[Tuple[str, str], ...], MetadataColumns] = {}

    def view(self, where: Optional[ShardFilter]) -> Any:
        """The snapshot seen through ``where`` (the snapshot itself when it is None or every live row passes)."""
        snap = self._current()
        if where is None:
            return snap
        text, fields = where
        key = (text, tuple(sorted(fields.items())))
        with self._lock:
            got = self._views.get(key) if self._snapshot is snap else None
        if got is None:
            mask = self._mask(snap, text, fields, key[1])
            got = snap if int(mask.sum()) == int(np.asarray(snap.alive).sum()) else FilteredCollection(snap, mask, text)
            with self._lock:
                if self._snapshot is snap:
                    if len(self._views) >= _CACHED:  # bounded: the oldest filter goes
                        self._views.pop(next(iter(self._views)))
                    self._views[key] = got
        return got

    def documents(self, where: Optional[str], fields: Dict[str, str]) -> Tuple[MetadataColumns, np.ndarray]:
        """The metadata columns under ``fields`` (every shard's) and the live documents passing the filter
        ``where`` (its text; None: all), as indices."""
        snap = self._current()
        columns = self._columns_of(snap, fields, tuple(sorted(fields.items())))
        live = np.zeros(len(snap.rows.documents), dtype=np.bool_)
        live[np.asarray(snap.rows.document)[np.asarray(snap.alive)]] = True
        if where is not None:
            live &= columns.mask(where)
        return columns, np.flatnonzero(live)

    def _current(self) -> Any:
        """The collection's snapshot now; a new version drops the views and columns of the old one."""
        snap = self.collection.snapshot()
        with self._lock:
            if self._snapshot is not snap:
                self._snapshot, self._views, self._columns = snap, {}, {}
        return snap

    def _mask(self, snap: Any, text: str, fields: Dict[str, str], fields_key: Tuple[Tuple[str, str], ...]
              ) -> np.ndarray:
        if dict(snap.metadata_fields) == fields:  # the shard's own schema: its own compiled filters
            return snap.filter_rows(text)
        docs = self._columns_of(snap, fields, fields_key).mask(text)
        return snap.alive & docs[np.asarray(snap.rows.document)] if len(snap.rows) else snap.alive.copy()

    def _columns_of(self, snap: Any, fields: Dict[str, str], fields_key: Tuple[Tuple[str, str], ...]
                    ) -> MetadataColumns:
        """The snapshot's documents as columns of every shard's fields (a field this shard lacks: no values)."""
        if dict(snap.metadata_fields) == fields:
            return snap.metadata_columns()
        with self._lock:
            got = self._columns.get(fields_key) if self._snapshot is snap else None
        if got is None:
            got = MetadataColumns(snap.rows.document_metadata(), fields)
            with self._lock:
                if self._snapshot is snap:
                    self._columns[fields_key] = got
        return got
