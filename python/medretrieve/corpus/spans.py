"""Where a chunk's text sits in its source document, in BioASQ's coordinates.

A BioASQ snippet names its document, its section (``"abstract"`` or ``"title"``) and the character span
``[offsetInBeginSection, offsetInEndSection)`` of its text in that section (the end is exclusive:
``end - begin == len(text)`` in every golden file). A chunk keeps its text whitespace-normalised and points to
its parent section (:class:`~medretrieve.corpus.chunking.SectionPart`), which keeps the section's text and
where that text sits in the source (``source_section``, ``source_offset``). :func:`chunk_span` finds the
chunk's text in its parent section (whitespace-tolerant, chunks of one section in order) and adds the
section's offset.

Source layout (:func:`source_layout`): readers that know it say it (MEDLINE: labelled parts of a structured
abstract at their offsets in the parts joined by one space, the title as ``"title"``; BioASQ: a gold
snippet at its gold offset). Otherwise a section titled "title" is the title and the others are the abstract,
joined by one space in record order.
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class Span:
    """A text's place in its source: section name and the character span [begin, end) in that section.
    ``in_source``: False when the source gave no offset for the section (the span is then within the
    section's own text). ``text``: the section's own characters at the span, which BioASQ checks a snippet's
    text against; they differ from the chunk's text where the section has other whitespace (a non-breaking
    space, a line break, two spaces)."""

    section: str
    begin: int
    end: int
    in_source: bool = True
    text: Optional[str] = None  # the section's characters at [begin, end): a chunk's text is whitespace-normalised

    def to_bioasq(self) -> Dict[str, Any]:
        """The four BioASQ snippet fields."""
        return {"beginSection": self.section, "endSection": self.section,
                "offsetInBeginSection": self.begin, "offsetInEndSection": self.end}


def source_layout(sections: Sequence[Any]) -> List[Tuple[str, Optional[int]]]:
    """``(source_section, source_offset)`` of each section's stripped text (module docstring)."""
    if any(getattr(s, "source_section", "") for s in sections):
        out: List[Tuple[str, Optional[int]]] = []
        for s in sections:
            off = s.source_offset
            if off is not None:  # the offset is of the raw text; stripping moves its start
                off += len(s.text) - len(s.text.lstrip())
            out.append((s.source_section, off))
        return out
    out, offset = [], 0
    for s in sections:
        if s.title.strip().lower() == "title":
            out.append(("title", 0))
        else:
            out.append(("abstract", offset))
            offset += len(s.text.strip()) + 1
    return out


def locate(texts: Sequence[str], section_text: str) -> List[Optional[Tuple[int, int]]]:
    """Character spans ``[begin, end)`` in ``section_text`` of whitespace-normalised ``texts`` taken in order
    (each searched from the end of the previous one, then anywhere); None for a text not found."""
    words = [(m.start(), m.end()) for m in _WORD.finditer(section_text)]
    normal = " ".join(section_text[a:b] for a, b in words)
    starts: List[int] = []  # normalised index of each word's first character
    pos = 0
    for a, b in words:
        starts.append(pos)
        pos += b - a + 1

    def original(i: int, end: bool) -> int:
        # the word holding normalised character i (for an end: the last character, i - 1)
        j = max(bisect.bisect_right(starts, i) - 1, 0)
        return words[j][0] + (i - starts[j]) + (1 if end else 0)

    out: List[Optional[Tuple[int, int]]] = []
    cursor = 0
    for text in texts:
        needle = " ".join(text.split())
        at = normal.find(needle, cursor) if needle else -1
        if at < 0 and needle:
            at = normal.find(needle)
        if at < 0:
            out.append(None)
            continue
        out.append((original(at, False), original(at + len(needle) - 1, True)))
        cursor = at + len(needle)
    return out


def chunk_span(collection: Any, row: int) -> Optional[Span]:
    """The :class:`Span` of a collection's chunk ``row`` (None when its parent section is unknown)."""
    r = collection.rows[row]
    part = collection.parent(r.parent_id)
    if part is None:
        return None
    siblings = [i for i in collection.document_rows(r.document_id) if collection.rows[i].parent_id == r.parent_id]
    if row not in siblings:
        siblings = [row]
    spans = locate([collection.rows[i].text for i in siblings], part.text)
    local = spans[siblings.index(row)] or (0, len(part.text))  # not found: the whole section
    base = getattr(part, "source_offset", None)
    section = getattr(part, "source_section", "") or "abstract"
    shift = base if base is not None else 0
    return Span(section, shift + local[0], shift + local[1], base is not None, part.text[local[0]:local[1]])
