"""First stages of a search: query variants, the first-stage lists, pseudo-relevance feedback, RRF fusion.

:meth:`CandidateGenerator.gather` turns the analysed :class:`~.query.Query` into fused :class:`Candidates`:

1. ``expand``: query variants (abbreviations, relations, training memory, LLM synonyms when a term source is
   configured). An abbreviation expansion only spells out the question's own terms ("MI" -> "myocardial
   infarction"), so it joins the question's own text instead of standing as a down-weighted variant.
2. ``encode``: the question's text always, the variants while the budget allows (the rest are searched by BM25
   only); the vectors travel beside the (immutable) query, in :class:`Candidates`.
3. ``dense`` + ``bm25`` (``route``): the first stage (:mod:`.first_stage`: native HNSW search and BM25 per text,
   or the sharded layer's fan-out) (the question's subject words counted
   ``1 + subject_boost`` times). HNSW's ef comes from the query type and the time left (:meth:`CandidateGenerator.
   ef_range`, :meth:`~CandidateGenerator.ef_for`): every list is first searched at the type's fixed floor, and
   those lists alone make ``question_ids``, which the weak flag reads, so the flag never depends on timing; when
   time is left the dense lists are searched again at a wider ef (up to the type's ceiling) and replace the
   floor's in the fusion: the candidates gain recall from the time a search has, while the weak flag (and an
   abstention built on it) stays what the question alone makes it. For
   treatment / symptom / test intents the first stage is restricted to those sections through index labels and
   falls back to the whole collection when that gives fewer than ``k`` chunks.
4. ``feedback``: the question vector plus ``feedback_weight`` x the mean vector of the top ``feedback_docs``
   chunks of the question's own fused lists (:func:`feedback_vector`: in the collection's geometry), searched
   again (skipped when the budget is short).
5. ``fuse``: RRF of every list; the question's own lists and the feedback list weigh 1, each variant's
   ``variant_weight``; then the first stage makes the candidates' rows readable (:meth:`.FirstStage.readable`).

The question's own fusion (RRF of its own floor lists: ``question_ids``, what the weak flag reads) is derived once
per search and passed on: feedback takes its top rows from it while the question's own dense list is the floor's
(a wider ef that changed it makes another fusion), so does the fusion of every list when those are the question's
own alone; an online search's local gather, which only seeds the pool, skips it (``own_fusion=False``): the
pool's gather derives it.

The generator holds what lasts across searches (settings, cost estimates, term sources); each call reads the
:class:`~.scope.SearchScope` it is given (the collection and its first stage).

:meth:`CandidateGenerator.recovery_queries` makes the extra queries recovery searches (:mod:`.recovery`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..corpus.chunking import CATEGORY_IDS
from ..corpus.lexical import tokenize
from ..fusion import rrf
from ..outbound import Deadline
from .budget import CostModel
from .collection_view import CollectionView
from .expansion import TermSource, TrainingMemory, abbreviation_terms, relation_terms
from .first_stage import FirstLists, FirstStage
from .query import Query
from .results import StageLog
from .scope import SearchScope
from .settings import Settings

# intent -> section categories searched first
ROUTES: Dict[str, Tuple[str, ...]] = {
    "treatment": ("treatment",),
    "symptom": ("symptoms",),
    "test": ("diagnosis",),
}
# the section category of chunks whose section title matches none (index label 0)
OTHER_SECTION = "other"
# query type -> ef multiplier (broad questions need more recall): scales the type's floor and its ceiling
IMPORTANCE: Dict[str, float] = {"list": 1.5, "summary": 1.25, "factoid": 1.0, "yesno": 1.0}
TOP_IMPORTANCE = max(IMPORTANCE.values())
# share of the budget the first stages leave for reranking and what follows
RESERVE = 0.35
# expansion kinds recovery asks, and how wide (terms, training neighbours)
RECOVERY_KINDS = ("training", "abbreviations", "relations", "llm")
RECOVERY_TERMS, RECOVERY_NEIGHBOURS = 15, 6


def section_labels(sections: Sequence[str]) -> List[int]:
    """Index labels of section category names (``CATEGORY_IDS``' names and ``"other"``), for a search filter.

    Raises ValueError naming unknown names, and when ``sections`` is empty or a bare string."""
    if isinstance(sections, str) or not sections:
        raise ValueError(f"sections must be a non-empty list of section categories, got {sections!r}")
    known = {**CATEGORY_IDS, OTHER_SECTION: 0}
    unknown = [s for s in sections if s not in known]
    if unknown:
        raise ValueError(f"unknown sections {unknown}; known: {sorted(known)}")
    return sorted({known[s] for s in sections})


@dataclass
class QueryText:
    """One text searched in the first stage: what the encoder reads and the tokens BM25 reads."""

    kind: str  # "question" (with any abbreviation expansions) or an expansion kind
    text: str
    tokens: List[str]


@dataclass
class Candidates:
    """What the first stages hand to reranking."""

    texts: List[QueryText]  # the question's own text first, then the variants
    expansions: Dict[str, List[str]]  # expansion kind -> terms found
    fused_ids: np.ndarray  # candidate rows, fused order
    fused_scores: np.ndarray
    scored: Dict[str, Dict[int, float]]  # "dense" / "bm25" -> row -> the question's own first-stage score
    # BM25 of the question's tokens as searched over every row (None when BM25 was off or the first stage holds
    # no score vector, e.g. over shards: then the rerank scores ``bm25_query`` on the rows it reads)
    question_bm25: Optional[np.ndarray]
    bm25_query: List[str]  # the question's BM25 tokens as searched (with the subject boost when BM25 ran)
    vectors: Optional[np.ndarray] = None  # the encoded query texts, row 0 the question's own (None: dense off)
    # RRF of the question's own dense and BM25 lists only: what no deadline changes (the weak flag reads it)
    question_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    feedback_vector: Optional[np.ndarray] = None
    labels: Optional[List[int]] = field(default=None)  # the section labels searched (None: all)


@dataclass(frozen=True)
class RecoveryQueries:
    """The extra queries recovery searches: wider expansions not searched before and the relaxed content terms
    (first), and the expansion terms by kind (for the report)."""

    texts: List[QueryText]
    terms: Dict[str, List[str]]


@dataclass(frozen=True)
class Switches:
    """Stages a caller turned off (for ablations), by their stage-log names; ``feedback`` None: as ``Settings.feedback``
    says."""

    expand: bool = True
    route: bool = True
    dense: bool = True
    bm25: bool = True
    feedback: Optional[bool] = None


def feedback_vector(qvec: np.ndarray, top: np.ndarray, weight: float, normalized: bool) -> np.ndarray:
    """The pseudo-relevance-feedback query: the question vector plus ``weight`` x the mean of the ``top``
    chunk vectors.

    Unit-length geometry: ``normalize(q + w * mean)``. Raw inner products (MedCPT): the mean is first scaled to
    the question vector's norm (article and query vectors need not share a scale, and an unscaled mean would
    outweigh the question), and the result is rescaled to that norm, so its scores sit on the dense scores'
    scale.
    """
    mean = top.mean(axis=0).astype(np.float64)
    q = qvec.astype(np.float64)
    qn = max(float(np.linalg.norm(q)), 1e-12)
    if not normalized:
        mean = mean * (qn / max(float(np.linalg.norm(mean)), 1e-12))
    vec = q + weight * mean
    target = 1.0 if normalized else qn
    return (vec * (target / max(float(np.linalg.norm(vec)), 1e-12))).astype(np.float32)


class CandidateGenerator:
    """The first stages of a search (see the module docstring), over the scope each call is given."""

    def __init__(self, settings: Settings, costs: CostModel, training: Optional[TrainingMemory] = None,
                 llm_terms: Optional[TermSource] = None) -> None:
        self.settings = settings
        self.costs = costs
        self.training = training
        self.llm_terms = llm_terms

    # ------------------------------------------------------------- expansion
    def variants(self, query: Query, dl: Deadline, kinds: Sequence[str], n_terms: int = 8,
                 n_neighbours: int = 3) -> Tuple[Dict[str, QueryText], Dict[str, List[str]], str, bool]:
        """Query variants by expansion kind; also the terms used, a note on skipped kinds, and whether the
        deadline made a kind skip (LLM synonyms)."""
        variants: Dict[str, QueryText] = {}
        terms: Dict[str, List[str]] = {}
        notes = []
        cut = False
        for kind in kinds:
            found: List[str] = []
            if kind == "abbreviations":
                found = abbreviation_terms(query)
            elif kind == "relations":
                rel_kinds = ("disease_treatment", "gene_pathway") if query.intent == "treatment" else ("gene_pathway",)
                found = relation_terms(query, rel_kinds)
            elif kind == "training":
                if self.training is None:
                    continue
                found = self.training.key_terms(query, n_neighbours=n_neighbours, n_terms=n_terms)
            elif kind == "llm":
                if self.llm_terms is None:
                    continue
                if dl.remaining_ms() < self.settings.llm_min_ms:
                    notes.append(f"llm skipped: {dl.remaining_ms():.0f} ms left < {self.settings.llm_min_ms:.0f}")
                    cut = True
                    continue
                try:
                    rem = dl.remaining_ms()
                    found = list(self.llm_terms(query.text, None if dl.unlimited else max(rem - 50.0, 1.0)))
                except Exception as exc:  # an LLM error or an unreadable reply: search goes on without it
                    notes.append(f"llm failed: {type(exc).__name__}: {exc}"[:200])
                    continue
            if found:
                terms[kind] = found
                extra = " ".join(found)
                variants[kind] = QueryText(kind, f"{query.text} {extra}", list(query.tokens) + tokenize(extra))
        return variants, terms, "; ".join(notes), cut

    def feedback_on(self, asked: Optional[bool], ranked: bool) -> bool:
        """Whether the feedback stage runs: as asked, else ``Settings.feedback``, else only without a learned
        ranker (see the ``Settings`` docstring for why)."""
        if asked is not None:
            return asked
        return self.settings.feedback if self.settings.feedback is not None else not ranked

    def active_expansions(self) -> Tuple[str, ...]:
        """The expansion kinds of ``settings.expansions`` that have a source here (training memory, LLM terms)."""
        have = {"training": self.training is not None, "llm": self.llm_terms is not None}
        return tuple(k for k in self.settings.expansions if have.get(k, True))

    def recovery_queries(self, query: Query, used: Sequence[QueryText], dl: Deadline) -> RecoveryQueries:
        """Recovery's extra queries (:class:`RecoveryQueries`): wider expansions than the first stage's, leaving
        out texts already searched (``used``), then the relaxed query (the question's content terms alone, so
        partial matches surface; none when the question has none, e.g. only stopwords)."""
        extra, terms, _, _ = self.variants(query, dl, RECOVERY_KINDS, n_terms=RECOVERY_TERMS,
                                           n_neighbours=RECOVERY_NEIGHBOURS)
        used_texts = {t.text for t in used}
        # the abbreviation expansion is already part of the question's own text
        texts = [t for name, t in extra.items() if name != "abbreviations" and t.text not in used_texts]
        if query.terms:
            texts.append(QueryText("relaxed", " ".join(query.terms), list(query.terms)))
        return RecoveryQueries(texts, terms)

    # ------------------------------------------------------------- policies
    def ef_range(self, query: Query) -> Tuple[int, int]:
        """The query type's HNSW ef range ``(floor, ceiling)``: the floor is ``ef_base`` x the type's importance,
        the ceiling ``ef_max`` x importance / the largest importance (list questions reach ``ef_max``), both
        clamped to [ef_min, ef_max]."""
        s = self.settings
        weight = IMPORTANCE.get(query.qtype, 1.0)
        floor = int(min(s.ef_max, max(s.ef_min, s.ef_base * weight)))
        ceiling = int(min(s.ef_max, max(floor, s.ef_max * weight / TOP_IMPORTANCE)))
        return floor, ceiling

    def ef(self, query: Query) -> int:
        """The type's floor ef: what the question's own lists for the weak flag are searched at, whatever the time
        left (a timing-dependent ef there would make the weak flag, and an abstention built on it, flip with
        machine load)."""
        return self.ef_range(query)[0]

    def ef_for(self, query: Query, dl: Deadline) -> int:
        """The ef the candidates are searched at: from the type's floor towards its ceiling in proportion to the
        time left after the share kept for later stages (``RESERVE``), reaching the ceiling at ``ef_time_ms`` left;
        the ceiling without a deadline. Never below the floor, so more time only widens the search."""
        floor, ceiling = self.ef_range(query)
        if dl.unlimited:
            return ceiling
        left = dl.remaining_ms() - dl.share_ms(RESERVE)
        share = min(1.0, max(0.0, left / self.settings.ef_time_ms))
        return int(round(floor + (ceiling - floor) * share))

    def _route_labels(self, col: CollectionView, query: Query, route: bool) -> Tuple[Tuple[str, ...], List[int]]:
        cats = ROUTES.get(query.intent, ()) if route else ()
        labels = [CATEGORY_IDS[c] for c in cats]
        if labels and not col.allowed(labels).any():
            labels = []
        return cats, labels

    # ------------------------------------------------------------- the first stages
    def gather(self, scope: SearchScope, query: Query, k: int, dl: Deadline, log: StageLog,
               switches: Switches = Switches(), ranked: bool = False, only: Optional[List[int]] = None,
               own_fusion: bool = True) -> Candidates:
        """Stages 1-5 of the module docstring over ``scope``: the fused candidates. ``ranked``: a learned ranker
        will order them (it decides the default ``subject_boost``). ``only``: index labels a caller restricted
        the search to (:func:`section_labels`); they replace section routing and are never widened.
        ``own_fusion``: whether to fuse the question's own lists (``question_ids``; False leaves it empty)."""
        s = self.settings
        first = scope.first
        variants: Dict[str, QueryText] = {}
        expansions: Dict[str, List[str]] = {}
        kinds = self.active_expansions()
        if switches.expand and kinds:
            with dl.stage("expand"):
                variants, expansions, note, cut = self.variants(query, dl, kinds)
            log.record("expand", True, (", ".join(f"{k_}: {len(v)} terms" for k_, v in expansions.items())
                                        or f"no expansion terms found ({', '.join(kinds)})")
                       + (f"; {note}" if note else ""), cut)
        else:
            log.record("expand", False, "disabled" if not switches.expand else
                       "nothing to expand with: no training memory or LLM term source, and the abbreviation and "
                       "relation tables are off (Settings.expansions)")
        abbreviated = variants.pop("abbreviations", None)
        texts = [QueryText("question", abbreviated.text if abbreviated else query.text,
                           abbreviated.tokens if abbreviated else list(query.tokens))] + list(variants.values())

        vectors: Optional[np.ndarray] = None
        if switches.dense:
            vectors = self._encode(scope.collection, texts, dl, log)
        else:
            log.record("encode", False, "dense retrieval disabled")
        bm25_texts = texts if switches.bm25 else []
        times = s.subject_boost if s.subject_boost is not None else (0 if ranked else 1)
        boost = [t for ts, _ in query.subject for t in sorted(ts)] * times
        bm25_query = list(texts[0].tokens) + (boost if switches.bm25 else [])
        n_dense = 0 if vectors is None else len(vectors)

        ef = self.ef(query)
        ncand = max(s.candidates, k)
        efs = [] if vectors is None else [max(ef, ncand)] + [max(ef // 2, ncand)] * (n_dense - 1)
        cats, route_labels = self._route_labels(scope.collection, query, switches.route)
        lists: List[np.ndarray] = []
        weights: List[float] = []
        scored: Dict[str, Dict[int, float]] = {"dense": {}, "bm25": {}}
        own_at: List[int] = []  # where the question's own lists of the last first-stage run sit in ``lists``
        dense_at: List[int] = []  # where the last run's dense lists sit in ``lists`` (a wider ef replaces them)
        found: List[FirstLists] = []

        def run_first(labels: Optional[List[int]]) -> List[np.ndarray]:
            got = first.search(vectors, efs, [t.tokens for t in bm25_texts], boost, ncand, labels, dl)
            found[:] = [got]
            own_at.clear()
            dense_at.clear()
            ids_l = []
            for kind, kind_lists in (("dense", got.dense), ("bm25", got.bm25)):
                for j, (ids, sc) in enumerate(kind_lists):
                    if kind == "dense":
                        dense_at.append(len(lists))
                    if j == 0:  # the question's own list
                        own_at.append(len(lists))
                    lists.append(ids)
                    ids_l.append(ids)
                    weights.append(1.0 if j == 0 else s.variant_weight)
                    if j == 0:
                        for i_, s_ in zip(ids.tolist(), sc.tolist()):
                            scored[kind].setdefault(i_, s_)
            return ids_l

        search_labels = None
        if only is not None:
            filtered = run_first(only)
            n_only = len(np.unique(np.concatenate(filtered))) if filtered else 0
            search_labels = only
            log.record("route", True, f"filter: labels {only} ({n_only} chunks)")
        elif route_labels:
            routed = run_first(route_labels)
            search_labels = route_labels
            n_routed = len(np.unique(np.concatenate(routed))) if routed else 0
            if n_routed < k:
                run_first(None)
                search_labels = None
                note = f"{'/'.join(cats)} sections gave {n_routed} < {k} chunks: fell back to the whole collection"
            else:
                note = f"{'/'.join(cats)} sections: {n_routed} chunks"
            log.record("route", True, note)
        else:
            run_first(None)
            log.record("route", False, "no section route for intent " + query.intent if switches.route else "disabled")
        # the question's own fusion over the floor's lists, derived once: the weak flag reads it, whatever the
        # time left, and feedback reads its top while the dense lists are the floor's
        question_ids = np.zeros(0, np.int64)
        own_fused: Optional[Tuple[np.ndarray, np.ndarray]] = None
        if own_fusion and own_at:
            with dl.stage("fuse"):
                own_fused = rrf([lists[i] for i in own_at], k=s.rrf_k, top_n=ncand)
            question_ids = np.asarray(own_fused[0], dtype=np.int64)
        widened = False  # whether the wider ef changed the question's own dense list
        if vectors is not None:
            wide = self.ef_for(query, dl)
            floor, ceiling = self.ef_range(query)
            if max(wide, ncand) > max(ef, ncand):  # (the search's ef is never below the candidates asked for)
                widened = self._widen(first, vectors, wide, ncand, search_labels, dl, lists, dense_at,
                                      scored["dense"])
            left = "no deadline" if dl.unlimited else f"{dl.remaining_ms():.0f} ms left"
            log.record("dense", True, f"ef={max(wide, ncand)} (type {query.qtype}: {floor}-{ceiling}, {left}; weak "
                                      f"flag lists at ef={max(ef, ncand)})")
        else:
            log.record("dense", False, "disabled")
        log.record("bm25", switches.bm25, f"{len(bm25_texts)} query texts" if switches.bm25 else "disabled")

        fb_vec = None
        feedback = self.feedback_on(switches.feedback, ranked)
        if feedback and vectors is not None and any(len(x) for x in lists):
            # feedback reads every list weighing 1 so far (a routed run's too, when the route fell back): while
            # those are the floor's own lists, their fusion is the question's own, already derived
            fb_at = [i for i, w in enumerate(weights) if w == 1.0]
            own_top = question_ids if own_fusion and not widened and fb_at == own_at else None
            fb_vec, fb_ids, fb_note = self._feedback(scope, vectors[0], lists, weights, [lists[i] for i in fb_at],
                                                     own_top, max(ef, ncand), ncand, search_labels, dl)
            if fb_ids is not None:
                lists.append(fb_ids)
                weights.append(1.0)
            log.record("feedback", fb_vec is not None, fb_note, cut=fb_vec is None)
        else:
            log.record("feedback", False, "no dense candidates" if feedback else
                       "disabled" if switches.feedback is not None or s.feedback is not None else
                       "off with a learned ranker (Settings.feedback)")

        with dl.stage("fuse"):
            if own_fused is not None and not widened and len(lists) == len(own_at):
                # every list is one of the question's own (no variant, no routed run, no feedback, the floor's
                # ef), each weighing 1: the fusion of them all is the question's own, derived above
                fused_ids, fused_scores = own_fused
            else:
                fused_ids, fused_scores = rrf(lists, k=s.rrf_k, weights=weights, top_n=ncand)
            fused_ids = np.asarray(fused_ids, dtype=np.int64)
            fused_scores = np.asarray(fused_scores, dtype=np.float32)
        log.record("fuse", True, f"RRF of {len(lists)} lists -> {len(fused_ids)} candidates")
        keep_fused, keep_question = first.readable(fused_ids, question_ids, dl, log)
        return Candidates(texts, expansions, fused_ids[keep_fused], fused_scores[keep_fused], scored,
                          found[0].question_bm25 if found else None, bm25_query, vectors,
                          question_ids=question_ids[keep_question], feedback_vector=fb_vec, labels=search_labels)

    def _widen(self, first: FirstStage, vectors: np.ndarray, ef: int, k: int, labels: Optional[List[int]],
               dl: Deadline, lists: List[np.ndarray], dense_at: Sequence[int], dense_scores: Dict[int, float]) -> bool:
        """The dense lists searched again at the wider ``ef``, in place of the floor's (same labels); rows new to
        the question's own list get their dense score (the ranker's feature). A row's score does not depend on
        ef, so the floor's scores stand. Returns whether the question's own list changed (a small collection's
        does not: the floor already found every row)."""
        efs = [max(ef, k)] + [max(ef // 2, k)] * (len(vectors) - 1)
        with dl.stage("dense"):
            wider = first.dense(vectors, k, efs, labels)
        changed = False
        for i, at in enumerate(dense_at):
            ids, scores = wider[i]
            if i == 0:
                changed = not np.array_equal(lists[at], ids)
                for row, sc in zip(ids.tolist(), scores.tolist()):
                    dense_scores.setdefault(row, sc)
            lists[at] = ids
        return changed

    def _encode(self, col: CollectionView, texts: Sequence[QueryText], dl: Deadline, log: StageLog) -> np.ndarray:
        """The question's text encoded, and the variants while the budget allows: float32 [n, dim]."""
        n_enc = 1
        reserve = dl.share_ms(RESERVE)
        while n_enc < len(texts) and dl.remaining_ms() - reserve > (n_enc + 1) * self.costs.encode_ms.value:
            n_enc += 1
        with dl.stage("encode"):
            vectors = col.encode_queries([t.text for t in texts[:n_enc]])
        self.costs.encode_ms.update(dl.timings_ms["encode"] / n_enc)
        log.record("encode", True, f"{n_enc} of {len(texts)} query texts"
                   + ("" if n_enc == len(texts) else " (budget: variants searched by BM25 only)"),
                   cut=n_enc < len(texts))
        return vectors

    def _feedback(self, scope: SearchScope, qvec: np.ndarray, lists: Sequence[np.ndarray], weights: Sequence[float],
                  own: Sequence[np.ndarray], own_top: Optional[np.ndarray], ef: int, ncand: int,
                  labels: Optional[List[int]], dl: Deadline) -> Tuple[Optional[np.ndarray], Optional[np.ndarray], str]:
        """Pseudo-relevance feedback: the question vector moved towards the mean of the top fused chunks
        of the lists ``own`` (``own_top``: their fusion when already derived, else fused here),
        searched again (reading ahead the rows of the candidates fused so far, most of the final ones, when the
        first stage fetches rows). Returns (vector, ids, note); (None, None, note) when skipped."""
        s = self.settings
        if dl.remaining_ms() - dl.share_ms(RESERVE) < 2.0 * self.costs.feedback_ms.value:
            return None, None, f"budget: {dl.remaining_ms():.0f} ms left"
        col, first = scope.collection, scope.first
        ahead = (np.asarray(rrf(lists, k=s.rrf_k, weights=weights, top_n=ncand)[0], dtype=np.int64)
                 if first.reads_ahead else None)
        with dl.stage("feedback"):
            # RRF's order is total (score, best rank, id), so the top of a longer fusion is the shorter one
            top = (own_top[:s.feedback_docs] if own_top is not None
                   else np.asarray(rrf(own, k=s.rrf_k, top_n=s.feedback_docs)[0], dtype=np.int64))
            vec = feedback_vector(qvec, col.vectors(top.tolist()), s.feedback_weight, col.normalized)
            ids = first.dense(vec[None, :], ncand, [ef], labels, read_ahead=ahead)[0][0]
        self.costs.feedback_ms.update(dl.timings_ms["feedback"])
        return vec, ids, f"question + {s.feedback_weight:g} x mean of the top {len(top)} fused chunks"
