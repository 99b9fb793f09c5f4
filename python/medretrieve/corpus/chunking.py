"""Hierarchical chunking with adaptive overlap and parent links.

A document is cut section -> paragraph -> sentence (-> words, only for a single
sentence longer than a chunk). A section that fits in one chunk is never
split. Every chunk points to its parent section (``parent_id``), so a hit can
return the whole section as context.

Token counts use :func:`count_tokens`, a cheap estimate of BERT WordPiece
counts: every punctuation mark is one token, every word is one token plus one
more per 8 characters beyond the first (long biomedical words split into
several word pieces). It needs no vocabulary and is within ~15% of the real
tokenizer on biomedical English, which is enough to keep chunks under the
encoder's window (256 word pieces for MiniLM).

Adaptive overlap (when a section is split): none for sections under
``overlap_min_tokens`` (100) tokens, ``overlap`` (30%) of ``max_tokens`` for
standard sections, ``complex_overlap`` (50%) for complex sections (a title
matching ``complex_title_pattern``, e.g. differential diagnosis, or text that
is mostly a list). The overlap is whole trailing sentences of the previous
chunk (cut to words if one sentence is longer) and is kept apart from the
chunk's own text (``overlap_text`` vs ``core_text``), so the embedding can
down-weight it: see :func:`overlap_weights`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .sources import Record
from .spans import source_layout

# ---------------------------------------------------------------- token counting

_TOKEN_RE = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    """Estimated WordPiece token count of ``text`` (see module docstring)."""
    n = 0
    for m in _TOKEN_RE.finditer(text):
        w = m.group(0)
        n += 1 + (max(len(w) - 1, 0) // 8)
    return n


# ---------------------------------------------------------------- sentence splitting

# Lower-cased words that end with a period without ending a sentence.
ABBREVIATIONS = frozenset(
    """e.g i.e et al vs v fig figs tab eq eqs ref refs approx ca cf dr drs mr mrs prof st jr sr no nos
    vol pp p resp incl inc ltd co corp dept univ sp spp var avg jan feb mar apr jun jul aug sep
    sept oct nov dec u.s u.k e.u a.m p.m ph.d m.d b.i.d t.i.d q.i.d p.o i.v i.m s.c
    """.split()
)

# candidate boundary: . ! or ? (plus closing quotes/brackets), whitespace, then a
# sentence start (capital, digit, opening quote/bracket)
_BOUNDARY_RE = re.compile(r"[.!?][\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")
_WORD_BEFORE_RE = re.compile(r"([A-Za-z][A-Za-z.]*)\.$")


def split_sentences(text: str) -> List[str]:
    """Split ``text`` into sentences, surviving biomedical abbreviations.

    Not a boundary: a period after a known abbreviation ("e.g.", "et al.",
    "vs.", "Fig. 2", "approx.", "Dr.", "U.S."), after a single capital letter
    (an initial: "J. Smith"), or inside a number ("2.5 mg" has no space).
    """
    text = text.strip()
    if not text:
        return []
    out: List[str] = []
    start = 0
    for m in _BOUNDARY_RE.finditer(text):
        end = m.start() + 1  # include the terminal mark
        piece = text[start:end]
        if text[m.start()] == ".":
            wm = _WORD_BEFORE_RE.search(piece)
            if wm:
                word = wm.group(1)
                low = word.lower()
                if low in ABBREVIATIONS or (len(word) == 1 and word.isupper()):
                    continue
                # dotted abbreviations such as "U.S." or "e.g." spelled with capitals
                if "." in word and len(word) <= 6:
                    continue
        sentence = text[start:m.end()].strip()
        if sentence:
            out.append(sentence)
        start = m.end()
    rest = text[start:].strip()
    if rest:
        out.append(rest)
    return out


def split_paragraphs(text: str) -> List[str]:
    """Paragraphs are separated by blank lines (or single newlines between lines)."""
    parts = re.split(r"\n\s*\n|\r?\n", text)
    return [" ".join(p.split()) for p in parts if p.strip()]


# ---------------------------------------------------------------- section categories

# Section category -> title pattern. The category id (position + 1) is the
# label stored with each chunk in the dense index, so searches can be
# restricted to e.g. treatment sections. 0 = other / unknown.
SECTION_CATEGORIES: Tuple[Tuple[str, str], ...] = (
    ("treatment", r"treat|therap|management|plan\b|intervention|dosing|dosage|medication|drug|pharmaco"),
    ("symptoms", r"symptom|sign|clinical (feature|presentation|manifestation)|presentation|complaint"),
    ("diagnosis", r"diagnos|test|investigation|laborator|imaging|workup|work-up|screening|assessment"),
    ("etiology", r"etiolog|aetiolog|cause|pathogen|pathophysiolog|mechanism|risk factor"),
    ("prognosis", r"prognos|outcome|complication|follow-up|survival"),
    ("background", r"background|introduction|overview|definition|epidemiolog|objective|purpose|aim"),
    ("methods", r"method|design|setting|participants|patients and|materials|study"),
    ("results", r"result|finding|measurement"),
    ("conclusions", r"conclusion|discussion|interpretation|summary|implication"),
)
_CATEGORY_RES = [(name, re.compile(pat, re.I)) for name, pat in SECTION_CATEGORIES]
CATEGORY_IDS: Dict[str, int] = {name: i + 1 for i, (name, _) in enumerate(SECTION_CATEGORIES)}


def section_category(title: str) -> str:
    """The category of a section title ("" when none matches)."""
    for name, rx in _CATEGORY_RES:
        if title and rx.search(title):
            return name
    return ""


def section_label(title: str) -> int:
    """Integer label of a section title for the index (0 = other)."""
    return CATEGORY_IDS.get(section_category(title), 0)


# ---------------------------------------------------------------- chunks


@dataclass
class ChunkingConfig:
    """Chunking settings (tokens are :func:`count_tokens` estimates)."""

    max_tokens: int = 200
    overlap: float = 0.30
    complex_overlap: float = 0.50
    overlap_min_tokens: int = 100
    complex_title_pattern: str = r"differential|diagnos|criteria|classification|contraindication|interaction|adverse"
    list_fraction: float = 0.5  # a section whose lines are mostly list items is complex
    overlap_weight: float = 0.5  # embedding weight of an overlap token relative to a core token

    def __post_init__(self) -> None:
        if not isinstance(self.max_tokens, int) or self.max_tokens < 8:
            raise ValueError(f"max_tokens must be an integer >= 8, got {self.max_tokens!r}")
        for name in ("overlap", "complex_overlap"):
            v = getattr(self, name)
            if not 0.0 <= v <= 0.5:
                raise ValueError(f"{name} must be in [0, 0.5], got {v!r}")
        if not 0.0 <= self.overlap_weight <= 1.0:
            raise ValueError(f"overlap_weight must be in [0, 1], got {self.overlap_weight!r}")
        try:
            re.compile(self.complex_title_pattern)
        except re.error as e:
            raise ValueError(f"complex_title_pattern is not a valid regular expression: {e}") from None

    def to_dict(self) -> Dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "ChunkingConfig":
        return cls(**d)


@dataclass
class Chunk:
    """A piece of one section of one document."""

    chunk_id: str
    document_id: str
    title: str
    section: str
    core_text: str  # the chunk's own text
    overlap_text: str  # trailing text of the previous chunk, prepended for context
    position: int  # ordinal of the chunk in its document
    parent_id: str  # the section id
    label: int  # section category id (index label)
    metadata: Dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return f"{self.overlap_text} {self.core_text}".strip() if self.overlap_text else self.core_text


@dataclass
class SectionPart:
    """A whole section (the parent of its chunks); ``source_section`` / ``source_offset`` place its text in
    the source's own coordinates (:func:`medretrieve.corpus.spans.source_layout`)."""

    section_id: str
    document_id: str
    title: str
    section: str
    text: str
    source_section: str = ""
    source_offset: Optional[int] = None


def _is_complex(section: str, text: str, cfg: ChunkingConfig) -> bool:
    if section and re.search(cfg.complex_title_pattern, section, re.I):
        return True
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) >= 4:
        items = sum(bool(re.match(r"\s*([-*\u2022]|\d+[.)]|[a-z][.)])\s", ln)) for ln in lines)
        return items / len(lines) >= cfg.list_fraction
    return False


def _units(text: str, limit: int) -> List[str]:
    """Paragraphs, then sentences, then word windows, each at most ``limit`` tokens."""
    out: List[str] = []
    for para in split_paragraphs(text):
        if count_tokens(para) <= limit:
            out.append(para)
            continue
        for sent in split_sentences(para):
            if count_tokens(sent) <= limit:
                out.append(sent)
                continue
            words, cur = sent.split(), []  # type: List[str], List[str]
            for w in words:
                if cur and count_tokens(" ".join(cur + [w])) > limit:
                    out.append(" ".join(cur))
                    cur = []
                cur.append(w)
            if cur:
                out.append(" ".join(cur))
    return out


def _tail(text: str, budget: int) -> str:
    """Trailing whole sentences of ``text`` within ``budget`` tokens (words if one is too long)."""
    if budget <= 0:
        return ""
    picked: List[str] = []
    used = 0
    for sent in reversed(split_sentences(text)):
        n = count_tokens(sent)
        if used + n > budget:
            if not picked:  # a single long sentence: its last words
                words = sent.split()
                tail: List[str] = []
                for w in reversed(words):
                    if count_tokens(" ".join([w] + tail)) > budget:
                        break
                    tail.insert(0, w)
                return " ".join(tail)
            break
        picked.insert(0, sent)
        used += n
    return " ".join(picked)


def chunk_section(text: str, section: str, cfg: ChunkingConfig) -> List[Tuple[str, str]]:
    """Cut one section into ``(overlap_text, core_text)`` pairs."""
    total = count_tokens(text)
    if total <= cfg.max_tokens:
        return [("", " ".join(text.split()))]
    ratio = 0.0
    if total >= cfg.overlap_min_tokens:
        ratio = cfg.complex_overlap if _is_complex(section, text, cfg) else cfg.overlap
    overlap_budget = int(round(ratio * cfg.max_tokens))
    core_budget = cfg.max_tokens - overlap_budget
    cores: List[str] = []
    cur: List[str] = []
    cur_n = 0
    for unit in _units(text, core_budget):
        n = count_tokens(unit)
        if cur and cur_n + n > core_budget:
            cores.append(" ".join(cur))
            cur, cur_n = [], 0
        cur.append(unit)
        cur_n += n
    if cur:
        cores.append(" ".join(cur))
    out = [("", cores[0])]
    for prev, core in zip(cores, cores[1:]):
        out.append((_tail(prev, overlap_budget), core))
    return out


def chunk_record(record: Record, cfg: Optional[ChunkingConfig] = None) -> Tuple[List[Chunk], List[SectionPart]]:
    """Chunks and parent sections of one record.

    Ids: section ``{doc}#s{i}``, chunk ``{doc}#s{i}.{j}``.
    """
    cfg = cfg or ChunkingConfig()
    chunks: List[Chunk] = []
    parts: List[SectionPart] = []
    pos = 0
    for si, (sec, (origin, offset)) in enumerate(zip(record.sections, source_layout(record.sections))):
        sid = f"{record.id}#s{si}"
        text = sec.text.strip()  # (source_layout's offset is already the stripped text's)
        parts.append(SectionPart(sid, record.id, record.title, sec.title, text, origin, offset))
        label = section_label(sec.title)
        for ci, (ov, core) in enumerate(chunk_section(sec.text, sec.title, cfg)):
            chunks.append(Chunk(f"{sid}.{ci}", record.id, record.title, sec.title, core, ov, pos, sid, label,
                                dict(record.metadata)))
            pos += 1
    return chunks, parts


def overlap_weights(chunk: Chunk, overlap_weight: float = 0.5) -> Tuple[float, float]:
    """Weights ``(core, overlap)`` summing to 1 for mixing the two embeddings.

    The chunk vector is ``normalize(w_core * e(core_text) + w_overlap * e(overlap_text))``:
    a token-weighted mean in which an overlap token counts ``overlap_weight``
    (0.5) of a core token, so the context carried over from the previous chunk
    informs the vector without dominating it. Without overlap: ``(1, 0)``.
    """
    if not chunk.overlap_text:
        return 1.0, 0.0
    a = float(count_tokens(chunk.core_text))
    b = float(count_tokens(chunk.overlap_text)) * overlap_weight
    if a + b == 0:
        return 1.0, 0.0
    return a / (a + b), b / (a + b)


def chunk_records(records: Sequence[Record], cfg: Optional[ChunkingConfig] = None
                  ) -> Tuple[List[Chunk], List[SectionPart]]:
    chunks: List[Chunk] = []
    parts: List[SectionPart] = []
    for r in records:
        c, p = chunk_record(r, cfg)
        chunks.extend(c)
        parts.extend(p)
    return chunks, parts
