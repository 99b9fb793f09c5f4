"""The loader of BioASQ files: golden files (every field checked) and test batches as participants receive them.

:func:`load_bioasq` -> :class:`BioASQQuestion` (all four types, gold PMIDs, snippets with offsets and sections,
exact and ideal answers); ``golden=False`` reads a test batch (``id``, ``body``, ``type``, and in Phase B the
given documents and snippets). Malformed input raises ``ValueError`` naming the file and the record (index or id),
never a bare ``KeyError`` deep inside the evaluation.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional, Union

from ..._files import read_json
from ...corpus.sources import pmid_from_url
from ...records import BIOASQ_TYPES

__all__ = ["PathLike", "Snippet", "BioASQQuestion", "as_paths", "load_bioasq"]

PathLike = Union[str, Path]


@dataclass(frozen=True)
class Snippet:
    """A gold BioASQ snippet. Offsets are character offsets inside ``begin_section``."""

    document_id: str  # PMID taken from the document URL
    text: str
    begin_section: str = ""  # "abstract" or "title" in BioASQ
    end_section: str = ""
    offset_begin: Optional[int] = None
    offset_end: Optional[int] = None
    document_url: str = ""


@dataclass
class BioASQQuestion:
    """One BioASQ question with its gold documents, snippets and answers.

    ``exact_answer`` is normalised by type: ``"yes"``/``"no"`` for yesno; a list
    of synonym lists for factoid (usually one entry) and list (one entry per
    item); ``None`` for summary.
    """

    id: str
    body: str
    type: str
    documents: list[str]  # gold PMIDs in the file's order
    snippets: list[Snippet]
    exact_answer: Union[str, list[list[str]], None]
    ideal_answer: list[str]
    document_urls: list[str] = field(default_factory=list)
    source: str = ""  # file it came from


def as_paths(paths: Union[PathLike, Iterable[PathLike]]) -> list[Path]:
    """One path or several as a list of ``Path`` (none given: a ValueError)."""
    if isinstance(paths, (str, Path)):
        return [Path(paths)]
    out = [Path(p) for p in paths]
    if not out:
        raise ValueError("no input files given")
    return out


def _text_list(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise ValueError(f"{what} must be a string or a list of strings, got {type(value).__name__}")


def _synonym_lists(value: Any, qtype: str, what: str) -> list[list[str]]:
    """Normalise factoid/list exact answers to a list of synonym lists.

    Gold files use ``[["a", "a2"], ["b"]]``; older ones a flat ``["a", "a2"]``,
    which is one answer with synonyms for factoid and one item per entry for list.
    """
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise ValueError(f"{what} must be a non-empty list")
    if all(isinstance(v, str) for v in value):
        return [list(value)] if qtype == "factoid" else [[v] for v in value]
    out = []
    for entry in value:
        if isinstance(entry, str):
            out.append([entry])
        elif isinstance(entry, list) and entry and all(isinstance(s, str) for s in entry):
            out.append(list(entry))
        else:
            raise ValueError(f"{what} entries must be strings or non-empty lists of strings")
    return out


def _snippet(raw: Any, what: str) -> Snippet:
    if not isinstance(raw, dict):
        raise ValueError(f"{what} is not an object")
    if "text" not in raw or "document" not in raw:
        raise ValueError(f"{what} lacks 'text' or 'document'")

    def offset(key: str) -> Optional[int]:
        v = raw.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"{what}: {key} must be an integer, got {v!r}")
        return v

    begin, end = offset("offsetInBeginSection"), offset("offsetInEndSection")
    if (begin is not None and begin < 0) or (end is not None and end < 0):
        # The 7b golden files hold a few title snippets at offset -1: the span
        # is unusable, so the snippet is matched by its text instead.
        begin = end = None
    if begin is not None and end is not None and end < begin:
        raise ValueError(f"{what}: offsetInEndSection {end} < offsetInBeginSection {begin}")
    return Snippet(
        document_id=pmid_from_url(raw["document"]),
        text=str(raw["text"]),
        begin_section=str(raw.get("beginSection", "") or ""),
        end_section=str(raw.get("endSection", "") or ""),
        offset_begin=begin,
        offset_end=end,
        document_url=str(raw["document"]),
    )


def _bioasq_question(raw: Any, path: Path, index: int, golden: bool = True) -> BioASQQuestion:
    qid = raw.get("id") if isinstance(raw, dict) else None
    what = f"{path}: question #{index}" + (f" (id {qid})" if qid else "")
    if not isinstance(raw, dict):
        raise ValueError(f"{what} is not an object")
    for key in ("id", "body", "type"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise ValueError(f"{what} lacks a '{key}' string")
    qtype = raw["type"].strip().lower()
    if qtype not in BIOASQ_TYPES:
        raise ValueError(f"{what}: type {raw['type']!r} is not one of {', '.join(BIOASQ_TYPES)}")
    urls = raw.get("documents", [])
    if not isinstance(urls, list):
        raise ValueError(f"{what}: 'documents' must be a list of URLs")
    snippets_raw = raw.get("snippets", [])
    if not isinstance(snippets_raw, list):
        raise ValueError(f"{what}: 'snippets' must be a list")
    snippets = [_snippet(s, f"{what} snippet #{j}") for j, s in enumerate(snippets_raw)]

    exact: Union[str, list[list[str]], None] = None
    if not golden and raw.get("exact_answer") is None:
        pass  # a test batch: the answer is what the participant writes
    elif qtype == "yesno":
        value = raw.get("exact_answer")
        if isinstance(value, list) and len(value) == 1:
            value = value[0]
        if not isinstance(value, str) or value.strip().lower() not in ("yes", "no"):
            raise ValueError(f"{what}: yesno exact_answer must be 'yes' or 'no', got {value!r}"
                             + (" (a test batch without answers: medretrieve bioasq run, or "
                                "load_bioasq(..., golden=False))" if value is None else ""))
        exact = value.strip().lower()
    elif qtype in ("factoid", "list"):
        if "exact_answer" not in raw:
            raise ValueError(f"{what}: {qtype} question lacks 'exact_answer' (a test batch without answers: "
                             "medretrieve bioasq run, or load_bioasq(..., golden=False))")
        exact = _synonym_lists(raw["exact_answer"], qtype, f"{what}: exact_answer")

    documents: list[str] = []
    for u in urls:
        pmid = pmid_from_url(u)
        if pmid not in documents:  # keep the gold order, drop repeats
            documents.append(pmid)
    return BioASQQuestion(
        id=raw["id"],
        body=raw["body"].strip(),
        type=qtype,
        documents=documents,
        snippets=snippets,
        exact_answer=exact,
        ideal_answer=_text_list(raw.get("ideal_answer"), f"{what}: ideal_answer"),
        document_urls=[str(u) for u in urls],
        source=str(path),
    )


def load_bioasq(paths: Union[PathLike, Iterable[PathLike]], golden: bool = True) -> list[BioASQQuestion]:
    """Read one or more BioASQ golden JSON files (``{"questions": [...]}``).

    Questions are returned in file order; an id seen in an earlier file is
    skipped (the BioASQ batches do not overlap, re-releases do); an id twice in
    one file is a ValueError (one of the two questions would be lost).

    ``golden=False``: test batches as BioASQ hands them to participants, where a question may hold only ``id``,
    ``body`` and ``type`` (Phase B batches add the documents and snippets); a missing exact answer is None. What
    a question does hold is still checked.
    """
    out: list[BioASQQuestion] = []
    seen: set[str] = set()
    for path in as_paths(paths):
        data = read_json(path)
        if not isinstance(data, dict) or not isinstance(data.get("questions"), list):
            raise ValueError(f"{path}: expected an object with a 'questions' list (BioASQ golden format)")
        in_file: dict[str, int] = {}
        for i, raw in enumerate(data["questions"]):
            q = _bioasq_question(raw, path, i, golden)
            if q.id in in_file:
                raise ValueError(f"{path}: question #{i} repeats the id {q.id!r} of question #{in_file[q.id]}")
            in_file[q.id] = i
            if q.id not in seen:
                seen.add(q.id)
                out.append(q)
    return out
