"""One shard of a sharded deployment: a collection opened memory-mapped, answering a search's first stage.

:class:`ShardSearcher` is a plain class (usable without Ray, e.g. to test the protocol); ``ShardedRetriever`` runs
one per shard as a Ray actor. It never encodes (the question is encoded once, by the caller) and never reranks
(that happens once, over every shard's candidates): it runs the dense and BM25 first stage over its rows and
returns what makes scores from different shards comparable:

- dense: ids and inner products (every shard embeds with the same encoder, so they compare as they are);
- BM25: for each returned row, how often each query term occurs in it and its length, plus the shard's document
  frequencies of the terms (:meth:`~medretrieve.corpus.lexical.LexicalIndex.term_counts`); the caller scores the
  rows with the statistics of all shards (:func:`~medretrieve.corpus.lexical.bm25_from_counts`), exactly as one
  index over every shard would;
- rows: the chunk, its stored vector, its BM25 tokens (so any query's BM25 can be computed over it) and its
  document's chunks, for the candidates that survive fusion (what rerank, MMR and recovery read).

Every search method takes ``where``, a metadata filter (:data:`~.shard_filter.ShardFilter`): the shard searches
only its rows passing it (:class:`~.shard_filter.ShardFilters`: compiled once per filter and shard version); BM25
statistics stay those of every row, as in one filtered collection.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from ..corpus.collection import Collection
from .shard_filter import ShardFilter, ShardFilters

DOCUMENT_ROWS = 64  # chunks of a document whose tokens a fetch returns (as ChunkTokens.of_document reads)


def process_memory() -> Dict[str, int]:
    """This process's resident memory in bytes (Linux ``/proc/self/status``): ``VmRSS`` all of it, ``RssAnon``
    the heap, ``RssFile`` the file pages it maps (a memory-mapped collection's touched pages), ``VmHWM`` the peak."""
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) * 1024
    return out


def distinct_terms(tokens: Sequence[str]) -> List[str]:
    """The distinct tokens of a query in the order it first names them (BM25's summation order)."""
    return list(Counter(tokens))


class ShardSearcher:
    """Serves one collection directory as a shard (module docstring)."""

    def __init__(self, directory: str, verify: Any = "auto") -> None:
        self.directory = str(Path(directory))
        self.collection = Collection.open(directory, verify=verify)
        self.filters = ShardFilters(self.collection)

    # ------------------------------------------------------------- what the caller plans with
    def stats(self) -> Dict[str, Any]:
        """Counts and statistics fixed for the shard's life: chunks, documents, BM25 rows and tokens (for the
        average length), the labels its live chunks carry, the encoder and BM25 settings."""
        col = self.collection
        rows, tokens = col.lexical.totals()
        return {"directory": self.directory, "chunks": len(col), "documents": col.n_documents,
                "bm25_rows": rows, "bm25_tokens": tokens, "k1": col.lexical.k1, "b": col.lexical.b,
                "labels": sorted(int(x) for x in np.unique(col.labels[col.alive])),
                "encoder": col.manifest["encoder"], "query_encoder": col.manifest.get("query_encoder"),
                "dim": col.dim, "normalized": col.normalized, "metadata_fields": dict(col.metadata_fields)}

    def ping(self) -> bool:
        return True

    def memory(self) -> Dict[str, int]:
        """The shard process's resident memory (:func:`process_memory`)."""
        return process_memory()

    # ------------------------------------------------------------- first stage
    def dense(self, vectors: np.ndarray, k: int, ef: Sequence[int], labels: Optional[List[int]] = None,
              where: Optional[ShardFilter] = None) -> List[Dict[str, np.ndarray]]:
        """Per query vector: the live rows (``ids``) and inner products (``scores``) of an HNSW search for ``k``
        at ``ef`` (one per vector), restricted to ``labels`` and to the rows passing ``where`` when given."""
        col = self.filters.view(where)
        q = np.asarray(vectors, dtype=np.float32).reshape(-1, col.dim)
        kk = min(k, max(len(col), 1))
        ids, scores = col.dense.search(q, k=kk, ef=np.asarray(ef, dtype=np.int64), labels=labels)
        ids = np.asarray(ids, dtype=np.int64).reshape(len(q), -1)
        scores = np.asarray(scores, dtype=np.float32).reshape(len(q), -1)
        out = []
        for i in range(len(q)):
            ok = ids[i] >= 0
            ok[ok] = col.alive[ids[i][ok]]
            out.append({"ids": ids[i][ok], "scores": scores[i][ok]})
        return out

    def lexical(self, queries: Sequence[Sequence[str]], depth: int, labels: Optional[List[int]] = None,
                where: Optional[ShardFilter] = None) -> Dict[str, Any]:
        """Per query (its BM25 tokens, repeats weighing more): the best ``depth`` live rows by this shard's BM25
        (``ids``; within ``labels`` and ``where`` when given), and for them the counts of the query's distinct
        terms (``tf``) and their lengths; plus the shard's document frequency of every term named (``df``)."""
        col = self.filters.view(where)
        allowed = col.alive if labels is None else col.allowed(labels)
        lists = []
        terms: Dict[str, None] = {}
        for tokens in queries:
            ids, _ = col.lexical.top(col.lexical.scores(list(tokens)), k=max(depth, 1), allowed=allowed)
            distinct = distinct_terms(tokens)
            tf, lengths = col.lexical.term_counts(ids, distinct)
            lists.append({"ids": ids, "tf": tf, "lengths": lengths})
            terms.update(dict.fromkeys(distinct))
        names = list(terms)
        return {"lists": lists, "df": dict(zip(names, col.lexical.document_frequencies(names).tolist()))}

    def first_stage(self, vectors: Optional[np.ndarray], ef: Sequence[int], k: int,
                    queries: Sequence[Sequence[str]], depth: int, labels: Optional[List[int]] = None,
                    fetch_top: int = 0, where: Optional[ShardFilter] = None) -> Dict[str, Any]:
        """:meth:`dense` and :meth:`lexical` in one call (one round trip per search), with the :meth:`fetch`
        payload of the best ``fetch_top`` rows of the question's own lists (the first vector's and the first
        query's): what pseudo-relevance feedback reads, so it needs no round trip of its own."""
        dense = self.dense(vectors, k, ef, labels, where) if vectors is not None and len(vectors) else []
        lexical = self.lexical(queries, depth, labels, where) if queries else {"lists": [], "df": {}}
        top = [ids[:fetch_top] for ids in ([dense[0]["ids"]] if dense else []) + (
            [lexical["lists"][0]["ids"]] if lexical["lists"] else [])]
        rows = list(dict.fromkeys(int(r) for ids in top for r in ids.tolist()))
        return {"dense": dense, **lexical, "rows": self.fetch(rows)}

    def dense_and_fetch(self, vectors: np.ndarray, k: int, ef: Sequence[int], labels: Optional[List[int]],
                        rows: Sequence[int], where: Optional[ShardFilter] = None) -> Dict[str, Any]:
        """:meth:`dense`, and the :meth:`fetch` payload of its hits and of ``rows`` (one round trip)."""
        dense = self.dense(vectors, k, ef, labels, where)
        hits = [int(r) for d in dense for r in d["ids"].tolist()]
        return {"dense": dense, "rows": self.fetch(list(dict.fromkeys(list(rows) + hits)))}

    def document_frequencies(self, tokens: Sequence[str]) -> Dict[str, int]:
        return dict(zip(tokens, self.collection.lexical.document_frequencies(list(tokens)).tolist()))

    # ------------------------------------------------------------- metadata
    def passing(self, where: ShardFilter) -> Dict[str, Any]:
        """The live rows passing ``where``: how many (``rows``) and the labels they carry (``labels``), what the
        caller plans a filtered search with."""
        view = self.filters.view(where)
        alive = np.asarray(view.alive)
        return {"rows": int(alive.sum()), "labels": sorted(int(x) for x in np.unique(view.labels[alive]))}

    def facets(self, names: Sequence[str], where: Optional[str], fields: Dict[str, str]) -> Dict[str, Any]:
        """Counts per value of each field of ``names`` over the shard's live documents passing the filter
        ``where`` (its text; None: every document), read with every shard's ``fields`` (all values, not the best
        few: the caller sums the shards' counts), and how many documents pass."""
        columns, docs = self.filters.documents(where, fields)
        return {"documents": int(len(docs)), "facets": {name: columns.facet(name, docs) for name in names}}

    # ------------------------------------------------------------- rows
    def fetch(self, rows: Sequence[int]) -> Dict[str, Any]:
        """What the later stages read of ``rows``: the chunks (dicts of :class:`~medretrieve.corpus.chunk_table.
        ChunkRow`), their stored vectors and BM25 tokens (repeats kept: what BM25 counted, so the caller can score
        any query over them), and for each of their documents the first ``DOCUMENT_ROWS`` live chunks and their
        tokens."""
        col = self.collection
        rows = [int(r) for r in rows]
        chunks = [col.rows[r] for r in rows]
        documents: Dict[str, List[Any]] = {}
        for c in chunks:
            if c.document_id not in documents:
                documents[c.document_id] = [[r, self._tokens(r)] for r in col.document_rows(c.document_id)
                                            [:DOCUMENT_ROWS]]
        return {"rows": rows, "chunks": [dict(c.__dict__) for c in chunks], "vectors": col.vectors(rows),
                "tokens": [self._tokens(r) for r in rows], "documents": documents}

    def _tokens(self, row: int) -> List[str]:
        stored = self.collection.lexical.tokens_of(row)
        if stored is None:  # deleted since the BM25 fit: what ChunkTokens does
            from ..corpus.lexical import tokenize

            r = self.collection.rows[row]
            stored = tokenize(f"{r.title} {r.overlap} {r.text}")
        return stored
