"""Online retrieval: PubMed candidates join the local collection's, then the usual stages rank them.

The BioASQ pipeline this follows asks PubMed for 60-100 articles per question and reranks them with local
models. For one question :meth:`OnlineStage.pool` builds the set the retriever then fuses, reranks, diversifies
and recovers over, in four reported stages:

1. ``pubmed_search``: esearch with the question's content words (all of them, PubMed's AND); when that gives
   fewer than ``retmax`` PMIDs and ``max_queries`` allows, the same words joined by OR (a relaxed variant), its
   new PMIDs appended, up to ``retmax``.
2. ``pubmed_fetch``: efetch of the PMIDs the local collection does not hold (cached records cost nothing).
3. ``pool``: an in-memory collection (:class:`~medretrieve.corpus.memory.MemoryCollection`) holding the local
   collection's fused candidates and every chunk of a PMID it already has (stored vectors, nothing encoded
   again), plus the fetched records, chunked and encoded while the budget allows (planned with the running
   cost per chunk); the records that did not fit are counted in the stage's reason.

The pool is a small collection of its own: BM25 statistics (idf, lengths) are the pool's, as in a rerank pool,
and recovery searches the pool.

Budget: each PubMed call gets the time left minus ``reserve`` of the budget (kept for ranking); a call that
times out or fails is reported and the search goes on with what it has. Without a local collection (an empty
``MemoryCollection``) the pool holds the PubMed records alone.
"""
from __future__ import annotations

from typing import Any, List, Optional, Protocol, Sequence

from ..corpus.lexical import stopwords
from ..corpus.memory import MemoryCollection
from ..corpus.pubmed import PubMedError, PubMedTimeout
from ..corpus.sources import Record
from .budget import Deadline, Ema
from .query import Query
from .results import StageLog


class OnlineSource(Protocol):
    """What an online source offers (:class:`~medretrieve.corpus.pubmed.PubMedSource` does)."""

    def search(self, term: str, retmax: int = 100, deadline_ms: Optional[float] = None) -> List[str]: ...

    def fetch(self, pmids: Sequence[str], deadline_ms: Optional[float] = None) -> List[Record]: ...


def pubmed_queries(query: Query, max_queries: int = 2) -> List[str]:
    """PubMed terms for a question: its content words (AND), then the same words joined by OR."""
    stop = stopwords()
    words = list(dict.fromkeys(w for w in query.words if len(w) > 1 and w.lower() not in stop))
    if not words:
        return []
    out = [" ".join(words)]
    if len(words) > 1:
        out.append(" OR ".join(words))
    return out[:max_queries]


class OnlineStage:
    """The online stages of a search (module docstring). ``retmax``: PMIDs asked per question (PubMed's
    relevance order); ``max_queries``: esearch calls per question (1: the AND query only); ``reserve``: share of
    the budget the PubMed calls leave for the stages after them."""

    def __init__(self, source: OnlineSource, retmax: int = 100, max_queries: int = 2, reserve: float = 0.35) -> None:
        if not callable(getattr(source, "search", None)) or not callable(getattr(source, "fetch", None)):
            raise TypeError("online must have search(term, retmax, deadline_ms) and fetch(pmids, deadline_ms), "
                            "e.g. medretrieve.corpus.pubmed.PubMedSource")
        if isinstance(retmax, bool) or not isinstance(retmax, int) or retmax < 1:
            raise ValueError(f"retmax must be a positive integer, got {retmax!r}")
        if isinstance(max_queries, bool) or not isinstance(max_queries, int) or max_queries < 1:
            raise ValueError(f"max_queries must be a positive integer, got {max_queries!r}")
        if not 0.0 <= reserve < 1.0:
            raise ValueError(f"reserve must be in [0, 1), got {reserve!r}")
        self.source = source
        self.retmax = retmax
        self.max_queries = max_queries
        self.reserve = reserve
        self.chunk_ms = Ema(10.0)  # chunking + encoding one fetched chunk (ms), learnt across searches

    def _left(self, dl: Deadline) -> Optional[float]:
        return None if dl.unlimited else max(dl.remaining_ms() - dl.share_ms(self.reserve), 0.0)

    def pool(self, query: Query, local: Any, local_rows: Sequence[int], dl: Deadline, log: StageLog
             ) -> MemoryCollection:
        """The pool one search ranks (module docstring)."""
        pmids = self._search(query, dl, log)
        held = [p for p in pmids if local.document_rows(p)]
        held_set = set(held)
        records = self._fetch([p for p in pmids if p not in held_set], dl, log)
        with dl.stage("pool"):
            pool = MemoryCollection.like(local)
            rows = list(dict.fromkeys(list(local_rows) + [r for p in held for r in local.document_rows(p)]))
            pool.copy_rows(local, rows)
            report = pool.add_within(records, lambda: float("inf") if dl.unlimited else dl.remaining_ms(),
                                     reserve_ms=dl.share_ms(self.reserve), ms_per_chunk=self.chunk_ms.value)
        if report.added:
            self.chunk_ms.update(report.ms_per_chunk)
        note = (f"{len(rows)} local chunks ({len(held)} PubMed hits already local) + {len(report.added)} of "
                f"{len(records)} fetched documents encoded")
        if report.left_out:
            note += f"; {len(report.left_out)} left out (budget: {report.ms_per_chunk:.1f} ms per chunk)"
        log.record("pool", True, note)
        return pool

    def _search(self, query: Query, dl: Deadline, log: StageLog) -> List[str]:
        terms = pubmed_queries(query, self.max_queries)
        pmids: List[str] = []
        notes: List[str] = []
        with dl.stage("pubmed_search"):
            for term in terms:
                if len(pmids) >= self.retmax:
                    break
                try:
                    found = self.source.search(term, retmax=self.retmax, deadline_ms=self._left(dl))
                except PubMedError as exc:
                    notes.append(f"{type(exc).__name__}: {exc}"[:200])
                    break
                seen = set(pmids)
                new = [p for p in found if p not in seen]
                pmids.extend(new[: self.retmax - len(pmids)])
                notes.append(f"{len(new)} from {term!r}"[:200])
        log.record("pubmed_search", bool(terms), "; ".join(notes) or "no content words to search PubMed with")
        return pmids

    def _fetch(self, pmids: List[str], dl: Deadline, log: StageLog) -> List[Record]:
        if not pmids:
            log.record("pubmed_fetch", False, "no new PMIDs")
            return []
        records: List[Record] = []
        note = ""
        with dl.stage("pubmed_fetch"):
            try:
                records = self.source.fetch(pmids, deadline_ms=self._left(dl))
            except PubMedTimeout as exc:
                records, note = exc.records, f"; budget: {exc}"
            except PubMedError as exc:
                note = f"; {type(exc).__name__}: {exc}"
        log.record("pubmed_fetch", bool(records), f"{len(records)} of {len(pmids)} records{note}"[:300])
        return records
