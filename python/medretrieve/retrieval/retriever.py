"""Hybrid retrieval under a deadline: the product path from a question to evidence snippets.

``Retriever(collection).search(question, k=10, deadline_ms=300)`` runs, in order:

1. ``classify``: the question analysed once (:class:`~.query.Query`: tokens, type, intent, subject words,
   entities, abbreviation alternatives); every later stage reads it.
2. ``expand`` .. ``fuse`` (:mod:`.candidates`): query variants, encoding, dense + BM25 first stage (section-routed
   for treatment / symptom / test intents), pseudo-relevance feedback, RRF fusion.
3. ``rerank`` (:mod:`.rerank`): a learned ranker, a cross-encoder (batched to the budget), or the heuristic
   formula.
4. ``mmr`` (:mod:`.diversify`): diversification among the best candidates with the query type's lambda.
5. ``prune``, ``weak``, ``recovery`` (:mod:`.recovery`): near-duplicate removal and per-document cap, weak-question
   detection and selective recovery.

With ``online`` (an online source such as :class:`~medretrieve.corpus.pubmed.PubMedSource`), stages 2-5 run over a
per-search pool (:mod:`.online`): the local collection's fused candidates (stage ``local``) plus the PubMed
records of the question and its expansion variants (``pubmed_search``, ``pubmed_fetch``, ``pool``); a weak
question re-queries PubMed with relaxed terms before recovery (``pubmed_recovery``). Every hit carries its
``span`` in the source document (BioASQ snippet offsets).

Optional stages shrink or are skipped to meet ``deadline_ms`` (None: no deadline); every stage reports whether it
ran, why not, and how long it took. Hits come in final order (after MMR and recovery). A Retriever may be shared
by threads: per-search state lives in the search call.

The stage objects (candidates, reranker, recovery) are built once, at construction; a search hands each the
:class:`~.scope.SearchScope` it reads: the collection snapshot's (built once per snapshot, :meth:`Retriever.scope`)
or, online, the one over its pool.
"""
from __future__ import annotations

import gc
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple, Union, cast

import numpy as np

from ..corpus.collection import Collection
from ..corpus.snapshot import CollectionSnapshot
from ..corpus.spans import Span, chunk_span
from ..filters import All, Filter, FilterError, Flag, Not, parse_filter
from ..outbound import Deadline
from .budget import CostModel
from .candidates import Candidates, CandidateGenerator, Switches, section_labels
from .collection_view import CollectionView, SearchableCollection
from .diversify import Diversified, diversify
from .expansion import TermSource, TrainingMemory
from .filtered import FilteredCollection
from .first_stage import FirstStage, FirstStageFactory, LocalFirstStage
from .matching import ChunkTokens
from .online import OnlinePool, OnlineSource, OnlineStage
from .scope import SearchScope
from .priors import prior_order
from .query import Query
from .shipped_ranker import RankerLike, resolve
from .learned_ranker import LinearRanker
from .recovery import Recovery
from .rerank import Ranking, Reranker
from .results import Hit, SearchResult, StageLog
from .settings import Settings
from ..wire import (DEFAULT_DEADLINE_MS, DEFAULT_K, SearchOptionTypeError, SearchOptionValueError, check_question,
                    check_search_options)


WEAK_DEPTH = 10  # first-stage hits the weak flag reads (at least)


@dataclass
class _Recovered:
    top: List[int]
    report: Dict[str, Any]
    before: List[int]  # the hits before recovery: a placed hit takes the score of the place it fills


class Retriever:
    """Hybrid dense + BM25 retrieval over a :class:`~medretrieve.corpus.collection.Collection`.

    - ``cross_encoder``: a :class:`~medretrieve.models.encoders.CrossEncoder` or its directory.
    - ``training``: a :class:`~.expansion.TrainingMemory` or BioASQ golden files, for training-memory expansion.
    - ``ranker``: ``"default"`` (the default: the learned ranker shipped with medretrieve, fitted on the public
      BioASQ files, in its encoder-matched or portable form, :mod:`.shipped_ranker`), None for none (the
      heuristic rerank formula), a :class:`~.learned_ranker.LinearRanker`, or a JSON file of one
      (``medretrieve.training.fit_ranker``, ``medretrieve fit-ranker``). With a learned ranker ``subject_boost``
      defaults to 0 (the ranker's ``doc_subject`` feature weighs the subject), without one to 1.
    - ``llm_terms``: a term source, ``f(question, ms_left) -> terms`` (``medretrieve.generation.terms.llm_synonyms``
      makes one from an LLM backend), asked for synonyms while at least ``llm_min_ms`` are left.
    - ``settings`` and keyword overrides: the tuning in :class:`~.settings.Settings` (each value checked here).
    - ``online``: an online source (:class:`~medretrieve.corpus.pubmed.PubMedSource`) or an
      :class:`~.online.OnlineStage`: every search adds the question's PubMed articles to the local candidates
      (module docstring). Without a local corpus pass an empty
      :class:`~medretrieve.corpus.memory.MemoryCollection` (``MemoryCollection.from_encoders(dir)``).
    - ``warmup`` (default True): :meth:`warmup` at construction (encoders loaded and run once; the process's
      garbage collector is left as it is).
    - ``first_stage``: the dense + BM25 gathering over the collection a search reads
      (:class:`~.first_stage.FirstStage`, made by ``first_stage(collection)``); default
      :class:`~.first_stage.LocalFirstStage`. The sharded retriever passes its fan-out over shards.
    """

    def __init__(self, collection: CollectionView, cross_encoder=None, training=None, *,
                 ranker: RankerLike = "default",
                 llm_terms: Optional[TermSource] = None, settings: Optional[Settings] = None,
                 online: Union[OnlineSource, OnlineStage, None] = None, warmup: bool = True,
                 first_stage: Optional[FirstStageFactory] = None, **tuning: Any) -> None:
        unknown = sorted(set(tuning) - set(Settings.names()))
        if unknown:
            raise TypeError(f"Retriever got unknown settings {unknown}; known: {sorted(Settings.names())}")
        if llm_terms is not None and not callable(llm_terms):
            raise TypeError("llm_terms must be callable (question, ms_left) -> terms; "
                            "medretrieve.generation.terms.llm_synonyms(backend) makes one from an LLM backend")
        base = settings or Settings()
        self.settings = Settings(**{**{n: getattr(base, n) for n in Settings.names()}, **tuning})
        self.collection = collection
        self.first_stage = first_stage or _local_first_stage
        if isinstance(cross_encoder, (str, bytes)) or hasattr(cross_encoder, "__fspath__"):
            from ..models.encoders import CrossEncoder

            cross_encoder = CrossEncoder.from_dir(cross_encoder)
        if training is not None and not isinstance(training, TrainingMemory):
            training = TrainingMemory.from_bioasq(training)
        chosen, note = resolve(ranker, collection)
        self.costs = CostModel()
        self.online = online if online is None or isinstance(online, OnlineStage) else OnlineStage(online)
        self.candidates = CandidateGenerator(self.settings, self.costs, training, llm_terms)
        self.reranker = Reranker(self.settings, self.costs, chosen, cross_encoder, ranker_note=note)
        self.recovery = Recovery(self.settings, self.costs)
        self._scope = self._scope_over(self._snapshot())
        self._filtered: Dict[Any, Any] = {}  # filter text -> its scope over the snapshot held under None
        self._filtered_lock = threading.Lock()
        if warmup:
            self.warmup()

    # the learned ranker and the cross-encoder can be swapped on a live retriever (e.g. per evaluation fold)
    @property
    def ranker(self) -> Optional[LinearRanker]:
        return self.reranker.ranker

    @ranker.setter
    def ranker(self, value: Optional[LinearRanker]) -> None:
        self.reranker.ranker = value
        self.reranker.ranker_note = ""

    @property
    def cross_encoder(self):
        return self.reranker.cross_encoder

    def _scope_over(self, collection: CollectionView) -> SearchScope:
        """What a search over ``collection`` reads: it, its first stage (``first_stage(collection)``) and its
        chunks' token sets."""
        return SearchScope(collection, self.first_stage(collection), ChunkTokens(collection))

    def _snapshot(self) -> CollectionView:
        """The collection as it is now: a collection that takes updates hands out immutable snapshots
        (``Collection.snapshot``), and a search reads one from its start to its end; others are read as they are."""
        take = getattr(self.collection, "snapshot", None)
        return take() if take is not None else self.collection

    def scope(self) -> SearchScope:
        """The scope over the collection's current snapshot (built once per snapshot: a search started before an
        update keeps the scope it took, over the state it began with)."""
        scope, snap = self._scope, self._snapshot()
        if scope.collection is not snap:
            scope = self._scope_over(snap)
            self._scope = scope
        return scope

    def warmup(self, freeze_gc: bool = False) -> None:
        """Load the encoders and run them once, so the first search does not pay session start-up; with
        ``freeze_gc``, then collect garbage once and freeze what is alive (``gc.freeze``).

        Why a process that serves searches may want the freeze: a collection's rows and token lists are hundreds
        of thousands of long-lived Python objects, and every full (generation 2) collection walks them all; at
        100k chunks one such pass stalled a search for 0.44 s. Frozen objects are still freed by reference
        counting; only reference cycles among them are never reclaimed, which long-lived index data does not form.
        It changes the whole process's collector, so the library does it only when asked: ``medretrieve serve``
        asks (it owns its process); construction (``warmup=True``) does not.
        """
        Query.analyse("warm up motolimod MI")
        col = self._snapshot()
        if self.online is not None:  # every online search encodes the question and the records it fetched
            col.encode_queries(["warm up"])
            cast(SearchableCollection, col).article_encoder().encode([("warm up", "warm up")])
        if len(col):
            col.document_rows("")  # the document -> chunks map (hit spans, ranker features), built once
            if self.ranker is not None:  # document frequencies
                col.lexical.idf(["warm"])
            col.encode_queries(["warm up"])
            col.encode_queries(["warm up", "warm up two"])
            if self.cross_encoder is not None:
                pair = self.warm_pair()
                self.cross_encoder.score("warm up", [pair] * 8)  # cold: session start-up
                t0 = time.perf_counter()
                self.cross_encoder.score("warm up", [pair] * 8)
                self.costs.ce_pair_ms.value = (time.perf_counter() - t0) * 1000.0 / 8
        if freeze_gc:
            gc.collect()
            gc.freeze()

    def warm_pair(self) -> tuple:
        """A (title, text) of the collection for timing the cross-encoder at warm-up."""
        col = self._snapshot()
        r = col.rows[int(np.flatnonzero(cast(SearchableCollection, col).alive)[0])]
        return r.title, r.text

    # ------------------------------------------------------------- search
    def search(self, question: str, k: int = DEFAULT_K, deadline_ms: Optional[float] = DEFAULT_DEADLINE_MS, *,
               per_document: Optional[int] = None, sections: Optional[Sequence[str]] = None,
               expand: Optional[bool] = None, route: Optional[bool] = None, dense: Optional[bool] = None,
               bm25: Optional[bool] = None, feedback: Optional[bool] = None, rerank: Optional[bool] = None,
               mmr: Optional[bool] = None, recovery: Optional[bool] = None, where: Any = None,
               include_retracted: Optional[bool] = None, evidence_prior: Optional[bool] = None,
               recency_half_life: Optional[float] = None) -> SearchResult:
        """Best ``k`` chunks for ``question`` within ``deadline_ms`` (None: no deadline; 0: already expired,
        so only the stages that always run do).

        The options are those of the search request, declared once in :data:`medretrieve.wire.SEARCH_OPTIONS`
        (names, types, bounds, units) and checked as every door checks them
        (:func:`~medretrieve.wire.check_search_options`, :func:`~medretrieve.wire.check_question`: TypeError for a
        wrong type, no coercion; ValueError out of bounds, or for a blank or word-less question). ``per_document``
        caps hits per document. ``sections``: section categories (``treatment``, ``symptoms``, ``diagnosis``, ...
        of ``medretrieve.corpus.chunking.SECTION_CATEGORIES``, or ``other``) every hit must come from; it replaces
        section routing and recovery stays inside it too. With an online source the deadline covers the PubMed
        calls too (module docstring).

        The stage switches carry the stage log's names: ``expand``, ``route`` (section routing), ``dense`` /
        ``bm25`` (not both off), ``feedback`` (pseudo-relevance feedback), ``rerank``, ``mmr``, ``recovery``.
        None (the default) is the retriever's setting: on, except ``mmr`` and ``feedback``, as ``Settings.mmr``
        and ``Settings.feedback`` say (MMR off; feedback only without a learned ranker; why in :class:`.Settings`).

        ``where``: a metadata filter every hit passes (text or JSON form, :mod:`medretrieve.filters`; ValueError
        naming an unknown field or an ill-typed comparison); it holds in every stage (:mod:`.filtered`), and with
        an online source it narrows the PubMed queries and the records fetched must pass it too (:mod:`.online`).
        Retracted articles (a collection whose documents carry the boolean ``retracted``) are left out unless
        ``include_retracted`` or the filter itself names ``retracted``. ``evidence_prior`` / ``recency_half_life``
        (years): priors on the order by publication type and by age (:mod:`.priors`), off by default.
        """
        check_question(question)
        expired = deadline_ms == 0 and not isinstance(deadline_ms, bool)  # in-process only: already out of time
        opts = check_search_options(dict(
            k=k, deadline_ms=None if expired else deadline_ms, per_document=per_document, sections=sections,
            expand=expand, route=route, dense=dense, bm25=bm25, feedback=feedback, rerank=rerank, mmr=mmr,
            recovery=recovery, where=where, include_retracted=include_retracted, evidence_prior=evidence_prior,
            recency_half_life=recency_half_life))
        k, per_document = opts["k"], opts.get("per_document")
        on = {name: opts.get(name, True) for name in ("expand", "route", "dense", "bm25", "rerank", "recovery")}
        only = None if sections is None else section_labels(sections)
        dl = Deadline(deadline_ms)
        log = StageLog(dl)
        with dl.stage("classify"):
            query = Query.analyse(question)
        log.record("classify", True, f"{query.qtype} / intent {query.intent}")
        switches = Switches(on["expand"], on["route"], on["dense"], on["bm25"], feedback)
        ranked = on["rerank"] and self.ranker is not None
        scope, pool = self.scope(), None
        scope = self._filtered_scope(scope, opts.get("where"), bool(opts.get("include_retracted")), dl, log)
        if self.online is not None:  # the records it fetches pass the filter too
            scope, pool = self._online_scope(scope, query, k, dl, log, switches, ranked, only, opts.get("where"),
                                             bool(opts.get("include_retracted")))
        cands = self.candidates.gather(scope, query, k, dl, log, switches, ranked=ranked, only=only)
        ranking = self.reranker.rerank(scope, query, cands, dl, log, enabled=on["rerank"])
        diversified = self._diversify(scope.collection, query, cands, ranking, k, dl, log,
                                      self.settings.mmr if mmr is None else mmr)
        order = diversified.order
        if opts.get("evidence_prior") or opts.get("recency_half_life") is not None:
            with dl.stage("priors"):
                rows = scope.collection.rows
                order = prior_order(order, lambda row: rows[row].metadata, bool(opts.get("evidence_prior")),
                                    opts.get("recency_half_life"))
            log.record("priors", True, ", ".join(
                name for name, on in (("evidence level", opts.get("evidence_prior")),
                                      (f"recency (half-life {opts.get('recency_half_life')} years)",
                                       opts.get("recency_half_life") is not None)) if on))
        with dl.stage("prune"):
            top = self.recovery.select(scope, order, k, per_document)
        log.record("prune", True, f"{len(diversified.order)} candidates -> {len(top)} hits")
        with dl.stage("weak"):
            # read from the question's own first-stage lists, which no deadline changes, so the flag (and an
            # abstention built on it) does not flip with machine load; over at least 10 hits, so it does not
            # depend on the k asked for either
            wk = max(k, WEAK_DEPTH)
            weak_reasons = self.recovery.weak_reasons(
                scope, query, self.recovery.select(scope, cands.question_ids.tolist(), wk, per_document), wk)
        log.record("weak", True, "; ".join(weak_reasons) or "not weak")
        recover = self.recovers() if recovery is None else on["recovery"]
        rec = self._recover(scope, pool, query, top, k, cands, dl, log, bool(weak_reasons), recover, only)
        hits = self._hits(scope, query, rec, cands, ranking, diversified.scores)
        rec.report.pop("added_rows", None)
        return SearchResult(query.text, hits, query.qtype, bool(weak_reasons), weak_reasons,
                            rec.report.get("replaced", 0) > 0, log.stages, dl.finish(), intent=query.intent,
                            rerank_depth=ranking.depth, expansions=cands.expansions, recovery=rec.report)

    # ------------------------------------------------------------- stages not in their own module
    def _filtered_scope(self, scope: SearchScope, where: Any, include_retracted: bool, dl: Deadline,
                        log: StageLog) -> SearchScope:
        """The scope narrowed to the rows passing ``where`` and, unless ``include_retracted``, not retracted
        (:mod:`.filtered`); built once per distinct filter and snapshot, its chunks' token sets shared with the
        snapshot's scope. The scope as it is when nothing narrows it."""
        col = scope.collection
        parsed = effective_filter(col, where, include_retracted)
        if parsed is None:
            return scope
        filter_rows = getattr(col, "filter_rows", None)
        if filter_rows is None:
            raise SearchOptionValueError(f"where: this collection ({type(col).__name__}) holds no document metadata "
                                         "to filter by", "where")
        key = parsed.text()
        with self._filtered_lock:
            cache = self._filtered
            if cache.get(None) is not col:  # a new snapshot: the scopes of the old one go
                cache.clear()
                cache[None] = col
            got = cache.get(key)
        if got is None:
            with dl.stage("filter"):
                try:
                    # with an online source the filter may also name its records' fields (local documents
                    # without them fail it)
                    mask = filter_rows(parsed) if self.online is None else filter_rows(parsed, self.online.fields)
                except FilterError as exc:  # the collection's fields refuse it: the option named, as every door does
                    raise SearchOptionValueError(str(exc), "where") from None
            if _count(mask) == _count(col.alive):
                got = scope  # every live row passes: the plain search is the filtered one
            else:
                narrowed = getattr(col, "narrowed", None)  # a collection filtering where its rows are (sharded)
                view = narrowed(mask) if narrowed is not None else \
                    FilteredCollection(cast(SearchableCollection, col), mask, key)
                got = SearchScope(view, self.first_stage(view), scope.tokens)
            with self._filtered_lock:
                if cache.get(None) is col:
                    if len(cache) > 64:  # bounded: the oldest filter's scope goes
                        cache.pop(next(k for k in cache if k is not None))
                    cache[key] = got
        n = _count(got.collection.alive)
        log.record("filter", True, f"{key}: {n} of {_count(col.alive)} chunks")
        return got

    def facets(self, fields: Sequence[str], where: Any = None, include_retracted: Optional[bool] = None,
               top: Optional[int] = None) -> Dict[str, Any]:
        """Counts per value of each metadata field in ``fields`` over the collection's live documents that pass
        ``where`` (and are not retracted unless ``include_retracted``, as a search): ``{"documents": n,
        "facets": {field: [(value, count), ...]}}``, most frequent first, ``top`` values at most per field (None:
        all); a document counts once per value; dates count by year. ValueError (wire's SearchOptionValueError,
        naming ``where`` or ``fields``) for an unreadable filter or an unknown field."""
        opts = check_search_options({"where": where, "include_retracted": include_retracted})
        if isinstance(fields, str) or not fields or not all(isinstance(f, str) for f in fields):
            raise SearchOptionTypeError(f"fields must be a non-empty list of field names, got {fields!r}", "fields")
        if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
            raise SearchOptionValueError(f"top must be an integer >= 1, got {top!r}", "top")
        col = self._snapshot()
        columns = getattr(col, "metadata_columns", None)
        if columns is None:
            raise SearchOptionValueError(f"this collection ({type(col).__name__}) holds no document metadata",
                                         "fields")
        cols = columns()
        parsed = effective_filter(col, opts.get("where"), bool(opts.get("include_retracted")))
        rows: Any = col.rows  # a ChunkTable: the documents' codes
        live: np.ndarray = np.zeros(len(rows.documents), dtype=np.bool_)
        live[np.asarray(rows.document)[np.asarray(col.alive)]] = True
        try:
            if parsed is not None:
                live &= cols.mask(parsed)
            docs = np.flatnonzero(live)
            counted = {name: cols.facet(name, docs, top) for name in fields}
        except FilterError as exc:
            raise SearchOptionValueError(str(exc), "where" if exc.field is None or exc.field not in fields
                                         else "fields") from None
        return {"documents": int(len(docs)), "facets": counted}

    def _online_scope(self, local: SearchScope, query: Query, k: int, dl: Deadline, log: StageLog,
                      switches: Switches, ranked: bool, only: Optional[List[int]], where: Any = None,
                      include_retracted: bool = False) -> Tuple[SearchScope, OnlinePool]:
        """The local collection's fused candidates (``local``: the snapshot's scope, or its filtered one), then
        the pool with the PubMed records that pass ``where`` (and are not retracted unless ``include_retracted``:
        :mod:`.online`) and the scope over it (the pool is new with each search; the stage objects are not)."""
        assert self.online is not None
        col = local.collection
        base = col.base if isinstance(col, FilteredCollection) else col
        if not isinstance(base, (Collection, CollectionSnapshot)):
            raise TypeError(f"an online search adds PubMed records to a local collection, not to a "
                            f"{type(col).__name__}")
        local_rows: List[int] = []
        expansions: Dict[str, List[str]] = {}
        kinds = self.candidates.active_expansions() if switches.expand else ()
        sub = dl.fork()  # the local first stages are timed apart from the pool's
        if len(col):
            with dl.stage("local"):
                # the local candidates only seed the pool: the question's own fusion is the pool's, derived there
                found = self.candidates.gather(local, query, k, sub, StageLog(sub), switches, ranked=ranked,
                                               only=only, own_fusion=False)
            local_rows = found.fused_ids.tolist()
            expansions = found.expansions
            log.record("local", True, f"{len(local_rows)} fused candidates from the local collection")
        else:
            log.record("local", False, "no local collection")
            if kinds:  # the expansion variants each become a PubMed query
                with dl.stage("expand"):
                    expansions = self.candidates.variants(query, sub, kinds)[1]
        pool = self.online.pool(query, col, local_rows, dl, log, expansions, where, include_retracted)
        return self._scope_over(pool.collection), pool

    def _diversify(self, collection: CollectionView, query: Query, cands: Candidates, ranking: Ranking, k: int,
                   dl: Deadline, log: StageLog, enabled: bool) -> Diversified:
        if not enabled:
            log.record("mmr", False, "disabled" + ("" if self.settings.mmr else " (Settings.mmr is off by default)"))
            return Diversified(False, "disabled", ranking.order)
        with dl.stage("mmr"):
            done = diversify(collection, self.settings, query, cands.vectors, ranking, k, dl)
        log.record("mmr", done.ran, done.note, done.cut)
        return done

    def recovers(self) -> bool:
        """Whether a weak question's search runs recovery when the search does not say: ``Settings.recovery``, and
        when that is None (the default) only with an online source, where the re-query can bring articles the
        first queries missed; over a local collection it changed no ranking on BioASQ 7b or 12b and cost ~60 ms
        (bench/weak.py; bench/RESULTS.md, "Weak questions")."""
        return self.online is not None if self.settings.recovery is None else self.settings.recovery

    def _recover(self, scope: SearchScope, pool: Optional[OnlinePool], query: Query, top: List[int], k: int,
                 cands: Candidates, dl: Deadline, log: StageLog, weak: bool, enabled: bool,
                 only: Optional[List[int]]) -> _Recovered:
        if not (weak and enabled):
            log.record("recovery", False, "question not weak" if not weak else
                       "disabled" if self.settings.recovery is not None or self.online is not None else
                       "off over a local collection (Settings.recovery)")
            return _Recovered(top, {}, top)
        if dl.remaining_ms() <= dl.share_ms(0.25):
            log.record("recovery", False, f"budget: {dl.remaining_ms():.0f} ms left", cut=True)
            return _Recovered(top, {}, top)
        if self.online is not None and pool is not None:  # new articles join the pool recovery searches
            self.online.requery(query, pool, dl, log)
        with dl.stage("recovery"):
            queries = self.candidates.recovery_queries(query, cands.texts, dl)
            new_top, report = self.recovery.recover(scope, query, top, k, queries, dl, only)
        log.record("recovery", True, report.get("note", ""))
        return _Recovered(new_top, report, top)

    def _hits(self, scope: SearchScope, query: Query, rec: _Recovered, cands: Candidates, ranking: Ranking,
              mmr_scores: Dict[int, float]) -> List[Hit]:
        col = scope.collection
        score_of = dict(zip(ranking.order, ranking.scores))
        rrf_of = dict(zip(cands.fused_ids.tolist(), cands.fused_scores.tolist()))
        added: Set[int] = rec.report.get("added_rows", set())
        hits: List[Hit] = []
        for place, row in enumerate(rec.top):
            r = col.rows[row]
            sc: Dict[str, float] = {}
            for name, values in (("dense", cands.scored["dense"]), ("bm25", cands.scored["bm25"]), ("rrf", rrf_of),
                                 ("rerank", ranking.rerank), ("cross_encoder", ranking.cross_encoder),
                                 ("mmr", mmr_scores)):
                if row in values:
                    sc[name] = float(values[row])
            placed_by = None
            if row in added:  # placed, not ranked: the place's score keeps the list on one scale
                sc["recovery"] = scope.tokens.lexical_relevance(query, row)
                placed_by = "recovery"
                score = score_of.get(rec.before[place], 0.0) if place < len(rec.before) else 0.0
            else:
                score = score_of.get(row, sc.get("rrf", 0.0))
            hits.append(Hit(r.chunk_id, r.document_id, r.text, r.title, r.section, float(score), sc,
                            dict(r.metadata), r.parent_id, _span_fields(chunk_span(col, row), r.text), placed_by))
        return hits


def _span_fields(span: Optional[Span], text: str) -> Optional[Dict[str, Any]]:
    """A hit's ``span``: the BioASQ offsets, and the section's own characters at them (``text``) where they
    differ from the chunk's whitespace-normalised text, so a snippet quotes exactly what its offsets index."""
    if span is None:
        return None
    fields = span.to_bioasq()
    if span.text is not None and span.text != text:
        fields["text"] = span.text
    return fields


def _count(rows: Any) -> int:
    """How many rows a row set holds: a boolean mask's true entries, or a sharded collection's as its shards
    count them."""
    return int(rows.sum())


def effective_filter(col: Any, where: Any, include_retracted: bool) -> Optional[Filter]:
    """The filter a search over ``col`` applies: ``where`` and, unless ``include_retracted`` or the filter names
    the field itself, ``not retracted`` where the documents carry the boolean ``retracted``; None: no filter."""
    fields: Dict[str, str] = getattr(col, "metadata_fields", None) or {}
    parsed = None if where is None else parse_filter(where)
    if not include_retracted and fields.get("retracted") == "boolean" and \
            (parsed is None or "retracted" not in parsed.fields()):
        parsed = Not(Flag("retracted")) if parsed is None else All((parsed, Not(Flag("retracted"))))
    return parsed


def _local_first_stage(collection: CollectionView) -> FirstStage:
    """The default first stage: over a local collection (a collection without a first stage of its own scores
    every row by BM25, :class:`~.collection_view.SearchableCollection`)."""
    return LocalFirstStage(cast(SearchableCollection, collection))
