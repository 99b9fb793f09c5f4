"""Query expansion: extra terms for a question, each set searched as a query *variant* and fused by RRF.

- abbreviations (:func:`abbreviation_terms`: ``assets/abbreviations.tsv``, both directions);
- relations (:func:`relation_terms`: ``assets/relations.tsv``, disease -> treatments, gene -> pathway);
- training memory (:class:`TrainingMemory`: nearest questions of a training set and the key terms of their
  relevant snippets);
- LLM synonyms, from any :data:`TermSource` the caller passes (``generation.terms.llm_synonyms(backend)`` makes one
  from an LLM backend), so retrieval never imports generation.

Every function takes the analysed :class:`~medretrieve.retrieval.query.Query` (or a question string, which it
analyses) and never tokenises the question again.
"""
from __future__ import annotations

import json
import math
import os
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple

import numpy as np

from ..corpus.lexical import LexicalIndex, tokenize
from .query import QueryLike, as_query
from .vocabulary import abbreviations, relations

# question, time left (ms, None = no deadline) -> expansion terms; may raise (the stage records the failure)
TermSource = Callable[[str, Optional[float]], Sequence[str]]


def abbreviation_terms(question: QueryLike) -> List[str]:
    """Expansions of abbreviations found in ``question`` and abbreviations of long forms found in it."""
    query = as_query(question)
    table = abbreviations()
    found: List[str] = []
    low = query.lower
    for tok in query.words:
        for exp in table.get(tok, ()):
            if exp.lower() not in low:
                found.append(exp)
    for abbr, exps in table.items():
        if len(abbr) >= 2 and any(_phrase_in(e.lower(), low) for e in exps) and abbr not in query.text:
            found.append(abbr)
    return list(dict.fromkeys(found))


def _phrase_in(phrase: str, text_low: str) -> bool:
    return re.search(r"(?<![\w-])" + re.escape(phrase) + r"(?![\w-])", text_low) is not None


def relation_terms(question: QueryLike, kinds: Sequence[str] = ("disease_treatment", "gene_pathway")) -> List[str]:
    """Related terms (treatments of a named disease, pathway of a named gene) for ``question``."""
    low = as_query(question).lower
    tabs = relations()
    found: List[str] = []
    for kind in kinds:
        for term, rel in tabs.get(kind, {}).items():
            if _phrase_in(term, low):
                found.extend(r for r in rel if r.lower() not in low)
    return list(dict.fromkeys(found))[:8]


# ---------------------------------------------------------------- training memory


@dataclass
class TrainingItem:
    question: str
    documents: List[str]
    snippets: List[str]


class TrainingMemory:
    """Nearest training questions (BM25 over their text) and the key terms of their evidence.

    Key terms of a neighbour set: tokens of the neighbours' relevant snippets,
    scored by ``count * idf`` (idf over all training snippets), excluding the
    question's own tokens; the top ``n_terms`` are returned.
    """

    def __init__(self, items: Sequence[TrainingItem]) -> None:
        self.items = [it for it in items if it.question.strip()]
        if not self.items:
            raise ValueError("training memory needs at least one question")
        self._index = LexicalIndex()
        self._index.add([it.question for it in self.items], range(len(self.items)))
        self._snippet_tokens = [[tokenize(s) for s in it.snippets] for it in self.items]
        # stem -> the surface word seen most often, so expansion variants read as words
        self._surface: Dict[str, Counter] = {}
        for it in self.items:
            for s in it.snippets:
                for w in re.findall(r"[^\W_]+(?:[-/][^\W_]+)*", s):
                    st = tokenize(w)
                    if len(st) == 1:
                        self._surface.setdefault(st[0], Counter())[w.lower()] += 1
        df: Counter = Counter()
        n = 0
        for toks in self._snippet_tokens:
            for t in toks:
                df.update(set(t))
                n += 1
        self._idf = {t: math.log(1 + n / c) for t, c in df.items()}

    def __len__(self) -> int:
        return len(self.items)

    @classmethod
    def from_bioasq(cls, files: Iterable) -> "TrainingMemory":
        """Questions, documents (PMIDs) and snippets of BioASQ golden JSON files."""
        from ..corpus.sources import pmid_from_url

        if isinstance(files, (str, os.PathLike)):
            files = [files]
        if not isinstance(files, Iterable):
            raise TypeError(f"BioASQ golden files must be paths, got {type(files).__name__}: {files!r}")
        items: List[TrainingItem] = []
        for f in files:
            if not isinstance(f, (str, os.PathLike)):
                raise TypeError(f"BioASQ golden files must be paths, got {type(f).__name__}: {f!r}")
            with open(f, "r", encoding="utf-8") as fh:
                data = json.load(fh)
            for q in data.get("questions", []):
                docs = []
                for d in q.get("documents") or []:
                    try:
                        docs.append(pmid_from_url(d))
                    except ValueError:
                        continue
                snips = [s.get("text", "") for s in q.get("snippets") or [] if isinstance(s, dict)]
                items.append(TrainingItem(q.get("body", ""), docs, [s for s in snips if s]))
        return cls(items)

    def pairs(self) -> List[Tuple[str, Set[str]]]:
        """``(question, relevant document ids)`` of every training question."""
        return [(it.question, set(it.documents)) for it in self.items]

    def neighbours(self, question: QueryLike, n: int = 3, min_score: float = 0.0,
                   exclude_same: bool = True) -> List[Tuple[TrainingItem, float]]:
        """Up to ``n`` nearest training questions with their BM25 score (normalised by the best)."""
        query = as_query(question)
        ids, scores = self._index.search(list(query.tokens), k=n + 1)
        out = []
        qn = query.lower
        top = float(scores[0]) if len(scores) else 0.0
        for i, s in zip(ids.tolist(), scores.tolist()):
            it = self.items[i]
            if exclude_same and " ".join(it.question.lower().split()) == qn:
                continue
            rel = s / top if top > 0 else 0.0
            if rel >= min_score:
                out.append((it, rel))
        return out[:n]

    def key_terms(self, question: QueryLike, n_neighbours: int = 3, n_terms: int = 8) -> List[str]:
        """Key terms of the relevant snippets of the nearest training questions."""
        query = as_query(question)
        neigh = self.neighbours(query, n_neighbours)
        if not neigh:
            return []
        qtoks = set(query.tokens)
        score: Dict[str, float] = {}
        for it, sim in neigh:
            idx = self.items.index(it)
            for toks in self._snippet_tokens[idx]:
                for t in set(toks):
                    if t not in qtoks and len(t) > 2:
                        score[t] = score.get(t, 0.0) + sim * self._idf.get(t, 0.0)
        out = []
        for t, _ in sorted(score.items(), key=lambda kv: -kv[1])[:n_terms]:
            forms = self._surface.get(t)
            out.append(forms.most_common(1)[0][0] if forms else t)
        return out


def training_pairs(examples: Any) -> List[Tuple[str, Set[str]]]:
    """``(question, relevant document ids)`` from a :class:`TrainingMemory`, BioASQ golden files (paths),
    or ``(question, document ids)`` pairs; anything else raises TypeError."""
    if isinstance(examples, (list, tuple)) and examples and all(
            isinstance(e, (tuple, list)) and len(e) == 2 and isinstance(e[0], str) for e in examples):
        return [(q, set(map(str, docs))) for q, docs in examples]
    if not isinstance(examples, TrainingMemory):
        examples = TrainingMemory.from_bioasq(examples)
    return examples.pairs()




def lexical_relevance(question_terms: Sequence[str], snippet: str) -> float:
    """Fraction of the question's content terms present in ``snippet`` (0..1; 0 when no terms)."""
    if not question_terms:
        return 0.0
    st = set(tokenize(snippet))
    return float(np.mean([t in st for t in question_terms]))
