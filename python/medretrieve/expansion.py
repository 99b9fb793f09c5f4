"""Query understanding and query expansion.

- :func:`classify_query`: rule-based query type on BioASQ phrasing (yesno,
  factoid, list, summary) with clinical intents (symptom, treatment, test,
  general) for questions that are none of those; :func:`clinical_intent`
  drives section routing independently of the BioASQ type.
- Expansions, each a query *variant* that the retriever searches and fuses by
  RRF: abbreviations (built-in list ``assets/abbreviations.tsv``, both
  directions), relations (``assets/relations.tsv``: disease -> treatments,
  gene -> pathway), training memory (nearest questions of a training set and
  the key terms of their relevant snippets), and LLM synonyms when a backend
  is configured.
"""
from __future__ import annotations

import json
import math
import os
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

import numpy as np

from .lexical import LexicalIndex, raw_tokens, stopwords, tokenize

ASSETS = Path(__file__).resolve().parent / "assets"
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

_INTENTS: Tuple[Tuple[str, re.Pattern], ...] = (
    ("treatment", re.compile(r"\b(treat|therap|management|manage[ds]?\b|drugs?\b|medication|cure|dose|dosage|"
                             r"prescri|first[- ]line|inhibitor|vaccine|surgery|surgical)", re.I)),
    ("test", re.compile(r"\b(diagnos|test|detect|screen|biomarker|marker|assay|imaging|scan|measure|"
                        r"laborator|biopsy|sensitivity|specificity)", re.I)),
    ("symptom", re.compile(r"\b(symptom|sign|present(s|ation)?\b|manifest|complain|feature|phenotype)", re.I)),
)


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
    if not isinstance(question, str):
        raise TypeError(f"question must be a string, got {type(question).__name__}")
    q = " ".join(question.strip().split())
    if not q:
        raise ValueError("question is empty")
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


# ---------------------------------------------------------------- term tables


@lru_cache(maxsize=1)
def abbreviations() -> Dict[str, List[str]]:
    """Built-in abbreviation list: abbreviation (case-sensitive) -> expansions."""
    out: Dict[str, List[str]] = {}
    for line in (ASSETS / "abbreviations.tsv").read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        abbr, exp = line.split("\t")
        out[abbr] = exp.split("|")
    return out


@lru_cache(maxsize=1)
def relations() -> Dict[str, Dict[str, List[str]]]:
    """Relation tables: relation kind -> lower-case term -> related terms."""
    out: Dict[str, Dict[str, List[str]]] = {}
    for line in (ASSETS / "relations.tsv").read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        kind, term, rel = line.split("\t")
        out.setdefault(kind, {})[term.lower()] = rel.split("|")
    return out


_WORD_RE = re.compile(r"[^\W_]+(?:[-/'][^\W_]+)*")


def abbreviation_terms(question: str) -> List[str]:
    """Expansions of abbreviations found in ``question`` and abbreviations of long forms found in it."""
    table = abbreviations()
    found: List[str] = []
    low = question.lower()
    for tok in _WORD_RE.findall(question):
        for exp in table.get(tok, ()):
            if exp.lower() not in low:
                found.append(exp)
    for abbr, exps in table.items():
        if len(abbr) >= 2 and any(_phrase_in(e.lower(), low) for e in exps) and abbr not in question:
            found.append(abbr)
    return list(dict.fromkeys(found))


def _phrase_in(phrase: str, text_low: str) -> bool:
    return re.search(r"(?<![\w-])" + re.escape(phrase) + r"(?![\w-])", text_low) is not None


def relation_terms(question: str, kinds: Sequence[str] = ("disease_treatment", "gene_pathway")) -> List[str]:
    """Related terms (treatments of a named disease, pathway of a named gene) for ``question``."""
    low = question.lower()
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
        from .sources import pmid_from_url

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

    def neighbours(self, question: str, n: int = 3, min_score: float = 0.0,
                   exclude_same: bool = True) -> List[Tuple[TrainingItem, float]]:
        """Up to ``n`` nearest training questions with their BM25 score (normalised by the best)."""
        ids, scores = self._index.search(question, k=n + 1)
        out = []
        qn = " ".join(question.lower().split())
        top = float(scores[0]) if len(scores) else 0.0
        for i, s in zip(ids.tolist(), scores.tolist()):
            it = self.items[i]
            if exclude_same and " ".join(it.question.lower().split()) == qn:
                continue
            rel = s / top if top > 0 else 0.0
            if rel >= min_score:
                out.append((it, rel))
        return out[:n]

    def key_terms(self, question: str, n_neighbours: int = 3, n_terms: int = 8) -> List[str]:
        """Key terms of the relevant snippets of the nearest training questions."""
        neigh = self.neighbours(question, n_neighbours)
        if not neigh:
            return []
        qtoks = set(tokenize(question))
        score: Counter = Counter()
        for it, sim in neigh:
            idx = self.items.index(it)
            for toks in self._snippet_tokens[idx]:
                for t in set(toks):
                    if t not in qtoks and len(t) > 2:
                        score[t] += sim * self._idf.get(t, 0.0)
        out = []
        for t, _ in score.most_common(n_terms):
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


# ---------------------------------------------------------------- LLM synonyms


def llm_terms(llm, question: str, kind: str = "synonyms", deadline_ms: Optional[float] = None) -> List[str]:
    """Terms from an LLM backend (``medretrieve.prompts.expansion_messages`` + ``parsers.parse_list``).

    Raises the backend's ``LLMError`` or ``ValueError`` on failure; the caller records it.
    """
    from .parsers import parse_list
    from .prompts import expansion_messages

    text = llm.generate(expansion_messages(question, kind=kind), max_tokens=96, temperature=0.0,
                        deadline_ms=deadline_ms)
    return [t.strip() for t in parse_list(text) if t.strip()][:8]


@lru_cache(maxsize=1)
def _general_vocabulary():
    """BERT's uncased WordPiece vocabulary (the tokenizer shipped for all-MiniLM-L6-v2), no padding."""
    import gzip

    from tokenizers import Tokenizer

    with gzip.open(ASSETS / "all-MiniLM-L6-v2.tokenizer.json.gz", "rt", encoding="utf-8") as fh:
        tok = Tokenizer.from_str(fh.read())
    tok.no_padding()
    tok.no_truncation()
    return tok


_INFLECTIONS = ("s", "es", "ed", "d", "ing", "ly")


@lru_cache(maxsize=65536)
def wordpiece_count(word: str) -> int:
    """Number of WordPiece pieces ``word`` takes in BERT's general-English vocabulary (1 = a known word);
    the fewest over the word and the word less a common inflection ("blockers" counts as "blocker")."""
    vocab = _general_vocabulary()
    forms = [word] + [word[: -len(x)] for x in _INFLECTIONS if word.endswith(x) and len(word) - len(x) >= 3]
    return min(len(vocab.encode(f, add_special_tokens=False).ids) for f in forms)


def subject_words(question: str) -> List[Tuple[Set[str], int]]:
    """The question's subject words: content words outside a general-English vocabulary (split into 2+
    WordPiece pieces, e.g. "motolimod" -> mo ##to ##lim ##od; a compound counts its rarest part) or holding a
    digit, as (BM25 token set, piece count). Unlike idf, this does not depend on the collection, where a
    question's own subject can be common."""
    sw = stopwords()
    out: List[Tuple[Set[str], int]] = []
    seen: Set[str] = set()
    for word in raw_tokens(question):
        if word in seen or word in sw or len(word) < 3:
            continue
        seen.add(word)
        # a compound is as rare as its rarest part ("first-line" is two known words, "anti-ccr4" is not)
        pieces = max(wordpiece_count(part) for part in re.split(r"[-/.]", word) if part)
        if pieces >= 2 or any(c.isdigit() for c in word):
            toks = set(tokenize(word))
            if toks:
                out.append((toks, pieces))
    return out


def content_terms(text: str) -> List[str]:
    """Distinct BM25 tokens of ``text`` (stemmed, no stopwords), in order."""
    return list(dict.fromkeys(tokenize(text)))


def lexical_relevance(question_terms: Sequence[str], snippet: str) -> float:
    """Fraction of the question's content terms present in ``snippet`` (0..1; 0 when no terms)."""
    if not question_terms:
        return 0.0
    st = set(tokenize(snippet))
    return float(np.mean([t in st for t in question_terms]))
