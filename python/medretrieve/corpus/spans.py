"""Where a chunk's text sits in its source document, in BioASQ's coordinates.

A BioASQ snippet names its document, its section (``"abstract"`` or ``"title"``) and the character span
``[offsetInBeginSection, offsetInEndSection)`` of its text in that section (the end is exclusive:
``end - begin == len(text)`` in every golden file). A chunk keeps its text whitespace-normalised and points to
its parent section (:class:`~medretrieve.corpus.chunking.SectionPart`), which keeps the section's text and
where that text sits in the source (``source_section``, ``source_offset``). :func:`chunk_span` finds the
chunk's text in its parent section (whitespace-tolerant, chunks of one section in order) and adds the
section's offset.

Source layout (:func:`source_layout`): only readers that know it say it (MEDLINE: labelled parts of a
structured abstract at their offsets in the parts joined by one space, the title as ``"title"``; BioASQ: a gold
snippet in its section, at its gold offset when the file gives a usable one; a JSONL section's own
``source_section`` / ``source_offset``). A document whose source does not say (JSONL or MedRAG text, plain text)
has no layout, and its chunks no span: calling its sections "abstract" would tell a reader, and a BioASQ
submission, something the source never said.

Collections built before that rule stored the guess (a section titled "title" as the title, the others as the
abstract at their offsets in the sections joined by one space). :func:`chunk_span` still opens them and does not
show the guess: a stored layout equal to it, on a document that is neither MEDLINE's nor BioASQ's (its
``source`` metadata), counts as no layout. Rebuilding drops it from the files.
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

_WORD = re.compile(r"\S+")
# the ``source`` metadata of the readers that know a document's layout (corpus.sources: MEDLINE XML, BioASQ files)
LAYOUT_SOURCES = frozenset({"medline", "bioasq"})


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
    """``(source_section, source_offset)`` of each section's stripped text, as its source gave them;
    ``("", None)`` where it gave none (module docstring)."""
    out: List[Tuple[str, Optional[int]]] = []
    for s in sections:
        off = getattr(s, "source_offset", None)
        if off is not None:  # the offset is of the raw text; stripping moves its start
            off += len(s.text) - len(s.text.lstrip())
        out.append((getattr(s, "source_section", "") or "", off))
    return out


def guessed_layout(sections: Sequence[Any]) -> List[Tuple[str, Optional[int]]]:
    """The layout builds before the no-guess rule stored for a document whose source gave none: a section
    titled "title" as the title, the others as the abstract, joined by one space in order. ``sections``: the
    stored parts (:class:`~medretrieve.corpus.chunking.SectionPart`, text already stripped)."""
    out: List[Tuple[str, Optional[int]]] = []
    offset = 0
    for s in sections:
        if s.section.strip().lower() == "title":
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
    """The :class:`Span` of a collection's chunk ``row``; None when its parent section is unknown or its
    source did not say where the section sits (module docstring: a stored guess counts as not said)."""
    r = collection.rows[row]
    part = collection.parent(r.parent_id)
    section = getattr(part, "source_section", "") if part is not None else ""
    if not section:
        return None
    document = collection.document_rows(r.document_id)
    if _stored_guess(collection, r, document):
        return None
    siblings = [i for i in document if collection.rows[i].parent_id == r.parent_id]
    if row not in siblings:
        siblings = [row]
    spans = locate([collection.rows[i].text for i in siblings], part.text)
    local = spans[siblings.index(row)] or (0, len(part.text))  # not found: the whole section
    base = getattr(part, "source_offset", None)
    shift = base if base is not None else 0
    return Span(section, shift + local[0], shift + local[1], base is not None, part.text[local[0]:local[1]])


def _stored_guess(collection: Any, row: Any, document: Sequence[int]) -> bool:
    """Whether the stored layout of ``row``'s document is an older build's guess (:func:`guessed_layout`) rather
    than its source's: the document is not from a reader that knows layouts and its parts hold the guess."""
    if (row.metadata or {}).get("source") in LAYOUT_SOURCES:
        return False
    parts = []
    for parent_id in dict.fromkeys(collection.rows[i].parent_id for i in document):  # the parts, in order
        part = collection.parent(parent_id)
        if part is not None:
            parts.append(part)
    stored = [(p.source_section, p.source_offset) for p in parts]
    return bool(parts) and stored == guessed_layout(parts)
