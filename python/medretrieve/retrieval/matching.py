"""How the analysed question's terms match a chunk's or a document's stored tokens.

The rerank features, weak-question detection, recovery and near-duplicate removal all ask the same questions
(which of the question's terms does this chunk hold, how alike are two chunks), over the token sets the lexical
index stored when the chunk was added: :class:`ChunkTokens` reads and caches them, so a search never tokenises
a candidate's text again (re-tokenising the candidates was a large share of a search's time).
"""
from __future__ import annotations

from collections import OrderedDict
from typing import AbstractSet, FrozenSet, KeysView, List, Mapping, Sequence, Set

import numpy as np

from ..corpus.lexical import raw_tokens, tokenize
from .collection_view import CollectionView
from .query import Query, Subject

Alternatives = Mapping[str, Sequence[FrozenSet[str]]]


def term_match(terms: Sequence[str], toks: AbstractSet[str], alts: Alternatives) -> float:
    """Share of ``terms`` in ``toks``; an abbreviation also matches when all of an expansion's tokens are there."""
    if not terms:
        return 0.0
    hit = sum(1 for t in terms if t in toks or any(a and a <= toks for a in alts.get(t, ())))
    return hit / len(terms)


def jaccard(a: AbstractSet[str], b: AbstractSet[str]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


def subject_share(subject: Sequence[Subject], toks: AbstractSet[str]) -> float:
    """Share of the question's subject words (weighted by WordPiece count) in ``toks``."""
    total = sum(p for _, p in subject)
    return sum(p for ts, p in subject if ts & toks) / total if total else 0.0


def coverage(query: Query, idf: np.ndarray, toks: AbstractSet[str]) -> float:
    """idf-weighted share of the question's terms in ``toks`` (abbreviations match their expansions);
    ``idf`` is aligned with ``query.terms``."""
    total = float(idf.sum())
    if total <= 0:
        return 0.0
    alts = query.alternatives
    return sum(w for t, w in zip(query.terms, idf) if t in toks or any(a and a <= toks for a in alts.get(t, ())))\
        / total


class ChunkTokens:
    """Token sets of a collection's chunks and documents, read from the lexical index and cached.

    The cache is shared by every search of one retriever (reads race harmlessly: a miss only computes a set
    twice) and holds the ``max_rows`` chunks read last (oldest evicted one at a time). A chunk's set is the key
    view of a ``str -> None`` dict rather than a ``set``: CPython never tracks such a dict in its cycle collector,
    so a full collection does not walk the cache. (With ``set`` values, a full collection over a large cache and
    clearing it all at once were each long enough to make a search miss its deadline: bench/RESULTS.md, "End to
    end at 1M chunks".)
    """

    def __init__(self, collection: CollectionView, max_rows: int = 50_000) -> None:
        self.collection = collection
        self.max_rows = max_rows
        self._rows: "OrderedDict[int, KeysView[str]]" = OrderedDict()

    def of_row(self, row: int) -> KeysView[str]:
        """BM25 tokens of a chunk (title, overlap and text), as the lexical index stored them."""
        toks = self._rows.get(row)
        if toks is None:
            stored = self.collection.lexical.tokens_of(row)
            if stored is None:  # not in the lexical index (deleted): tokenise the text
                r = self.collection.rows[row]
                stored = tokenize(f"{r.title} {r.overlap} {r.text}")
            toks = dict.fromkeys(stored).keys()
            while len(self._rows) >= self.max_rows:
                self._rows.popitem(last=False)
            self._rows[row] = toks
        return toks

    def of_document(self, document_id: str) -> Set[str]:
        """BM25 tokens of a document's first 64 live chunks."""
        toks: Set[str] = set()
        for r in self.collection.document_rows(document_id)[:64]:
            toks.update(self.of_row(r))
        return toks

    def lexical_relevance(self, query: Query, row: int) -> float:
        """Share of the question's content terms in the chunk (an abbreviation also matches its expansion)."""
        return term_match(query.terms, self.of_row(row), query.alternatives)

    def entity_match(self, query: Query, row: int) -> float:
        """Share of the question's entity-like words in the chunk (or, for an abbreviation, its expansion)."""
        r = self.collection.rows[row]
        raw = set(raw_tokens(r.title + " " + r.text))
        alts = query.alternatives
        return sum(e in raw or any(a and a <= self.of_row(row) for a in alts.get(e, ()))
                   for e in query.entities) / len(query.entities)

    def title_match(self, query: Query, row: int) -> float:
        """Share of the question's content terms in the chunk's title."""
        return term_match(query.terms, set(tokenize(self.collection.rows[row].title)), query.alternatives)

    def near_duplicate_of(self, row: int, kept: List[AbstractSet[str]], threshold: float) -> bool:
        toks = self.of_row(row)
        return any(jaccard(toks, s) >= threshold for s in kept)
