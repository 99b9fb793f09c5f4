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

:func:`extractive_bioasq` is the same without an LLM for a BioASQ question: the ideal answer is those sentences
(uncited), and the exact answer is read from them by rule (yes/no by negation cues; factoid and list candidates
are the evidence's name-like words the question does not hold, ranked by passage rank): a baseline, well below
an LLM's exact answers.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, List, Optional, Sequence, Tuple

from ..corpus.chunking import split_sentences
from ..corpus.lexical import stopwords, tokenize
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
                      max_passages: int = 5, cite: bool = True) -> Optional[str]:
    """The answer made of evidence sentences with ``[n]`` citations (``n``: 1-based position in ``hits``; none
    when not ``cite``), or None when no sentence of the first ``max_passages`` hits reaches ``min_share`` (see
    the module docstring)."""
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
    return " ".join(_cited(s.text, s.passage) if cite else s.text for s in chosen)


def _cited(sentence: str, n: int) -> str:
    """``sentence`` with ``[n]`` before its final full stop."""
    body = sentence.rstrip()
    end = body[-1] if body and body[-1] in ".!?" else "."
    body = body[:-1] if body and body[-1] in ".!?" else body
    return f"{body} [{n}]{end}"


# words that turn a finding into a "no" (the evidence says the thing does not hold)
NEGATION = re.compile(r"\b(not|no|never|neither|nor|cannot|failed|fails|fail|lack|lacks|lacking|absence|"
                      r"unlikely|without)\b|n't\b", re.IGNORECASE)
# a name-like word: a gene / protein / drug symbol (capitals or digits inside) or a long word
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9\-]*[A-Za-z0-9]")
FACTOID_CANDIDATES = 5  # BioASQ scores at most 5 ranked factoid candidates
LIST_ITEMS = 10


def _name_like(word: str) -> bool:
    inner = word[1:]
    return any(c.isupper() or c.isdigit() for c in inner) or len(word) >= 7


def exact_candidates(question: str, passages: Sequence[str], limit: int) -> List[str]:
    """Name-like words of ``passages`` (best first) that the question does not hold, ranked by the sum over the
    passages holding them of ``1 / rank``; at most ``limit``."""
    asked = set(tokenize(question))
    stop = stopwords()
    score: Dict[str, float] = {}
    shown: Dict[str, str] = {}
    for rank, text in enumerate(passages, 1):
        seen = set()
        for word in _WORD.findall(text):
            key = word.lower()
            if key in seen or key in stop or not _name_like(word) or set(tokenize(word)) & asked:
                continue
            seen.add(key)
            shown.setdefault(key, word)
            score[key] = score.get(key, 0.0) + 1.0 / rank
    ranked = sorted(score, key=lambda w: -score[w])
    return [shown[w] for w in ranked[:limit]]


def extractive_bioasq(question: str, qtype: str, hits: Sequence[Any]) -> Tuple[Any, str]:
    """``(exact_answer, ideal_answer)`` for a BioASQ question of type ``qtype`` from its evidence, without an LLM
    (module docstring): yesno ``"yes"``/``"no"`` (None without evidence), factoid ``[[c1], ...]`` (at most 5),
    list ``[[item], ...]``, summary None; the ideal answer is :func:`extractive_answer` uncited, or the best
    passage's first sentence when no sentence holds enough of the question's terms ("" without evidence)."""
    ideal = extractive_answer(question, hits, cite=False)
    if ideal is None and hits:
        sentences = split_sentences(_field(hits[0], "text"))
        ideal = sentences[0].strip() if sentences else ""
    ideal = ideal or ""
    if qtype == "yesno":
        return (("no" if NEGATION.search(ideal) else "yes") if ideal else None), ideal
    if qtype in ("factoid", "list"):
        passages = [ideal] + [_field(h, "text") for h in hits[:5]]
        found = exact_candidates(question, passages, FACTOID_CANDIDATES if qtype == "factoid" else LIST_ITEMS)
        return [[c] for c in found], ideal
    return None, ideal
