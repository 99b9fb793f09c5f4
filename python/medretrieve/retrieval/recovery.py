"""Selecting the hits, telling a weak question, and recovering it; pruning hits for a prompt.

- :meth:`Recovery.select`: the best ``k`` candidates, dropping near-duplicates (token Jaccard >=
  ``near_duplicate``) and, optionally, more than ``per_document`` chunks of one document.
- :meth:`Recovery.weak_reasons`: a question is weak when its best evidence is: when not one of the top
  ``weak_depth`` hits of the question's own search (by default the first alone) holds ``weak_threshold`` of its
  content terms ("no matching evidence"), or when the question names a subject (a rare word: a drug, a gene, a
  disease) and not one of them holds ``subject_threshold`` of it ("subject not found"). Only the best hits are read: on a small or mixed corpus
  the rest of a list is off-topic by nature, and a strong question must not be flagged for it. The thresholds
  were tuned as a classifier on BioASQ 7b and checked on 12b and the demo questions (bench/weak.py;
  bench/RESULTS.md, "Weak questions").
- :meth:`Recovery.recover`: the extra queries it is given (wider expansions and the relaxed query,
  :meth:`~.candidates.CandidateGenerator.recovery_queries`) searched through the first stage, merged selectively: only hits in the lower half
  whose lexical relevance is below the threshold (or, with too few articles, repeats of one article) are
  replaced, only by better ones, and never by a candidate whose document covers less of the question's subject.
- :func:`prune`: snippets for a prompt, best first, capped per question and per document.
"""
from __future__ import annotations

from typing import AbstractSet, Any, Dict, List, Optional, Sequence, Set, Tuple, Union

import numpy as np

from ..corpus.lexical import tokenize
from ..fusion import rrf
from ..outbound import Deadline
from .budget import CostModel
from .candidates import RecoveryQueries
from .matching import jaccard, subject_share
from .query import Query
from .results import Hit, SearchResult
from .scope import SearchScope
from .settings import Settings, check_settings


def prune(hits: Union[SearchResult, Sequence[Hit]], per_question: int = 2, per_document: int = 1,
          near_duplicate: float = 0.8) -> List[Hit]:
    """Snippets for a prompt: best first, at most ``per_document`` per document and ``per_question``
    in all, dropping near-duplicates (token Jaccard >= ``near_duplicate``)."""
    if isinstance(hits, SearchResult):
        hits = hits.hits
    check_settings(per_question=per_question, per_document=per_document, near_duplicate=near_duplicate)
    out: List[Hit] = []
    per_doc: Dict[str, int] = {}
    seen: List[Set[str]] = []
    for h in hits:
        if per_doc.get(h.document_id, 0) >= per_document:
            continue
        toks = set(tokenize(h.text))
        if any(jaccard(toks, s) >= near_duplicate for s in seen):
            continue
        out.append(h)
        seen.append(toks)
        per_doc[h.document_id] = per_doc.get(h.document_id, 0) + 1
        if len(out) >= per_question:
            break
    return out


class Recovery:
    """Selection, weak-question detection and recovery (see the module docstring): built once per retriever,
    each call reads the :class:`~.scope.SearchScope` it is given."""

    def __init__(self, settings: Settings, costs: CostModel) -> None:
        self.settings = settings
        self.costs = costs

    def select(self, scope: SearchScope, rows: Sequence[int], k: int, per_document: Optional[int]) -> List[int]:
        tokens = scope.tokens
        out: List[int] = []
        seen: List[AbstractSet[str]] = []
        per_doc: Dict[str, int] = {}
        for r in rows:
            doc = scope.collection.rows[r].document_id
            if per_document is not None and per_doc.get(doc, 0) >= per_document:
                continue
            if tokens.near_duplicate_of(r, seen, self.settings.near_duplicate):
                continue
            out.append(r)
            seen.append(tokens.of_row(r))
            per_doc[doc] = per_doc.get(doc, 0) + 1
            if len(out) >= k:
                break
        return out

    @staticmethod
    def _mean_relevance(scope: SearchScope, query: Query, rows: Sequence[int]) -> float:
        return float(np.mean([scope.tokens.lexical_relevance(query, r) for r in rows])) if rows else 0.0

    def evidence(self, scope: SearchScope, query: Query, top: Sequence[int]) -> List[Tuple[float, float]]:
        """(share of the question's content terms, share of its subject words) of each of the first
        ``weak_depth`` hits of ``top``; the subject share is 1.0 for a question without subject words."""
        tokens = scope.tokens
        return [(tokens.lexical_relevance(query, r),
                 subject_share(query.subject, tokens.of_row(r)) if query.subject else 1.0)
                for r in top[:self.settings.weak_depth]]

    def weak_reasons(self, scope: SearchScope, query: Query, top: Sequence[int], k: int) -> List[str]:
        """Why the question is weak, in words a reader follows (empty: its best evidence is strong)."""
        s = self.settings
        if not top:
            return ["no hits"]
        shares = self.evidence(scope, query, top)
        reasons = []
        best_terms = max(t for t, _ in shares)
        if best_terms < s.weak_threshold:
            reasons.append(f"no matching evidence: the best passage holds {best_terms:.0%} of the question's "
                           f"words (needs {s.weak_threshold:.0%})")
        best_subject = max(sub for _, sub in shares)
        if best_subject < s.subject_threshold:
            held = set().union(*(scope.tokens.of_row(r) for r in top[:s.weak_depth]))
            missing = [toks for toks, _ in query.subject if not toks & held] or [t for t, _ in query.subject]
            words = [w for w in query.words if any(set(tokenize(w)) & toks for toks in missing)]
            reasons.append(f"subject not found: the best evidence does not mention {', '.join(dict.fromkeys(words))}")
        return reasons

    def _recovery_lists(self, scope: SearchScope, queries: RecoveryQueries, dl: Deadline,
                        only: Optional[List[int]]) -> List[np.ndarray]:
        """Candidate lists of the recovery queries: BM25 of each, and (time allowing) a dense search of the first
        of them. ``only``: the index labels the search is restricted to (None: all)."""
        s = self.settings
        col, first = scope.collection, scope.first
        texts = queries.texts
        lists = [first.lexical(t.tokens, s.candidates, only)[0] for t in texts]
        searchable = (col.alive if only is None else col.allowed(only)).any()
        if texts and searchable and dl.remaining_ms() > 2 * self.costs.encode_ms.value + 10:
            qv = col.encode_queries([texts[0].text])
            lists.append(first.dense(qv, s.candidates, [max(s.ef_max, s.candidates)], only)[0][0])
        return lists

    def recover(self, scope: SearchScope, query: Query, top: List[int], k: int, queries: RecoveryQueries,
                dl: Deadline, only: Optional[List[int]] = None) -> Tuple[List[int], Dict[str, Any]]:
        """The extra ``queries`` searched (restricted to the index labels ``only`` when given); replace only weak
        hits, and only with better ones. Returns the new top and a report (``replaced``, ``note``, ``terms``,
        ``added_rows``, lexical relevance before / after)."""
        s = self.settings
        rows, tokens = scope.collection.rows, scope.tokens
        lists = self._recovery_lists(scope, queries, dl, only)
        terms, n_queries = queries.terms, len(queries.texts)
        cand, _ = rrf(lists, k=s.rrf_k, top_n=s.candidates) if lists else (np.zeros(0, np.int64), None)
        in_top = set(top)
        cand_rel = sorted(((tokens.lexical_relevance(query, r), r)
                           for r in np.asarray(cand, dtype=np.int64).tolist() if r not in in_top),
                          key=lambda x: -x[0])
        new_top = list(top)
        doc_ids: Dict[int, str] = {}

        def doc_of(row: int) -> str:  # a chunk row's fields are parsed on each access: read each document id once
            if row not in doc_ids:
                doc_ids[row] = rows[row].document_id
            return doc_ids[row]

        few_articles = len({doc_of(r) for r in top}) < min(s.min_articles, k)
        rel_now = {r: tokens.lexical_relevance(query, r) for r in new_top}
        # only the lower half of the list is open to replacement: the top hits are the retrievers' strongest
        # agreement and are never displaced; weakest first, then (too few articles) repeats of one article
        half = max(1, len(new_top) // 2)
        low = sorted((i for i, r in enumerate(new_top) if i >= half and rel_now[r] < s.weak_threshold),
                     key=lambda i: rel_now[new_top[i]])
        repeats: List[int] = []
        if few_articles:
            first_of: Dict[str, int] = {}
            for i, r in enumerate(new_top):
                first_of.setdefault(doc_of(r), i)
            repeats = [i for i in reversed(range(half, len(new_top)))
                       if first_of[doc_of(new_top[i])] != i and i not in low]
        used_rows: Set[int] = set(new_top)
        added: List[int] = []
        doc_subject: Dict[str, float] = {}

        def subject_of(row: int) -> float:
            d = doc_of(row)
            if d not in doc_subject:
                doc_subject[d] = subject_share(query.subject, tokens.of_document(d)) if query.subject else 0.0
            return doc_subject[d]

        def relevant_enough(rel: float, old_rel: float, need_new_doc: bool) -> bool:
            """A repeat may give way to a new article at least as relevant; a weak hit only to a better one that
            itself passes the threshold."""
            return rel >= old_rel if need_new_doc else (rel >= s.weak_threshold and rel > old_rel)

        for i in low + repeats:
            old = new_top[i]
            need_new_doc = i in repeats
            docs_now = {doc_of(r) for r in new_top}
            old_subject = subject_of(old)
            for rel, r in cand_rel:
                if not relevant_enough(rel, rel_now[old], need_new_doc):
                    break  # cand_rel is sorted by relevance: no later candidate is relevant enough either
                # a replacement may not cover less of the question's subject (drug, gene) than the hit it
                # replaces; the near-duplicate test, the costliest, comes last
                if r in used_rows or subject_of(r) < old_subject or (need_new_doc and doc_of(r) in docs_now):
                    continue
                if any(jaccard(tokens.of_row(r), tokens.of_row(o)) >= s.near_duplicate for o in new_top):
                    continue
                new_top[i] = r
                used_rows.add(r)
                added.append(r)
                break
        for rel, r in cand_rel:  # fill up when the first pass returned fewer than k
            if len(new_top) >= k:
                break
            if r not in used_rows:
                new_top.append(r)
                used_rows.add(r)
                added.append(r)
        note = f"{n_queries} recovery queries ({', '.join(terms) or 'relaxed terms only'}); {len(added)} weak hits replaced"
        return new_top, {"replaced": len(added), "note": note, "terms": terms, "added_rows": set(added),
                         "lexical_relevance_before": self._mean_relevance(scope, query, top[:5]),
                         "lexical_relevance_after": self._mean_relevance(scope, query, new_top[:5])}
