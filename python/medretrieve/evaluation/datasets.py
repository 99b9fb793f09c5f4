"""Loaders for the multiple-choice evaluation sets (MIRAGE's, which MedRGB asks too) and the CLI's dataset specs.

Every loader reads the files in place and returns plain dataclasses. Malformed
input raises ``ValueError`` naming the file and the record (index or id), never
a bare ``KeyError`` deep inside the evaluation.

- BioASQ's files are read by :func:`medretrieve.evaluation.bioasq.load_bioasq` (:mod:`.bioasq.golden`).
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
from typing import Any, Iterable, Sequence, Union

from .._files import read_json
from .bioasq.golden import PathLike, load_bioasq


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


# --------------------------------------------------------------------------- MIRAGE and MedRGB (multiple choice)


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
