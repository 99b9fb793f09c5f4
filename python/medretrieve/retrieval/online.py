"""Online retrieval: PubMed candidates join the local collection's, then the usual stages rank them.

The BioASQ pipeline this follows asks PubMed for 60-100 articles per question and reranks them with local
models. For one question :meth:`OnlineStage.pool` builds the set the retriever then fuses, reranks, diversifies
and recovers over, in three reported stages:

1. ``pubmed_search``: the question and its expansion variants go to esearch at once (:func:`pubmed_queries`,
   up to ``max_queries`` calls, in parallel within NCBI's rate): the question's content words (PubMed ANDs
   them), one query per expansion kind that found terms (abbreviations, relations, training memory, LLM
   synonyms: the question's subject words AND any of the terms), and the content words joined by OR, which
   fills up when the others give fewer than ``retmax`` PMIDs. PMIDs are taken in that order, each once, up to
   ``retmax``. (All at once rather than the OR only when needed: one round trip instead of two, for one more
   request.)
2. ``pubmed_fetch``: efetch of the PMIDs the local collection does not hold, in parallel batches (cached records
   cost nothing).
3. ``pool``: an in-memory collection (:class:`~medretrieve.corpus.memory.MemoryCollection`) holding the local
   collection's fused candidates and every chunk of a PMID it already has (stored vectors, nothing encoded
   again), plus the fetched records (:mod:`.pool_filler`): chunk vectors from the cache when an earlier question
   or run encoded the article with the same encoder, the rest encoded in batches while the budget allows; the
   records that did not fit are counted in the stage's reason.

Weak-question recovery (:meth:`OnlineStage.requery`, stage ``pubmed_recovery``, when the retriever finds the
question weak): PubMed is asked again with relaxed terms (:func:`relaxed_queries`: the subject words alone, the
content words joined by OR) that this search has not asked yet; their new articles are fetched and join the pool
(cached vectors or encoded, as above) before the recovery stage searches it.

The pool is a small collection of its own: BM25 statistics (idf, lengths) are the pool's, as in a rerank pool,
and recovery searches the pool.

Metadata filters (``where``): the local candidates come from the filtered local collection, and every esearch
term is narrowed by the filter's PubMed tags (:func:`~medretrieve.corpus.pubmed_terms.filtered_term`: ``[dp]``
year and date ranges, ``[pt]``, ``[mh]``, ``[majr]``, ``[jour]``, ``[la]``, ``retracted publication[pt]``), so
PubMed returns the records that can pass it; the records fetched are then filtered by their own parsed metadata
before they join the pool (:meth:`OnlineStage.records_filter`: the filter and, unless ``include_retracted`` or the
filter names it, ``not retracted``), so a field PubMed cannot search by is still enforced and no hit fails its
filter. A filter may name the source's fields (:attr:`OnlineStage.fields`, MEDLINE's) as well as the local
collection's; local documents without such a field fail it.

Budget: each PubMed call gets the time left minus ``reserve`` of the budget (kept for ranking); a call that
times out or fails is reported and the search goes on with what it has. Without a local collection (an empty
``MemoryCollection``) the pool holds the PubMed records alone.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Protocol, Sequence, Set, Tuple, Union, cast

import numpy as np

from ..corpus.collection import Collection
from ..corpus.lexical import stopwords, tokenize
from ..corpus.memory import MemoryCollection
from ..corpus.pubmed import PubMedError, PubMedTimeout
from ..corpus.pubmed_cache import PubMedCache
from ..corpus.pubmed_terms import MEDLINE_FIELDS, filtered_term, records_passing
from ..corpus.snapshot import CollectionSnapshot
from ..corpus.sources import Record
from ..filters import All, Filter, Flag, Not, parse_filter
from ..outbound import Deadline
from .collection_view import CollectionView
from .filtered import FilteredCollection
from .pool_filler import FillReport, PoolFiller, VectorStore
from .query import Query
from .results import StageLog

MAX_VARIANT_TERMS = 5  # expansion terms OR-ed into one PubMed query
RECOVERY_RESERVE = 0.1  # share of the budget the recovery's PubMed calls leave for the recovery stage itself


class OnlineSource(Protocol):
    """What an online source offers (:class:`~medretrieve.corpus.pubmed.PubMedSource` does; its
    ``search_many`` and ``cache`` are used when present)."""

    def search(self, term: str, retmax: int = 100, deadline_ms: Optional[float] = None) -> List[str]: ...

    def fetch(self, pmids: Sequence[str], deadline_ms: Optional[float] = None) -> List[Record]: ...


@dataclass(frozen=True)
class PubMedQuery:
    """One esearch term and why it is asked: ``question`` (the content words), an expansion kind, ``any`` (the
    content words joined by OR) or ``subject`` (the subject words alone)."""

    kind: str
    term: str


def _content_words(query: Query) -> List[str]:
    stop = stopwords()
    return list(dict.fromkeys(w for w in query.words if (len(w) > 1 or w in "0123456789") and w.lower() not in stop))


def _subject_words(query: Query) -> List[str]:
    subject = [toks for toks, _ in query.subject]
    return [w for w in _content_words(query) if any(set(tokenize(w)) & toks for toks in subject)]


def _phrase(term: str) -> str:
    """A term as a PubMed phrase: quotes and PubMed's syntax characters dropped, quoted when several words."""
    words = re.sub(r'["()\[\]*]', " ", term).split()
    return "" if not words else words[0] if len(words) == 1 else '"' + " ".join(words) + '"'


def pubmed_queries(query: Query, expansions: Optional[Dict[str, List[str]]] = None, max_queries: int = 4
                   ) -> List[PubMedQuery]:
    """The esearch terms of a question, best first (module docstring): ``question``, one per expansion kind,
    then ``any`` (with more than one word); the first ``max_queries`` of them."""
    words = _content_words(query)
    if not words:
        return []
    subject = _subject_words(query)
    anchor = " ".join(subject) if subject else "(" + " OR ".join(words) + ")"
    variants = []
    for kind, terms in (expansions or {}).items():
        phrases = list(dict.fromkeys(p for p in (_phrase(t) for t in terms) if p))[:MAX_VARIANT_TERMS]
        if phrases:
            variants.append(PubMedQuery(kind, f"{anchor} AND ({' OR '.join(phrases)})"))
    last = [PubMedQuery("any", " OR ".join(words))] if len(words) > 1 else []
    return ([PubMedQuery("question", " ".join(words))] + variants + last)[:max_queries]


def relaxed_queries(query: Query) -> List[PubMedQuery]:
    """Weak-question recovery's terms: the subject words alone, then the content words joined by OR."""
    words = _content_words(query)
    subject = _subject_words(query)
    out = []
    if subject and subject != words:
        out.append(PubMedQuery("subject", " ".join(subject)))
    if len(words) > 1:
        out.append(PubMedQuery("any", " OR ".join(words)))
    return out


@dataclass
class OnlinePool:
    """One search's pool (``collection``), the PubMed terms it has asked (``asked``), the filter the records it
    fetches must pass (``where``, None: any) with the field types it reads (``fields``), and the one its esearch
    terms are narrowed by (``ask``)."""

    collection: MemoryCollection
    asked: Set[str] = field(default_factory=set)
    where: Optional[Filter] = None
    fields: Dict[str, str] = field(default_factory=dict)
    ask: Optional[Filter] = None  # the filter narrowing its esearch terms (the search's own, without the default)

    def keep(self, records: List[Record]) -> Tuple[List[Record], int]:
        """The ``records`` whose metadata passes :attr:`where`, and how many did not."""
        return records_passing(records, self.where, self.fields)


class OnlineStage:
    """The online stages of a search (module docstring). Shared by threads; per-search state lives in the
    :class:`OnlinePool` of each search.

    - ``retmax``: PMIDs asked per question (PubMed's relevance order; the BioASQ pipelines use 60-100);
    - ``max_queries``: esearch calls per question before recovery (1: the question's own words only);
    - ``reserve``: share of the budget the PubMed calls and the encoding leave for the stages after them;
    - ``recovery``: re-query PubMed with relaxed terms when the question is weak;
    - ``vectors``: where chunk vectors are cached: ``"auto"`` (the source's on-disk cache when it has one,
      else memory only), a :class:`~medretrieve.corpus.pubmed_cache.PubMedCache` or a folder, or None (memory
      only); ``memory_articles``: articles whose vectors are kept in memory;
    - ``batch_chunks``: chunks per encoder call.
    """

    def __init__(self, source: OnlineSource, retmax: int = 100, max_queries: int = 4, reserve: float = 0.35, *,
                 recovery: bool = True, vectors: Union[str, PubMedCache, None, Any] = "auto",
                 memory_articles: int = 4096, batch_chunks: int = 64) -> None:
        if not callable(getattr(source, "search", None)) or not callable(getattr(source, "fetch", None)):
            raise TypeError("online must have search(term, retmax, deadline_ms) and fetch(pmids, deadline_ms), "
                            "e.g. medretrieve.corpus.pubmed.PubMedSource")
        if isinstance(retmax, bool) or not isinstance(retmax, int) or retmax < 1:
            raise ValueError(f"retmax must be a positive integer, got {retmax!r}")
        if isinstance(max_queries, bool) or not isinstance(max_queries, int) or max_queries < 1:
            raise ValueError(f"max_queries must be a positive integer, got {max_queries!r}")
        if isinstance(reserve, bool) or not isinstance(reserve, (int, float)) or not 0.0 <= reserve < 1.0:
            raise ValueError(f"reserve must be in [0, 1), got {reserve!r}")
        self.source = source
        self.retmax = retmax
        self.max_queries = max_queries
        self.reserve = float(reserve)
        self.recovery = bool(recovery)
        if isinstance(vectors, str) and vectors == "auto":
            found = getattr(source, "cache", None)
            disk = found if isinstance(found, PubMedCache) else None
        elif vectors is None or isinstance(vectors, PubMedCache):
            disk = vectors
        else:
            disk = PubMedCache(vectors)
        self.filler = PoolFiller(VectorStore(disk, memory_articles), batch_chunks)
        found_fields = getattr(source, "metadata_fields", None)
        #: the metadata fields of the source's records, name -> type (a filter may name them)
        self.fields: Dict[str, str] = dict(found_fields) if isinstance(found_fields, dict) else dict(MEDLINE_FIELDS)

    def records_filter(self, where: Any, include_retracted: bool = False) -> Optional[Filter]:
        """The filter the fetched records must pass: ``where`` (text, JSON or parsed) and, unless
        ``include_retracted`` or ``where`` names the field, ``not retracted`` where the source's records carry it
        (a medical answer must not cite a retracted paper); None: none."""
        parsed = None if where is None else parse_filter(where)
        if include_retracted or self.fields.get("retracted") != "boolean" or (
                parsed is not None and "retracted" in parsed.fields()):
            return parsed
        return Not(Flag("retracted")) if parsed is None else All((parsed, Not(Flag("retracted"))))

    def _left(self, dl: Deadline, reserve: float) -> Optional[float]:
        return None if dl.unlimited else max(dl.remaining_ms() - dl.share_ms(reserve), 0.0)

    def _time_left(self, dl: Deadline) -> float:
        return float("inf") if dl.unlimited else dl.remaining_ms()

    # ------------------------------------------------------------- the pool
    def pool(self, query: Query, local: CollectionView,
             local_rows: Sequence[int], dl: Deadline, log: StageLog,
             expansions: Optional[Dict[str, List[str]]] = None, where: Any = None,
             include_retracted: bool = False) -> OnlinePool:
        """The pool one search ranks (module docstring); ``local``: the local collection, or the view of it a
        filter leaves (its rows that fail are not copied); ``expansions``: the question's expansion terms by kind
        (what the expand stage found), each kind one more PubMed query; ``where`` (text, JSON or parsed): a
        metadata filter, its PubMed tags narrowing every esearch term; the fetched records must pass it and, unless
        ``include_retracted``, not be retracted (:meth:`records_filter`; the retraction is checked on the records
        alone, the terms left as they are)."""
        base: CollectionView = local.base if isinstance(local, FilteredCollection) else local
        alive = np.asarray(local.alive)
        fields = {**self.fields, **getattr(base, "metadata_fields", {})}
        online = OnlinePool(MemoryCollection.like(cast(Union[Collection, CollectionSnapshot], base)),
                            where=self.records_filter(where, include_retracted), fields=fields,
                            ask=None if where is None else parse_filter(where))
        pmids = self._search(query, expansions, dl, log, online)
        held = [p for p in pmids if base.document_rows(p)]  # local, whether or not its rows pass the filter
        held_set = set(held)
        todo = [p for p in pmids if p not in held_set]
        if todo:
            with dl.stage("pubmed_fetch"):
                records, note, cut = self._fetch(todo, dl, self.reserve)
                records, failed = online.keep(records)
            log.record("pubmed_fetch", bool(records), note + (f"; {failed} failed the filter" if failed else ""),
                       cut=cut)
        else:
            records = []
            log.record("pubmed_fetch", False, "no new PMIDs")
        with dl.stage("pool"):
            rows = list(dict.fromkeys(list(local_rows) + [r for p in held for r in base.document_rows(p)
                                                          if alive[r]]))
            online.collection.copy_rows(cast(Union[Collection, CollectionSnapshot], base), rows)
            fill = self.filler.fill(online.collection, records, lambda: self._time_left(dl),
                                    reserve_ms=dl.share_ms(self.reserve))
        log.record("pool", True, f"{len(rows)} local chunks ({len(held)} PubMed hits already local) + "
                                 f"{len(fill.added)} of {len(records)} fetched documents: {fill.note()}",
                   cut=bool(fill.left_out))
        return online

    def _search(self, query: Query, expansions: Optional[Dict[str, List[str]]], dl: Deadline, log: StageLog,
                online: OnlinePool) -> List[str]:
        planned = [PubMedQuery(q.kind, filtered_term(q.term, online.ask))
                   for q in pubmed_queries(query, expansions, self.max_queries)]
        pmids: List[str] = []
        notes: List[str] = []
        with dl.stage("pubmed_search"):
            timed_out = self._ask(planned, pmids, self.retmax, self._left(dl, self.reserve), online, notes)
        log.record("pubmed_search", bool(planned), "; ".join(notes) or "no content words to search PubMed with",
                   cut=timed_out)
        return pmids

    def _ask(self, queries: List[PubMedQuery], pmids: List[str], cap: int, deadline_ms: Optional[float],
             online: OnlinePool, notes: List[str]) -> bool:
        """esearch ``queries`` (at once when the source can), appending their new PMIDs to ``pmids`` in query
        order up to ``cap``; one note per query. Returns whether one of them ran out of time."""
        if not queries:
            return False
        terms = [q.term for q in queries]
        online.asked.update(terms)
        many = getattr(self.source, "search_many", None)
        results: List[Union[List[str], PubMedError]] = []
        if callable(many):
            results = many(terms, retmax=self.retmax, deadline_ms=deadline_ms)
        else:
            for t in terms:
                try:
                    results.append(self.source.search(t, retmax=self.retmax, deadline_ms=deadline_ms))
                except PubMedError as exc:
                    results.append(exc)
        seen = set(pmids)
        for q, found in zip(queries, results):
            if isinstance(found, PubMedError):
                notes.append(f"{q.kind}: {type(found).__name__}: {found}"[:200])
                continue
            new = [p for p in found if p not in seen][: max(cap - len(pmids), 0)]
            seen.update(new)
            pmids.extend(new)
            notes.append(f"{q.kind}: {len(new)} new of {len(found)} from {q.term!r}"[:200])
        return any(isinstance(found, PubMedTimeout) for found in results)

    def _fetch(self, pmids: List[str], dl: Deadline, reserve: float) -> Tuple[List[Record], str, bool]:
        """The records of ``pmids`` within the time left minus ``reserve`` of the budget; also a note and whether
        the deadline cut the fetch."""
        try:
            records = self.source.fetch(pmids, deadline_ms=self._left(dl, reserve))
        except PubMedTimeout as exc:
            return exc.records, f"{len(exc.records)} of {len(pmids)} records; budget: {exc}"[:300], True
        except PubMedError as exc:
            return [], f"0 of {len(pmids)} records; {type(exc).__name__}: {exc}"[:300], False
        return records, f"{len(records)} of {len(pmids)} records", False

    # ------------------------------------------------------------- weak-question recovery
    def requery(self, query: Query, online: OnlinePool, dl: Deadline, log: StageLog) -> FillReport:
        """Weak-question recovery's PubMed side (module docstring): relaxed terms not asked yet, their new
        articles fetched and added to the pool (stages ``pubmed_recovery`` and ``pubmed_recovery_fetch``)."""
        report = FillReport()
        if not self.recovery:
            log.record("pubmed_recovery", False, "disabled")
            return report
        queries = [q for q in (PubMedQuery(r.kind, filtered_term(r.term, online.ask))
                               for r in relaxed_queries(query)) if q.term not in online.asked]
        if not queries:
            log.record("pubmed_recovery", False, "no relaxed terms left to ask")
            return report
        pool = online.collection
        notes: List[str] = []
        pmids: List[str] = []
        with dl.stage("pubmed_recovery"):
            cut = self._ask(queries, pmids, self.retmax, self._left(dl, RECOVERY_RESERVE), online, notes)
            new = [p for p in pmids if not pool.document_rows(p)]
            if new:
                records, note, fetch_cut = self._fetch(new, dl, RECOVERY_RESERVE)
                records, failed = online.keep(records)
                cut = cut or fetch_cut
                notes.append("fetched " + note + (f"; {failed} failed the filter" if failed else ""))
                report = self.filler.fill(pool, records, lambda: self._time_left(dl),
                                          reserve_ms=dl.share_ms(RECOVERY_RESERVE))
                notes.append(f"{len(report.added)} new articles joined the pool: {report.note()}")
        log.record("pubmed_recovery", True, "; ".join(notes)[:500], cut=cut or bool(report.left_out))
        return report
