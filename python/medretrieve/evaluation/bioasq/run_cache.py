"""The per-question cache of a BioASQ run (:class:`~.submissions.BatchRun`): what a cached entry must hold to be
submitted again, its seal, and the leftovers of killed runs.

A cached entry is used again only when it is exactly what the run would submit: :func:`entry_problem` checks
every field a submission needs for the phase (documents as PubMed URLs of digits, snippets with all six fields
and their types, the exact answer in its type's shape, the ideal answer a string, ...) and :func:`seal`'s digest
(``sha256`` of the entry's canonical JSON) shows it was not edited since this package wrote it. An entry that
fails either is answered again; entries written before the seal existed are taken when every field checks.

Killed runs leave their temporary files (``.<name>.tmp-<pid>`` of :func:`~medretrieve._files.write_text_atomic`,
``.submission-*.json`` of the submission writer); :func:`remove_temp_files` removes exactly those names, and is
called while the run holds the folder's lock, so no live writer owns them.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any, List, Mapping, Optional

from .evidence import PUBMED_URL

SEAL_KEY = "sha256"
_PMID = re.compile(r"[0-9]{1,20}")
_SNIPPET_STRS = ("document", "text", "beginSection", "endSection")
_SNIPPET_INTS = ("offsetInBeginSection", "offsetInEndSection")
#: temporary files of a run folder (``questions/`` and the folder itself) that only this package creates
TEMP_NAMES = re.compile(r"^\.(?:.+\.json\.tmp-[0-9]+|results\.md\.tmp-[0-9]+|submission-[A-Za-z0-9_]+\.json)$")


def _digest(entry: Mapping[str, Any]) -> str:
    body = {key: value for key, value in entry.items() if key != SEAL_KEY}
    text = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def seal(entry: Mapping[str, Any]) -> dict:
    """``entry`` with its digest under :data:`SEAL_KEY` (module docstring)."""
    return {**{key: value for key, value in entry.items() if key != SEAL_KEY}, SEAL_KEY: _digest(entry)}


def _pubmed_url(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(PUBMED_URL) and bool(_PMID.fullmatch(value[len(PUBMED_URL):]))


def _documents_problem(docs: Any, k: int) -> Optional[str]:
    if not isinstance(docs, list):
        return f"documents is a {type(docs).__name__}, not a list"
    if len(docs) > k:
        return f"{len(docs)} documents, more than {k}"
    bad = [d for d in docs if not _pubmed_url(d)]
    if bad:
        return f"document {str(bad[0])[:80]!r} is not a PubMed URL ({PUBMED_URL}<digits>)"
    if len(set(docs)) != len(docs):
        return "a document is listed twice"
    return None


def _snippet_problem(sn: Any) -> Optional[str]:
    if not isinstance(sn, dict):
        return f"a snippet is a {type(sn).__name__}, not an object"
    for key in _SNIPPET_STRS:
        if not isinstance(sn.get(key), str) or not sn[key].strip():
            return f"snippet {key!r} is {sn.get(key)!r:.80}, not a non-empty string"
    if not _pubmed_url(sn["document"]):
        return f"snippet document {sn['document'][:80]!r} is not a PubMed URL"
    for key in _SNIPPET_INTS:
        value = sn.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return f"snippet {key!r} is {value!r:.80}, not an integer >= 0"
    if sn["beginSection"] == sn["endSection"] and sn["offsetInEndSection"] < sn["offsetInBeginSection"]:
        return "a snippet ends before it begins"
    return None


def _exact_problem(exact: Any, qtype: str) -> Optional[str]:
    if qtype == "summary":
        return None if exact is None else "a summary question has no exact answer"
    if qtype == "yesno":
        return None if exact in (None, "yes", "no") else f"yes/no exact answer {exact!r:.80}"
    # factoid and list: [[name, synonym...], ...] as the run writes them
    if not isinstance(exact, list):
        return f"{qtype} exact answer is a {type(exact).__name__}, not a list of name lists"
    for names in exact:
        if not isinstance(names, list) or not names or not all(isinstance(n, str) and n.strip() for n in names):
            return f"{qtype} exact answer item {names!r:.80} is not a list of non-empty names"
    return None


def _optional_problem(entry: Mapping[str, Any]) -> Optional[str]:
    for key in ("parse_error", "note"):
        if key in entry and not isinstance(entry[key], str):
            return f"{key} is not a string"
    if "exact_answer_from" in entry and entry["exact_answer_from"] != "snippets":
        return f"exact_answer_from is {entry['exact_answer_from']!r:.80}"
    ms = entry.get("elapsed_ms", 0.0)
    if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not math.isfinite(ms) or ms < 0:
        return f"elapsed_ms is {ms!r:.80}"
    return None


def entry_problem(entry: Any, qid: str, qtype: str, phase: str, k: int) -> Optional[str]:
    """Why ``entry`` cannot be submitted again for question ``qid`` of type ``qtype`` in ``phase`` with ``k``
    documents and snippets at most, or None when it can (module docstring)."""
    if not isinstance(entry, dict):
        return f"a {type(entry).__name__}, not an entry"
    if entry.get("id") != qid or entry.get("type") != qtype:
        return f"not the entry of question {qid} ({qtype})"
    if SEAL_KEY in entry and entry[SEAL_KEY] != _digest(entry):
        return "edited since it was written (its sha256 differs)"
    retrieves, answers = phase in ("A", "A+"), phase in ("A+", "B")
    for key, needed in (("documents", retrieves), ("snippets", retrieves), ("exact_answer", answers),
                        ("ideal_answer", answers)):
        if needed != (key in entry):
            return f"{key} {'missing' if needed else 'present'} in a phase {phase} entry"
    if retrieves:
        problem = _documents_problem(entry["documents"], k)
        if problem is None and not isinstance(entry["snippets"], list):
            problem = f"snippets is a {type(entry['snippets']).__name__}, not a list"
        if problem is None and len(entry["snippets"]) > k:
            problem = f"{len(entry['snippets'])} snippets, more than {k}"
        for sn in entry["snippets"] if problem is None else ():
            problem = problem or _snippet_problem(sn)
        if problem:
            return problem
    if answers:
        if not isinstance(entry["ideal_answer"], str):
            return f"ideal_answer is a {type(entry['ideal_answer']).__name__}, not a string"
        problem = _exact_problem(entry["exact_answer"], qtype)
        if problem:
            return problem
    return _optional_problem(entry)


def remove_temp_files(folder: Path) -> List[str]:
    """Remove the temporary files killed runs left directly in ``folder`` (:data:`TEMP_NAMES` only); returns
    their names. Call it only while holding the run folder's lock."""
    removed = []
    if folder.is_dir():
        for p in folder.iterdir():
            if TEMP_NAMES.match(p.name) and p.is_file() and not p.is_symlink():
                p.unlink(missing_ok=True)
                removed.append(p.name)
    return sorted(removed)
