"""An answer without an LLM: the sentences of the best evidence that answer the question, each with its citation.

Every sentence of the top evidence passages is scored by the weighted share of the question's content terms
(stemmed BM25 tokens, stopwords out; an abbreviation also counts when its expansion is there) found in it or in
its passage's title and section, each term weighted by
its rarity among these sentences (``log(1 + N / (1 + df))``, so "levodopa" counts more than "treat"), minus a
small penalty per rank of its passage so that the retriever's order breaks ties. The best sentence answers; up
to ``max_sentences - 1`` more are added when each brings question terms the answer does not hold yet. Each
sentence carries ``[n]``, the number of its passage, so the citation verifier
(:func:`~medretrieve.generation.citations.verify_citations`) checks it like an LLM's answer. When no sentence
reaches ``min_share`` there is no answer in the evidence (None).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, List, Optional, Sequence

from ..corpus.chunking import split_sentences
from ..corpus.lexical import tokenize
from ..retrieval.query import Query

RANK_PENALTY = 0.02  # per passage rank: among equally good sentences the better-ranked passage's wins
SUBJECT_WEIGHT = 2.0  # a term naming the question's subject counts this many times


def _field(hit: Any, name: str) -> str:
    return str((hit.get(name, "") if isinstance(hit, dict) else getattr(hit, name, "")) or "")


@dataclass
class _Sentence:
    text: str
    passage: int  # 1-based position of its hit
    position: int  # within the passage
    held: FrozenSet[str]  # question terms in the sentence or its passage's title / section
    score: float = 0.0


def extractive_answer(question: str, hits: Sequence[Any], max_sentences: int = 2, min_share: float = 0.4,
                      max_passages: int = 5) -> Optional[str]:
    """The answer made of evidence sentences with ``[n]`` citations (``n``: 1-based position in ``hits``), or
    None when no sentence of the first ``max_passages`` hits reaches ``min_share`` (see the module docstring)."""
    query = Query.analyse(question)
    terms = set(query.terms)
    if not terms or max_sentences < 1:
        return None

    def has(t: str, toks: set) -> bool:
        if t in toks or any(a and a <= toks for a in query.alternatives.get(t, ())):
            return True
        return len(t) >= 5 and any(len(x) >= 5 and (x.startswith(t) or t.startswith(x)) for x in toks)

    def held(toks: set) -> FrozenSet[str]:
        return frozenset(t for t in terms if has(t, toks))

    subject = {t for ts, _ in query.subject for t in ts} | set(tokenize(" ".join(query.entities)))

    sentences: List[_Sentence] = []
    for n, hit in enumerate(hits[:max_passages], 1):
        context = set(tokenize(f"{_field(hit, 'title')} {_field(hit, 'section')}"))
        for pos, text in enumerate(split_sentences(_field(hit, "text"))):
            sentences.append(_Sentence(text.strip(), n, pos, held(set(tokenize(text)) | context)))
    if not sentences:
        return None
    df: Dict[str, int] = {t: sum(t in s.held for s in sentences) for t in terms}
    weight = {t: math.log(1.0 + len(sentences) / (1.0 + df[t])) * (SUBJECT_WEIGHT if t in subject else 1.0)
              for t in terms}
    total = sum(weight.values())
    for s in sentences:
        s.score = sum(weight[t] for t in s.held) / total - RANK_PENALTY * (s.passage - 1)
    ranked = sorted((s for s in sentences if s.score >= min_share), key=lambda s: (-s.score, s.passage, s.position))
    if not ranked:
        return None
    chosen = [ranked[0]]
    covered = set(ranked[0].held)
    for s in ranked[1:]:
        if len(chosen) >= max_sentences:
            break
        if s.held - covered:
            chosen.append(s)
            covered |= s.held
    chosen.sort(key=lambda s: (s.passage, s.position))  # passage order reads better than score order
    return " ".join(_cited(s.text, s.passage) for s in chosen)


def _cited(sentence: str, n: int) -> str:
    """``sentence`` with ``[n]`` before its final full stop."""
    body = sentence.rstrip()
    end = body[-1] if body and body[-1] in ".!?" else "."
    body = body[:-1] if body and body[-1] in ".!?" else body
    return f"{body} [{n}]{end}"
