"""Loaders for the public evaluation sets: BioASQ golden JSON and the MIRAGE question sets.

Every loader reads the files in place and returns plain dataclasses. Malformed
input raises ``ValueError`` naming the file and the record (index or id), never
a bare ``KeyError`` deep inside the evaluation.

- :func:`load_bioasq` -> :class:`BioASQQuestion` (all four types, gold PMIDs,
  snippets with offsets and sections, exact and ideal answers); ``golden=False`` reads a test batch as
  participants receive it (``id``, ``body``, ``type``, and in Phase B the given documents and snippets).
- :func:`load_bioasq_yesno`, :func:`load_mmlu_med`, :func:`load_medqa`,
  :func:`load_pubmedqa` -> :class:`MCQuestion` (the multiple-choice form MIRAGE
  and MedRGB use: lettered options and a gold letter).
- :func:`load_dataset` parses the CLI's ``NAME:PATH`` specs.
"""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence, Union

from .._files import read_json
from ..corpus.sources import pmid_from_url
from ..records import BIOASQ_TYPES

PathLike = Union[str, Path]

#: The six MMLU medical subsets MIRAGE / MedRGB call MMLU-Med (1089 questions).
MMLU_MED_SUBJECTS = (
    "anatomy",
    "clinical_knowledge",
    "college_biology",
    "college_medicine",
    "medical_genetics",
    "professional_medicine",
)
YESNO_OPTIONS = {"A": "yes", "B": "no"}
PUBMEDQA_OPTIONS = {"A": "yes", "B": "no", "C": "maybe"}


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


@dataclass
class MCQuestion:
    """A multiple-choice question (MMLU-Med, MedQA-US, PubMedQA*, BioASQ-Y/N)."""

    id: str
    question: str
    options: dict[str, str]  # letter -> option text, in letter order
    answer: str  # gold letter
    dataset: str  # "mmlu_med" | "medqa" | "pubmedqa" | "bioasq"
    subject: str = ""  # MMLU subset, MedQA meta_info, ...
    contexts: list[str] = field(default_factory=list)  # PubMedQA abstract parts
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def answer_text(self) -> str:
        return self.options[self.answer]


def _as_paths(paths: Union[PathLike, Iterable[PathLike]]) -> list[Path]:
    if isinstance(paths, (str, Path)):
        return [Path(paths)]
    out = [Path(p) for p in paths]
    if not out:
        raise ValueError("no input files given")
    return out


# --------------------------------------------------------------------------- BioASQ


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
    for path in _as_paths(paths):
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


def load_bioasq_yesno(paths: Union[PathLike, Iterable[PathLike]]) -> list[MCQuestion]:
    """BioASQ-Y/N as in MIRAGE: the yes/no questions, options A=yes, B=no."""
    out = []
    for q in load_bioasq(paths):
        if q.type != "yesno":
            continue
        out.append(
            MCQuestion(
                id=q.id,
                question=q.body,
                options=dict(YESNO_OPTIONS),
                answer="A" if q.exact_answer == "yes" else "B",
                dataset="bioasq",
                metadata={"documents": q.documents, "source": q.source},
            )
        )
    return out


# --------------------------------------------------------------------------- MIRAGE sets


def _check_options(options: Any, what: str) -> dict[str, str]:
    if not isinstance(options, dict) or len(options) < 2:
        raise ValueError(f"{what}: 'options' must be an object with at least two lettered options")
    out = {}
    for letter in sorted(options):
        text = options[letter]
        if not (isinstance(letter, str) and len(letter) == 1 and letter.isalpha() and letter.isupper()):
            raise ValueError(f"{what}: option key {letter!r} is not a capital letter")
        if not isinstance(text, str):
            raise ValueError(f"{what}: option {letter} is not a string")
        out[letter] = text
    return out


def load_mmlu_med(directory: PathLike, subjects: Sequence[str] = MMLU_MED_SUBJECTS) -> list[MCQuestion]:
    """The MMLU medical subsets: ``<subject>_test.csv`` rows ``question, A, B, C, D, answer``.

    A header row (``question,A,B,C,D,answer``) is accepted and skipped. Ids are
    ``<subject>-<row number from 0>``.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise ValueError(f"{directory}: not a directory (expected the MMLU-Med CSV folder)")
    out: list[MCQuestion] = []
    for subject in subjects:
        path = directory / f"{subject}_test.csv"
        if not path.is_file():
            raise ValueError(f"{path}: missing (MMLU-Med needs {', '.join(s + '_test.csv' for s in subjects)})")
        with path.open(encoding="utf-8", newline="") as fh:
            rows = list(csv.reader(fh))
        if rows and [c.strip().lower() for c in rows[0]] == ["question", "a", "b", "c", "d", "answer"]:
            rows = rows[1:]
        for i, row in enumerate(rows):
            what = f"{path}: row {i}"
            if len(row) != 6:
                raise ValueError(f"{what} has {len(row)} columns, expected 6 (question, A, B, C, D, answer)")
            answer = row[5].strip().upper()
            if answer not in ("A", "B", "C", "D"):
                raise ValueError(f"{what}: answer {row[5]!r} is not one of A, B, C, D")
            out.append(
                MCQuestion(
                    id=f"{subject}-{i}",
                    question=row[0].strip(),
                    options={"A": row[1], "B": row[2], "C": row[3], "D": row[4]},
                    answer=answer,
                    dataset="mmlu_med",
                    subject=subject,
                )
            )
    return out


def load_medqa(path: PathLike) -> list[MCQuestion]:
    """MedQA-US (4 options) JSONL: one ``{"question", "options": {A..D}, "answer_idx"}`` per line.

    ``answer_idx`` may be missing when ``answer`` equals one option's text.
    Ids are the record's ``id`` when present, else ``medqa-<line number from 0>``.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    out: list[MCQuestion] = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh):
            if not line.strip():
                continue
            what = f"{path}: line {lineno + 1}"
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{what} is not valid JSON ({exc})") from exc
            if not isinstance(rec, dict) or not isinstance(rec.get("question"), str):
                raise ValueError(f"{what} lacks a 'question' string")
            options = _check_options(rec.get("options"), what)
            answer = rec.get("answer_idx")
            if answer is None and isinstance(rec.get("answer"), str):
                matches = [k for k, v in options.items() if v.strip() == rec["answer"].strip()]
                answer = matches[0] if len(matches) == 1 else None
            if not isinstance(answer, str) or answer.strip().upper() not in options:
                raise ValueError(f"{what}: answer_idx {answer!r} is not one of the options {', '.join(options)}")
            out.append(
                MCQuestion(
                    id=str(rec.get("id", f"medqa-{lineno}")),
                    question=rec["question"].strip(),
                    options=options,
                    answer=answer.strip().upper(),
                    dataset="medqa",
                    subject=str(rec.get("meta_info", "")),
                )
            )
    return out


def load_pubmedqa(path: PathLike) -> list[MCQuestion]:
    """PubMedQA* (``test_set.json`` / ``ori_pqal.json``): ``{PMID: {QUESTION, CONTEXTS, final_decision}}``.

    Options as in MIRAGE: A=yes, B=no, C=maybe; ``contexts`` keeps the abstract
    parts (MIRAGE removes them from the prompt: the question must be answered
    from retrieval).
    """
    path = Path(path)
    data = read_json(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected an object keyed by PMID (PubMedQA format)")
    letter = {v: k for k, v in PUBMEDQA_OPTIONS.items()}
    out = []
    for pmid, rec in data.items():
        what = f"{path}: record {pmid}"
        if not isinstance(rec, dict) or not isinstance(rec.get("QUESTION"), str):
            raise ValueError(f"{what} lacks a 'QUESTION' string")
        decision = rec.get("final_decision")
        if not isinstance(decision, str) or decision.strip().lower() not in letter:
            raise ValueError(f"{what}: final_decision {decision!r} is not yes, no or maybe")
        contexts = rec.get("CONTEXTS", [])
        if not isinstance(contexts, list) or not all(isinstance(c, str) for c in contexts):
            raise ValueError(f"{what}: CONTEXTS must be a list of strings")
        out.append(
            MCQuestion(
                id=str(pmid),
                question=rec["QUESTION"].strip(),
                options=dict(PUBMEDQA_OPTIONS),
                answer=letter[decision.strip().lower()],
                dataset="pubmedqa",
                contexts=list(contexts),
                metadata={k: rec[k] for k in ("LONG_ANSWER", "YEAR", "MESHES") if k in rec},
            )
        )
    return out


DATASET_KINDS = ("mmlu_med", "medqa", "pubmedqa", "bioasq")


def load_dataset(spec: str) -> tuple[str, list[MCQuestion]]:
    """Load a MedRGB dataset from a CLI spec ``KIND:PATH`` (``bioasq:F1,F2`` for several files).

    Returns ``(kind, questions)``; kinds: mmlu_med (a folder), medqa (JSONL),
    pubmedqa (JSON), bioasq (golden JSON files; yes/no questions only).
    """
    kind, sep, rest = spec.partition(":")
    kind = kind.strip().lower()
    if not sep or not rest or kind not in DATASET_KINDS:
        raise ValueError(f"dataset spec {spec!r} must be KIND:PATH with KIND one of {', '.join(DATASET_KINDS)}")
    if kind == "mmlu_med":
        return kind, load_mmlu_med(rest)
    if kind == "medqa":
        return kind, load_medqa(rest)
    if kind == "pubmedqa":
        return kind, load_pubmedqa(rest)
    return kind, load_bioasq_yesno([p for p in rest.split(",") if p])
