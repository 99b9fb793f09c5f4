"""Corpus readers: JSONL, MedRAG/MedCorp snippet JSONL, BioASQ golden JSON, PubMed/MEDLINE XML.

Every reader yields :class:`Record` objects (one per source document). A
malformed record is reported with its file and line / record number; with
``errors="skip"`` it is skipped and listed in the :class:`ReadReport`, with
``errors="raise"`` a :class:`SourceError` stops the read.

Formats
-------
- ``jsonl``: one object per line, ``{"id", "title", "text"}`` plus optional
  ``"sections"`` (a list of ``{"title"|"name", "text"}`` or a dict
  ``{name: text}``); any other field is kept as ``metadata``.
- ``medrag``: MedRAG / MedCorp snippets ``{"id", "title", "content", "contents"}``
  (``contents`` is title + content and is dropped).
- ``bioasq``: a BioASQ golden file ``{"questions": [...]}``; its snippets and
  documents become the corpus: one record per document (id = PMID from the
  URL), its distinct snippets as sections (named by ``beginSection``).
- ``medline``: PubMed / MEDLINE citation XML (also ``.xml.gz``), read with
  ``iterparse`` so huge baseline files stream; namespaces are ignored.
  AbstractText elements with ``Label`` / ``NlmCategory`` become sections. Metadata (filters and facets):
  ``journal``, ``year`` (an integer) and ``publication_date`` (ISO, as precise as the record), ``language``,
  ``publication_type``, ``mesh`` and ``mesh_major`` (lists), ``retracted`` (a "Retracted Publication" type or a
  ``RetractionIn`` notice). PubMed E-utilities replies are read the same way.
"""
from __future__ import annotations

import gzip
import io
import json
import os
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

FORMATS = ("auto", "jsonl", "medrag", "bioasq", "medline")
PathLike = Union[str, "os.PathLike[str]"]
SourceLike = Union[PathLike, Sequence[Any], Iterable[Any]]


@dataclass
class Section:
    """One titled part of a document ("" title when the document has a single body).

    ``source_section`` / ``source_offset``: where the text sits in the source's own coordinates, as BioASQ
    counts them (``"abstract"`` or ``"title"``, and the character offset of this text in that section); a
    labelled part of a structured abstract is at its offset in the parts joined by one space. Empty / None
    when the source does not say (:func:`medretrieve.corpus.spans.source_layout` then assumes that layout).
    """

    title: str
    text: str
    source_section: str = ""
    source_offset: Optional[int] = None


@dataclass
class Record:
    """One source document."""

    id: str
    title: str
    sections: List[Section]
    metadata: Dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "\n\n".join(s.text for s in self.sections)


class SourceError(ValueError):
    """A malformed source record; ``where`` is ``file:line`` or ``file:record N``."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where
        self.message = message


@dataclass
class ReadReport:
    """What a read did: records yielded and every malformed record skipped."""

    records: int = 0
    skipped: List[Tuple[str, str]] = field(default_factory=list)  # (where, message)

    @property
    def n_skipped(self) -> int:
        return len(self.skipped)

    def summary(self) -> str:
        s = f"{self.records} records read, {self.n_skipped} malformed skipped"
        if self.skipped:
            s += "; first: " + "; ".join(f"{w}: {m}" for w, m in self.skipped[:3])
        return s


# --------------------------------------------------------------------------- helpers


def _open_binary(path: Path) -> IO[bytes]:
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")  # type: ignore[return-value]


def _str_id(value: Any, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise SourceError(where, f"'id' must be a string or integer, got {type(value).__name__}")
    s = str(value).strip()
    if not s:
        raise SourceError(where, "'id' is empty")
    return s


def _sections_from(value: Any, where: str) -> List[Section]:
    out: List[Section] = []
    if isinstance(value, Mapping):
        items = list(value.items())
        for name, text in items:
            if not isinstance(text, str):
                raise SourceError(where, f"section {name!r} text must be a string")
            out.append(Section(str(name), text))
    elif isinstance(value, list):
        for i, sec in enumerate(value):
            if not isinstance(sec, Mapping):
                raise SourceError(where, f"sections[{i}] must be an object with 'title'/'name' and 'text'")
            text = sec.get("text")
            if not isinstance(text, str):
                raise SourceError(where, f"sections[{i}] has no string 'text'")
            name = sec.get("title", sec.get("name", ""))
            origin, offset = sec.get("source_section") or "", sec.get("source_offset")
            if not isinstance(origin, str) or not (offset is None or (isinstance(offset, int)
                                                                      and not isinstance(offset, bool)
                                                                      and offset >= 0)):
                raise SourceError(where, f"sections[{i}]: source_section must be a string and source_offset "
                                         "an integer >= 0")
            out.append(Section("" if name is None else str(name), text, origin, offset))
    else:
        raise SourceError(where, "'sections' must be a list of {title, text} or a {name: text} object")
    return out


def record_from_dict(obj: Any, where: str = "record") -> Record:
    """Normalise one JSON object (generic or MedRAG form) into a :class:`Record`.

    Raises :class:`SourceError` naming ``where`` when the object is malformed.
    """
    if not isinstance(obj, Mapping):
        raise SourceError(where, f"expected a JSON object, got {type(obj).__name__}")
    if "id" not in obj:
        raise SourceError(where, "missing 'id'")
    rid = _str_id(obj["id"], where)
    title = obj.get("title", "")
    if title is None:
        title = ""
    if not isinstance(title, str):
        raise SourceError(where, "'title' must be a string")
    sections: List[Section] = []
    text = obj.get("text")
    if text is None and "content" in obj:  # MedRAG / MedCorp snippet
        text = obj["content"]
    if text is not None:
        if not isinstance(text, str):
            raise SourceError(where, "'text' must be a string")
        if text.strip():
            sections.append(Section("", text))
    if obj.get("sections") is not None:
        sections.extend(_sections_from(obj["sections"], where))
    sections = [s for s in sections if s.text.strip()]
    if not sections:
        raise SourceError(where, "no text: needs a non-empty 'text', 'content' or 'sections'")
    known = {"id", "title", "text", "content", "contents", "sections"}
    metadata = {k: v for k, v in obj.items() if k not in known}
    return Record(rid, title.strip(), sections, metadata)


def record_to_dict(record: Record) -> Dict[str, Any]:
    """A :class:`Record` as the JSON object :func:`record_from_dict` (and the ``jsonl`` format) reads back."""
    sections = []
    for s in record.sections:
        sec: Dict[str, Any] = {"title": s.title, "text": s.text}
        if s.source_section:
            sec["source_section"] = s.source_section
        if s.source_offset is not None:
            sec["source_offset"] = s.source_offset
        sections.append(sec)
    return {**record.metadata, "id": record.id, "title": record.title, "sections": sections}


class _Reader:
    """Shared error policy for the readers below."""

    def __init__(self, errors: str, report: ReadReport) -> None:
        if errors not in ("skip", "raise"):
            raise ValueError(f"errors must be 'skip' or 'raise', got {errors!r}")
        self.errors = errors
        self.report = report

    def bad(self, err: SourceError) -> None:
        if self.errors == "raise":
            raise err
        self.report.skipped.append((err.where, err.message))


def _decoded(data: bytes, where: str, line_of_error: bool = False) -> str:
    """``data`` as UTF-8 text; SourceError naming ``where`` (and the line, for a whole file) and the byte that is
    not UTF-8 (binary input, another encoding)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        at = f"{where}:{line}" if line_of_error else where
        raise SourceError(at, f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); binary "
                          "input or another encoding") from None


def _read_jsonl(path: Path, rd: _Reader, medrag: bool) -> Iterator[Record]:
    with _open_binary(path) as fh:
        for lineno, raw in enumerate(fh, 1):
            where = f"{path}:{lineno}"
            try:
                line = _decoded(raw, where)
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise SourceError(where, f"invalid JSON ({exc.msg} at column {exc.colno})") from None
                except (ValueError, RecursionError) as exc:  # a number too long, nesting too deep
                    raise SourceError(where, f"invalid JSON ({str(exc)[:100]})") from None
                if medrag and isinstance(obj, Mapping) and "content" not in obj:
                    raise SourceError(where, "MedRAG record without 'content'")
                rec = record_from_dict(obj, where)
            except SourceError as err:
                rd.bad(err)
                continue
            yield rec


def pmid_from_url(url: str) -> str:
    """The document id of a BioASQ document reference: the PubMed id ending a URL
    (``http://www.ncbi.nlm.nih.gov/pubmed/28293123`` -> ``"28293123"``), or a bare id as it is (``"demo-002"``,
    for golden files written for another corpus). ValueError for a URL that ends in no PubMed id."""
    text = str(url or "").strip()
    segment = text.rstrip("/").rsplit("/", 1)[-1].strip()
    if not segment or ("/" in text and not segment.isdigit()):
        raise ValueError(f"no PubMed id at the end of {url!r}")
    return segment


def _read_bioasq(path: Path, rd: _Reader) -> Iterator[Record]:
    with _open_binary(path) as fh:
        raw = fh.read()
    try:
        data = json.loads(_decoded(raw, str(path), line_of_error=True))
    except SourceError as err:
        rd.bad(err)
        return
    except json.JSONDecodeError as exc:
        rd.bad(SourceError(f"{path}:{exc.lineno}", f"invalid JSON ({exc.msg})"))
        return
    except (ValueError, RecursionError) as exc:
        rd.bad(SourceError(str(path), f"invalid JSON ({str(exc)[:100]})"))
        return
    questions = data.get("questions") if isinstance(data, Mapping) else None
    if not isinstance(questions, list):
        rd.bad(SourceError(str(path), "not a BioASQ file: no 'questions' list"))
        return
    # document id -> ordered distinct (section, normalised text) -> (text as given, offset). Documents listed
    # without any snippet have no text here and are left out. A snippet with a gold offset keeps its text as the
    # file gives it: the offset counts its characters (a leading space, a no-break space), so spans found in it
    # are the article's.
    docs: Dict[str, Dict[Tuple[str, str], Tuple[str, Optional[int]]]] = {}
    for qi, q in enumerate(questions):
        where = f"{path}:question {qi}"
        if not isinstance(q, Mapping):
            rd.bad(SourceError(where, "question is not an object"))
            continue
        for si, snip in enumerate(q.get("snippets") or []):
            w = f"{where} snippet {si}"
            try:
                if not isinstance(snip, Mapping) or not isinstance(snip.get("text"), str):
                    raise SourceError(w, "snippet without string 'text'")
                try:
                    doc = pmid_from_url(str(snip.get("document", "")))
                except ValueError as exc:
                    raise SourceError(w, str(exc)) from None
            except SourceError as err:
                rd.bad(err)
                continue
            text = " ".join(snip["text"].split())
            if not text:
                continue
            section = str(snip.get("beginSection") or "")
            offset = _snippet_offset(snip, section)
            docs.setdefault(doc, {}).setdefault((section, text), (text if offset is None else snip["text"], offset))
    for doc, parts in docs.items():
        title = next((t for (s, t) in parts if s == "title"), "")
        # every distinct snippet is a section (title snippets too: they are gold snippets), at its gold offset
        sections = [Section(s, raw, s, off) for (s, _), (raw, off) in parts.items()]
        yield Record(doc, title, sections, {"source": "bioasq"})


def _snippet_offset(snip: Mapping[str, Any], section: str) -> Optional[int]:
    """A gold snippet's offset in its section, when it has a usable one (one section, 0 <= begin)."""
    begin = snip.get("offsetInBeginSection")
    if (isinstance(begin, int) and not isinstance(begin, bool) and begin >= 0 and section
            and snip.get("endSection", section) == section):
        return begin
    return None


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1] if "}" in tag else tag


def _child(elem: ET.Element, name: str) -> Optional[ET.Element]:
    for c in elem:
        if _local(c.tag) == name:
            return c
    return None


def _text_of(elem: Optional[ET.Element]) -> str:
    return " ".join("".join(elem.itertext()).split()) if elem is not None else ""


def _medline_record(cit: ET.Element, where: str) -> Record:
    pmid = _text_of(_child(cit, "PMID"))
    if not pmid:
        raise SourceError(where, "MedlineCitation without PMID")
    article = _child(cit, "Article")
    if article is None:
        raise SourceError(where, f"PMID {pmid}: no Article element")
    title = _text_of(_child(article, "ArticleTitle"))
    sections: List[Section] = []
    abstract = _child(article, "Abstract")
    offset = 0  # in the abstract's parts joined by one space (module docstring)
    if abstract is not None:
        for at in abstract:
            if _local(at.tag) != "AbstractText":
                continue
            text = _text_of(at)
            if not text:
                continue
            label = at.get("Label") or (at.get("NlmCategory") or "")
            label = label.strip().lower() if label.upper() != "UNASSIGNED" else ""
            sections.append(Section(label or "abstract", text, "abstract", offset))
            offset += len(text) + 1
    if not sections and title:
        sections.append(Section("title", title, "title", 0))
    if not sections:
        raise SourceError(where, f"PMID {pmid}: no title and no abstract")
    meta: Dict[str, Any] = {"source": "medline", **_medline_metadata(cit, article)}
    return Record(pmid, title, sections, meta)


_MONTHS = {m: i for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov",
                                        "dec"), 1)}
RETRACTED_TYPE = "Retracted Publication"  # MEDLINE's publication type of a retracted article


def _pub_date(pub: Optional[ET.Element]) -> Tuple[Optional[int], Optional[str]]:
    """(year, ISO date as precise as the record: YYYY, YYYY-MM or YYYY-MM-DD) of a PubDate (or ArticleDate);
    a MedlineDate ("1998 Dec-1999 Jan") gives its first year."""
    if pub is None:
        return None, None
    year = _text_of(_child(pub, "Year"))
    if not year:
        m = re.match(r"\s*(\d{4})", _text_of(_child(pub, "MedlineDate")))
        return (int(m.group(1)), m.group(1)) if m else (None, None)
    if not re.fullmatch(r"\d{4}", year):
        return None, None
    raw = _text_of(_child(pub, "Month")).lower()
    month = _MONTHS.get(raw[:3]) or (int(raw) if raw.isdigit() and 1 <= int(raw) <= 12 else None)
    day = _text_of(_child(pub, "Day"))
    date = year
    if month:
        date += f"-{month:02d}"
        if day.isdigit() and 1 <= int(day) <= 31:
            date += f"-{int(day):02d}"
    return int(year), date


def _medline_metadata(cit: ET.Element, article: ET.Element) -> Dict[str, Any]:
    """What a MedlineCitation says about its article, for filters and facets: journal, year and publication_date
    (the journal issue's date), language (codes), publication_type, mesh (every descriptor) and mesh_major (those
    marked major, on the descriptor or a qualifier), retracted (a "Retracted Publication" type or a RetractionIn
    notice)."""
    meta: Dict[str, Any] = {}
    journal = _child(article, "Journal")
    if journal is not None:
        jt = _text_of(_child(journal, "Title"))
        if jt:
            meta["journal"] = jt
        issue = _child(journal, "JournalIssue")
        year, date = _pub_date(_child(issue, "PubDate") if issue is not None else None)
        if year is not None:
            meta["year"], meta["publication_date"] = year, date
    languages = [_text_of(e) for e in article if _local(e.tag) == "Language" and _text_of(e)]
    if languages:
        meta["language"] = languages
    types_el = _child(article, "PublicationTypeList")
    types = [_text_of(e) for e in types_el if _text_of(e)] if types_el is not None else []
    if types:
        meta["publication_type"] = types
    mesh, major = [], []
    headings = _child(cit, "MeshHeadingList")
    for heading in (headings if headings is not None else ()):
        name_el = _child(heading, "DescriptorName")
        name = _text_of(name_el)
        if not name:
            continue
        mesh.append(name)
        qualifiers = [q for q in heading if _local(q.tag) == "QualifierName"]
        if name_el is not None and (name_el.get("MajorTopicYN") == "Y" or
                                    any(q.get("MajorTopicYN") == "Y" for q in qualifiers)):
            major.append(name)
    if mesh:
        meta["mesh"], meta["mesh_major"] = mesh, major
    corrections = _child(cit, "CommentsCorrectionsList")
    notices = [c for c in (corrections if corrections is not None else ()) if c.get("RefType") == "RetractionIn"]
    meta["retracted"] = RETRACTED_TYPE in types or bool(notices)
    return meta


def _iter_medline(fh: IO[bytes], where: str, rd: _Reader) -> Iterator[Record]:
    n = 0
    try:
        for _event, elem in ET.iterparse(fh, events=("end",)):
            if _local(elem.tag) != "MedlineCitation":
                continue
            n += 1
            try:
                rec = _medline_record(elem, f"{where}:record {n}")
            except SourceError as err:
                rd.bad(err)
                rec = None
            elem.clear()  # keep memory flat on huge files
            if rec is not None:
                yield rec
    except ET.ParseError as exc:
        line, col = exc.position
        rd.bad(SourceError(f"{where}:{line}", f"XML parse error at column {col}: {exc}"))


def _read_medline(path: Path, rd: _Reader) -> Iterator[Record]:
    with _open_binary(path) as fh:
        yield from _iter_medline(fh, str(path), rd)


def parse_medline(data: bytes, where: str = "MEDLINE XML", errors: str = "skip",
                  report: Optional[ReadReport] = None) -> List[Record]:
    """The records of PubMed / MEDLINE XML held in memory (e.g. an E-utilities efetch reply).

    ``errors`` and ``report`` as in :func:`read_records`; malformed XML is a malformed record named by
    ``where`` and its line.
    """
    report = report if report is not None else ReadReport()
    records = list(_iter_medline(io.BytesIO(data), where, _Reader(errors, report)))
    report.records += len(records)
    return records


def detect_format(path: PathLike) -> str:
    """Guess the format of a file from its name and first bytes."""
    p = Path(path)
    name = p.name.lower().removesuffix(".gz")
    if name.endswith(".xml"):
        return "medline"
    with _open_binary(p) as fh:
        head = fh.read(4096).decode("utf-8", errors="replace")  # for the guess only: each reader decodes strictly
    stripped = head.lstrip()
    if stripped.startswith("<"):
        return "medline"
    if name.endswith(".jsonl") or name.endswith(".ndjson"):
        first = stripped.splitlines()[0] if stripped else ""
        return "medrag" if '"content"' in first and '"text"' not in first else "jsonl"
    if stripped.startswith("{") and '"questions"' in head:
        return "bioasq"
    if name.endswith(".json") and stripped.startswith("{"):
        # a single-line JSON object per line is still JSONL
        return "jsonl"
    if stripped.startswith("{"):
        return "jsonl"
    raise ValueError(f"cannot tell the format of {p}; pass format=NAME (CLI: --format NAME), NAME one of "
                     f"{', '.join(FORMATS[1:])}")


def _read_path(path: Path, fmt: str, rd: _Reader) -> Iterator[Record]:
    if not path.exists():
        raise FileNotFoundError(f"source {path} does not exist")
    if path.is_dir():
        for child in sorted(path.iterdir()):
            if child.is_file() and not child.name.startswith("."):
                yield from _read_path(child, fmt, rd)
        return
    f = detect_format(path) if fmt == "auto" else fmt
    if f == "jsonl":
        yield from _read_jsonl(path, rd, medrag=False)
    elif f == "medrag":
        yield from _read_jsonl(path, rd, medrag=True)
    elif f == "bioasq":
        yield from _read_bioasq(path, rd)
    elif f == "medline":
        yield from _read_medline(path, rd)
    else:  # pragma: no cover - checked in read_records
        raise ValueError(f"unknown format {f!r}")


def read_records(
    source: SourceLike,
    format: str = "auto",
    errors: str = "skip",
    report: Optional[ReadReport] = None,
) -> Iterator[Record]:
    """Yield the :class:`Record` objects of ``source``.

    ``source`` is a file path, a directory (every file in it), a list of
    paths, or an iterable of dicts / :class:`Record` objects. ``format`` is
    ``auto`` (by extension and content) or one of ``jsonl | medrag | bioasq |
    medline``. Malformed records are skipped and listed in ``report`` (pass a
    :class:`ReadReport` to receive them) or, with ``errors="raise"``, raise
    :class:`SourceError`. Duplicate ids within one read are malformed too.
    """
    if format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {format!r}")
    report = report if report is not None else ReadReport()
    rd = _Reader(errors, report)
    seen: set = set()
    # BioASQ files share documents (each question quotes its own snippets of them), so a document read from
    # several files is one record holding every distinct snippet; they are yielded after the other records.
    bioasq: Dict[str, Record] = {}
    for rec in _iter_source(source, format, rd):
        if rec.metadata.get("source") == "bioasq" and rec.id not in seen:
            _merge_bioasq(bioasq, rec)
            continue
        if rec.id in seen or rec.id in bioasq:
            rd.bad(SourceError(f"record {rec.id}", "duplicate id (first one kept)"))
            continue
        seen.add(rec.id)
        report.records += 1
        yield rec
    for rec in bioasq.values():
        report.records += 1
        yield rec


def _merge_bioasq(docs: Dict[str, Record], rec: Record) -> None:
    prev = docs.get(rec.id)
    if prev is None:
        docs[rec.id] = rec
        return
    have = {(s.title, s.text) for s in prev.sections}
    prev.sections.extend(s for s in rec.sections if (s.title, s.text) not in have)
    prev.title = prev.title or rec.title


def _iter_source(source: SourceLike, fmt: str, rd: _Reader) -> Iterator[Record]:
    if isinstance(source, (str, os.PathLike)):
        yield from _read_path(Path(source), fmt, rd)
        return
    if isinstance(source, (bytes, Mapping)):
        raise TypeError("source must be a path, a list of paths or an iterable of records, not "
                        f"{type(source).__name__}")
    try:
        items = iter(source)
    except TypeError:
        raise TypeError(f"source must be a path or an iterable, not {type(source).__name__}") from None
    for i, item in enumerate(items):
        if isinstance(item, Record):
            yield item
        elif isinstance(item, (str, os.PathLike)):
            yield from _read_path(Path(item), fmt, rd)
        else:
            try:
                yield record_from_dict(item, f"record {i}")
            except SourceError as err:
                rd.bad(err)
