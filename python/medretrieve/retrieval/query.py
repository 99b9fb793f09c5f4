"""The question, analysed once per search: every stage reads this :class:`Query` and none re-tokenises it.

:meth:`Query.analyse` makes one tokenising pass (``corpus.lexical.word_tokens``) and derives from it:

- ``tokens`` (BM25 tokens in order, repeats kept) and ``terms`` (distinct content terms);
- ``qtype`` (:func:`classify_query`: the BioASQ type when the phrasing tells, else the clinical intent) and
  ``intent`` (:func:`clinical_intent`: treatment / test / symptom / general, which drives section routing);
- ``subject``: subject words, the content words outside a general-English vocabulary (split into 2+ WordPiece
  pieces, e.g. "motolimod" -> mo ##to ##lim ##od; a compound counts its rarest part) or holding a digit, as
  (BM25 token set, piece count). Unlike idf this does not depend on the collection, where a question's own
  subject can be common;
- ``entities``: entity-like words (a digit, a hyphen, or 2+ capitals: "IL-6", "BRCA1");
- ``alternatives``: content term of an abbreviation in the question -> token sets of its expansions, so
  "MI" also matches "myocardial infarction" wherever question terms are matched.

The analysis is immutable (a frozen dataclass): what later stages derive from it (the encoded query texts, the
first-stage lists) travels beside it (:class:`~.candidates.Candidates`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, List, Optional, Sequence, Set, Tuple, Union


from ..corpus.lexical import stopwords, tokenize, word_tokens
from .vocabulary import abbreviations, wordpiece_count

QUERY_TYPES = ("yesno", "factoid", "list", "summary", "symptom", "treatment", "test", "general")

# ---------------------------------------------------------------- classification

_YESNO_START = re.compile(
    r"^(is|are|was|were|does|do|did|can|could|has|have|had|should|will|would|may|might|must)\b", re.I)
_SUMMARY = re.compile(
    r"^(describe|explain|summari[sz]e|discuss|how\s+(does|do|is|are|can)\b)|"
    r"\bwhat\s+(is|are)\s+(the\s+)?(role|function|mechanism|effect|effects|impact|purpose|"
    r"significance|relationship|association|difference|implication|involvement)s?\s+(of|between)\b|"
    r"^what\s+is\s+(known|the\s+evidence)\b|^what\s+is\s+(an?\s+)?[\w\-\s']{1,40}\?$|^what\s+does\s+\w+\s+do\b",
    re.I)
_LIST = re.compile(
    r"^(list|name|enumerate|give)\b|\blist\s+(of|the|all)\b|^(which|what)\s+(are|were)\b|"
    r"^(which|what)\s+([\w\-/']+\s+){0,5}?(are|were|have\s+been|can\s+be\s+\w+ed)\b|"
    r"^(which|what)\s+\w+(s|ies|ae|ses|ents|ors)\s+(is|are|were|have|has|can|do|does)\b",
    re.I)
# "What is the cause / indication / name ..." asks for one entity.
_FACTOID_WHAT = re.compile(
    r"^what\s+is\s+the\s+(\w+\s+)?(cause|indication|name|tradename|trade\s+name|route|price|dose|"
    r"most\s+common|percentage|frequency|gene|target|receptor|number|incidence|prevalence|"
    r"origin|inheritance|mode\s+of\s+inheritance|age|size|length|rate)\b", re.I)
_FACTOID = re.compile(r"^(what|which|who|whom|where|when|how\s+(many|much|long|often|old)|name|in\s+which)\b", re.I)

_INTENTS: Tuple[Tuple[str, "re.Pattern[str]"], ...] = (
    ("treatment", re.compile(r"\b(treat|therap|management|manage[ds]?\b|drugs?\b|medication|cure|dose|dosage|"
                             r"prescri|first[- ]line|inhibitor|vaccine|surgery|surgical)", re.I)),
    ("test", re.compile(r"\b(diagnos|test|detect|screen|biomarker|marker|assay|imaging|scan|measure|"
                        r"laborator|biopsy|sensitivity|specificity)", re.I)),
    ("symptom", re.compile(r"\b(symptom|sign|present(s|ation)?\b|manifest|complain|feature|phenotype)", re.I)),
)


def _normalised(question: str) -> str:
    if not isinstance(question, str):
        raise TypeError(f"question must be a string, got {type(question).__name__}")
    q = " ".join(question.strip().split())
    if not q:
        raise ValueError("question is empty")
    return q


def clinical_intent(question: str) -> str:
    """``treatment``, ``test``, ``symptom`` or ``general`` (first matching rule)."""
    for name, rx in _INTENTS:
        if rx.search(question):
            return name
    return "general"


def classify_query(question: str) -> str:
    """One of ``QUERY_TYPES``: the BioASQ type when the phrasing tells, else the clinical intent.

    Rules (checked in order): yes/no questions start with an auxiliary verb
    ("Is", "Does", "Can" ...); summary questions ask to describe / explain or
    for the role, mechanism or effect of something ("What is the role of");
    list questions ask to list/name or use a plural ("Which genes are ...",
    "What are ..."); factoid questions start with what / which / who / where /
    when / how many. Anything else gets its clinical intent.
    """
    q = _normalised(question)
    if _YESNO_START.match(q) or re.search(r"\byes\s+or\s+no\b", q, re.I):
        return "yesno"
    if re.match(r"^(please\s+)?(list|enumerate)\b", q, re.I):
        return "list"
    if _FACTOID_WHAT.match(q):
        return "factoid"
    if _SUMMARY.search(q):
        return "summary"
    if _LIST.search(q):
        return "list"
    if _FACTOID.match(q) or re.search(r"\b(which|what)\b", q, re.I):
        return "factoid"
    return clinical_intent(q)


# ---------------------------------------------------------------- per-word views

# surface words as written (abbreviations are case-sensitive: "MS" is not "ms")
WORD_RE = re.compile(r"[^\W_]+(?:[-/'][^\W_]+)*")
_ENTITY_RE = re.compile(r"[^\W_]+(?:[-/][^\W_]+)*")

Subject = Tuple[FrozenSet[str], int]  # (BM25 token set of a subject word, its WordPiece count)


def _subject(per_word: Sequence[Tuple[str, List[str]]]) -> List[Subject]:
    sw = stopwords()
    out: List[Subject] = []
    seen: Set[str] = set()
    for word, toks in per_word:
        if word in seen or word in sw or len(word) < 3:
            continue
        seen.add(word)
        # a compound is as rare as its rarest part ("first-line" is two known words, "anti-ccr4" is not)
        pieces = max(wordpiece_count(part) for part in re.split(r"[-/.]", word) if part)
        if (pieces >= 2 or any(c.isdigit() for c in word)) and toks:
            out.append((frozenset(toks), pieces))
    return out


def _entities(question: str) -> List[str]:
    out = []
    for tok in _ENTITY_RE.findall(question):
        if any(c.isdigit() for c in tok) or "-" in tok or sum(c.isupper() for c in tok) >= 2:
            out.append(tok.lower())
    return list(dict.fromkeys(out))


def _alternatives(words: Sequence[str], tokens_of: Dict[str, List[str]]) -> Dict[str, List[FrozenSet[str]]]:
    table = abbreviations()
    out: Dict[str, List[FrozenSet[str]]] = {}
    for word in words:
        if word in table:
            key = tokens_of.get(word.lower())
            if key:
                out.setdefault(key[0], []).extend(frozenset(tokenize(e)) for e in table[word])
    return out


@dataclass(frozen=True)
class Query:
    """One question, analysed once (see the module docstring). Build it with :meth:`analyse`."""

    text: str  # the question, whitespace collapsed
    qtype: str
    intent: str
    words: Tuple[str, ...]  # surface words as written
    tokens: Tuple[str, ...]  # BM25 tokens in order
    terms: Tuple[str, ...]  # distinct BM25 tokens (content terms)
    subject: Tuple[Subject, ...]
    entities: Tuple[str, ...]
    alternatives: Dict[str, List[FrozenSet[str]]] = field(default_factory=dict)

    @property
    def lower(self) -> str:
        return self.text.lower()

    @classmethod
    def analyse(cls, question: str) -> "Query":
        """Analyse ``question`` (ValueError when empty, TypeError when not a string)."""
        text = _normalised(question)
        per_word = word_tokens(text)
        tokens = tuple(t for _, toks in per_word for t in toks)
        tokens_of = {w: toks for w, toks in per_word}
        words = tuple(WORD_RE.findall(text))
        return cls(text=text, qtype=classify_query(text), intent=clinical_intent(text), words=words,
                   tokens=tokens, terms=tuple(dict.fromkeys(tokens)), subject=tuple(_subject(per_word)),
                   entities=tuple(_entities(text)), alternatives=_alternatives(words, tokens_of))


QueryLike = Union[str, Query]


def as_query(question: QueryLike) -> Query:
    """``question`` itself when it is a :class:`Query`, else its analysis."""
    return question if isinstance(question, Query) else Query.analyse(question)


def subject_words(question: QueryLike) -> List[Subject]:
    """The question's subject words as (BM25 token set, WordPiece count) (see the module docstring)."""
    return list(as_query(question).subject)


def content_terms(text: str) -> List[str]:
    """Distinct BM25 tokens of ``text`` (stemmed, no stopwords), in order."""
    return list(dict.fromkeys(tokenize(text)))
