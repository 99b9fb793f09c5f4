"""Grounded answers: parse model output, check citations, abstain, answer end to end.

- Parsers (``parse_bioasq``, ``parse_choice``, ``parse_medrgb``, ``parse_list``,
  ``parse_sub_qa``, ``parse_counterfactual``, ``parse_judge``) tolerate the
  usual model noise (prose around the answer, code fences, ``<think>`` blocks,
  markdown, casing, JSON or plain text) and raise :class:`ParseError` (a
  ``ValueError`` with the raw text as ``.raw``) when the text cannot be read.
- :func:`write_bioasq_submission` writes BioASQ submission JSON.
- :func:`verify_citations` checks each ``[n]`` against the numbered sources.
- :class:`AbstentionPolicy` + :class:`Answerer`: retrieve, maybe abstain,
  prompt, generate, parse, verify; LLM failures are reported on the
  :class:`Answer` (``error``), not raised.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

from .budget import Deadline
from .prompts import BIOASQ_TYPES, INSUFFICIENT, bioasq_messages, cite_messages, evidence_text, option_letters

__all__ = [
    "ParseError",
    "parse_bioasq",
    "parse_choice",
    "parse_medrgb",
    "parse_list",
    "parse_sub_qa",
    "parse_counterfactual",
    "parse_judge",
    "split_exact",
    "is_insufficient",
    "write_bioasq_submission",
    "Citation",
    "verify_citations",
    "SUPPORT_THRESHOLD",
    "SEMANTIC_THRESHOLD",
    "AbstentionPolicy",
    "Answer",
    "Answerer",
    "add_cli",
]


class ParseError(ValueError):
    """Model output that cannot be read; ``.raw`` is the text as received."""

    def __init__(self, message: str, raw: Any):
        preview = raw if not isinstance(raw, str) else (raw[:160] + ("..." if len(raw) > 160 else ""))
        super().__init__(f"{message}; model output was: {preview!r}")
        self.raw = raw


# ---------------------------------------------------------------------------
# Text clean-up shared by the parsers

_THINK_RE = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_FENCE_RE = re.compile(r"```[a-zA-Z0-9_-]*[ \t]*\n?(.*?)```", re.DOTALL)


def _check_raw(text: Any) -> str:
    if not isinstance(text, str):
        raise ParseError(f"model output must be a str, got {type(text).__name__}", text)
    return text


def _clean(text: str) -> str:
    """Drop reasoning blocks and code fences (keeping the fenced content)."""
    text = _THINK_RE.sub("", text)
    text = _FENCE_RE.sub(lambda m: m.group(1), text)
    return text.replace("```", "").strip()


def _find_json(text: str, want: type = object) -> Any:
    """The first JSON value of type ``want`` (dict / list) in the text, or None."""
    stripped = text.strip()
    try:
        value = json.loads(stripped)
        if isinstance(value, want) and isinstance(value, (dict, list)):
            return value
    except ValueError:
        pass
    decoder = json.JSONDecoder()
    starts = "{[" if want is object else ("{" if want is dict else "[")
    for i, ch in enumerate(text):
        if ch in starts:
            try:
                value, _ = decoder.raw_decode(text, i)
            except ValueError:
                continue
            if isinstance(value, want) and isinstance(value, (dict, list)):
                return value
    return None


def _lower_keys(d: Mapping) -> dict:
    return {str(k).strip().lower().replace(" ", "_"): v for k, v in d.items()}


_ITEM_PREFIX = re.compile(r"^\s*(?:[-*•+>]+|\(?\d{1,3}[.):]|\(?[a-z]\))\s+")


def _clean_item(item: str) -> str:
    item = _ITEM_PREFIX.sub("", item.strip())
    item = item.strip().strip("*_`").strip()
    item = item.strip("\"'“”‘’").strip()
    item = re.sub(r"[.;,]+$", "", item).strip()
    return item


def _dedupe(items: Iterable[str]) -> list[str]:
    seen, out = set(), []
    for it in items:
        key = it.casefold()
        if it and key not in seen:
            seen.add(key)
            out.append(it)
    return out


def _split_items(text: str) -> list[str]:
    """Entities from ``a | b``, bullet lines, ``a; b`` or ``a, b`` (in that order of preference)."""
    text = text.strip()
    if "|" in text:
        parts = text.split("|")
    else:
        lines = [ln for ln in text.splitlines() if ln.strip()]
        if len(lines) > 1:
            parts = lines
        elif ";" in text:
            parts = text.split(";")
        else:
            # ", " only: keeps chemical names such as "1,25-dihydroxyvitamin D3" whole.
            parts = re.split(r",\s+|\s+and\s+(?=[^,]*$)", text) if ", " in text else [text]
    return _dedupe(_clean_item(p) for p in parts)


# ---------------------------------------------------------------------------
# BioASQ

_LABEL_RE = re.compile(
    r"^[ \t>#*_-]*(exact(?:[ _]answers?)?|ideal(?:[ _]answers?)?)[ \t*_]*[:：][ \t*_]*",
    re.IGNORECASE | re.MULTILINE,
)


def _labelled_sections(text: str) -> dict[str, str]:
    """``{"exact": ..., "ideal": ...}`` from ``EXACT:`` / ``IDEAL:`` labelled lines (multi-line values)."""
    matches = list(_LABEL_RE.finditer(text))
    out: dict[str, str] = {}
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        key = "exact" if m.group(1).lower().startswith("exact") else "ideal"
        out.setdefault(key, text[m.end():end].strip())
    return out


def _yes_no(text: str) -> Optional[str]:
    m = re.match(r"^[\s*_\"'(\[]*(yes|no)\b", text, re.IGNORECASE)
    return m.group(1).lower() if m else None


def parse_bioasq(text: str, qtype: str) -> dict:
    """``{"exact_answer": ..., "ideal_answer": str}`` from a BioASQ-style reply.

    ``exact_answer`` by type: yesno ``"yes"``/``"no"``; factoid a ranked
    ``list[str]`` of at most 5 candidates; list a ``list[str]`` of entities;
    summary ``None``. (:func:`write_bioasq_submission` wraps the lists into the
    ``[[c1], [c2], ...]`` submission shape.) Reads ``EXACT:``/``IDEAL:`` lines
    or a JSON object with ``exact_answer``/``ideal_answer``.
    """
    raw = _check_raw(text)
    if qtype not in BIOASQ_TYPES:
        raise ValueError(f"qtype must be one of {BIOASQ_TYPES}, got {qtype!r}")
    body = _clean(raw)
    exact: Any = None
    ideal: Optional[str] = None
    obj = _find_json(body, dict)
    if obj is not None:
        d = _lower_keys(obj)
        exact = d.get("exact_answer", d.get("exact", d.get("answer")))
        ideal = d.get("ideal_answer", d.get("ideal", d.get("explanation")))
        if isinstance(ideal, list):
            ideal = " ".join(str(x) for x in ideal)
        if isinstance(exact, list):
            flat = []
            for x in exact:
                flat.extend(x if isinstance(x, list) else [x])
            exact = " | ".join(str(x) for x in flat)
        if exact is not None and not isinstance(exact, str):
            exact = str(exact)
    else:
        sections = _labelled_sections(body)
        exact = sections.get("exact")
        ideal = sections.get("ideal")
        if ideal is None:
            # No IDEAL label: the prose before EXACT, else the lines after a one-line EXACT.
            before = _LABEL_RE.split(body)[0].strip() if exact is not None else body
            after = ""
            if exact and "\n" in exact and exact.split("\n", 1)[0].strip():
                exact, after = (x.strip() for x in exact.split("\n", 1))
            ideal = before or after or None
    ideal = (ideal or "").strip()
    if qtype == "summary":
        if not ideal:
            raise ParseError("no ideal answer found in the summary reply", raw)
        return {"exact_answer": None, "ideal_answer": ideal}
    if qtype == "yesno":
        answer = _yes_no(exact) if exact else None
        if answer is None:
            answer = _yes_no(ideal or body)
        if answer is None:
            raise ParseError("no yes/no answer found (expected a line 'EXACT: yes' or 'EXACT: no')", raw)
        return {"exact_answer": answer, "ideal_answer": ideal}
    if not exact:
        raise ParseError(f"no 'EXACT:' line found in the {qtype} reply", raw)
    items = _split_items(exact)
    if not items:
        raise ParseError(f"the {qtype} 'EXACT:' line lists no entity", raw)
    if qtype == "factoid":
        items = items[:5]
    return {"exact_answer": items, "ideal_answer": ideal}


_EXACT_LINE_RE = re.compile(r"^[ \t>#*_-]*exact(?:[ _]answers?)?[ \t*_]*[:：].*$", re.IGNORECASE | re.MULTILINE | re.DOTALL)


def split_exact(text: str) -> tuple[str, Optional[str]]:
    """Split a cited answer into ``(body, exact_line_or_None)``; the ``EXACT:`` part
    (everything from the first ``EXACT:`` line on) is removed from the body."""
    m = _EXACT_LINE_RE.search(text)
    if not m:
        return text.strip(), None
    return text[: m.start()].strip(), text[m.start():].strip()


def is_insufficient(text: str) -> bool:
    """True when a reply declines to answer: it starts with "insufficient information"
    or is short (<= 25 words) and says it."""
    cleaned = _clean(text).lower()
    if not cleaned:
        return False
    stripped = re.sub(r"^[\s*_\"'>#:-]+", "", cleaned)
    if stripped.startswith(INSUFFICIENT) or re.match(r"^(answer|exact)\s*:\s*\**\s*insufficient information", stripped):
        return True
    return INSUFFICIENT in cleaned and len(cleaned.split()) <= 25


# ---------------------------------------------------------------------------
# Multiple choice (MedRGB)

def _choice_from(value: str, opts: dict[str, str]) -> Optional[str]:
    """A letter (or INSUFFICIENT) from a short answer string such as "B", "(b)", "Option B",
    "B. Aspirin", "b) aspirin", "B Aspirin" or the option text "Aspirin"."""
    v = value.strip().strip("*_`\"'").strip()
    if INSUFFICIENT in v.lower():
        return INSUFFICIENT
    m = (re.fullmatch(r"(?i:option|choice)?\s*\(?\[?([A-Za-z])\]?\)?[.:]?", v)
         or re.match(r"^(?i:option|choice)?\s*\(?([A-Za-z])[.):]\s", v))
    if m is None:
        # "B Aspirin": an upper-case letter followed by that option's text.
        m2 = re.match(r"^([A-Z])\s+(.+)$", v)
        if m2 and m2.group(1) in opts and opts[m2.group(1)].strip().lower() == m2.group(2).rstrip(".").lower():
            return m2.group(1)
    if m is not None and m.group(1).upper() in opts:
        return m.group(1).upper()
    hits = [k for k, t in opts.items() if t.strip() and t.strip().lower() == v.rstrip(".").lower()]
    return hits[0] if len(hits) == 1 else None


# "Answer: B", "the correct answer is (c)", "answer_choice": "D" -- a bare lower-case letter
# only counts in brackets so "answer a question" is not read as choice A.
_ANSWER_PHRASE_RE = re.compile(
    r"(?i:answer[_ ]choice|final answer|correct answer|answer|choice)[\"'`*_]*\s*"
    r"(?i:is|would be|should be)?\s*[:=]?\s*[*_\"'`]*"
    r"(?:\(([A-Za-z])\)|\[([A-Za-z])\]|([A-Z]))(?![A-Za-z0-9])"
)


def parse_choice(text: str, options: Union[Mapping[str, str], Sequence[str]]) -> str:
    """The chosen option letter (upper case), or ``"insufficient information"``.

    Looks, in order, at a JSON ``answer_choice``/``answer``/``choice`` field,
    the last "answer (is) X" phrase, a reply that is just a letter or an
    option, and an option text quoted alone in the reply.
    """
    raw = _check_raw(text)
    opts = option_letters(options)
    body = _clean(raw)
    obj = _find_json(body, dict)
    if obj is not None:
        d = _lower_keys(obj)
        for key in ("answer_choice", "answer", "choice", "final_answer"):
            if isinstance(d.get(key), str):
                got = _choice_from(d[key], opts)
                if got is not None:
                    return got
                raise ParseError(f"JSON field {key!r} = {d[key]!r} is not one of the options {list(opts)}", raw)
    direct = _choice_from(body, opts) if len(body) <= 80 else None
    if direct is not None:
        return direct
    phrases = [(m.group(1) or m.group(2) or m.group(3)).upper() for m in _ANSWER_PHRASE_RE.finditer(body)]
    phrases = [p for p in phrases if p in opts]
    if phrases:
        return phrases[-1]
    last_line = body.strip().splitlines()[-1] if body.strip() else ""
    got = _choice_from(last_line, opts) if last_line else None
    if got is not None:
        return got
    lowered = body.lower()
    named = [k for k, t in opts.items() if len(t.strip()) > 2 and t.strip().lower() in lowered]
    if len(named) == 1:
        return named[0]
    if INSUFFICIENT in lowered:
        return INSUFFICIENT
    raise ParseError(f"no answer choice among {list(opts)} found", raw)


def _doc_ids(value: Any) -> list[int]:
    """Document numbers from [1, "2", "Document [3]", "doc 4"] or "1, 3"."""
    items = value if isinstance(value, list) else [value]
    out: list[int] = []
    for it in items:
        if isinstance(it, bool):
            continue
        if isinstance(it, int):
            out.append(it)
        elif isinstance(it, float) and it.is_integer():
            out.append(int(it))
        elif isinstance(it, str):
            out.extend(int(x) for x in re.findall(r"\d+", it))
    return sorted(set(out))


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1", "y")
    return bool(value)


def parse_medrgb(text: str, scenario: str, options: Union[Mapping[str, str], Sequence[str]]) -> dict:
    """Read a MedRGB reply into ``{"choice", "reasoning", "relevant_documents",
    "noisy_documents", "corrections", "sub_answers"}``.

    ``choice`` is a letter or "insufficient information"; document ids are the
    1-based numbers shown in the prompt; ``corrections`` maps a noisy document
    id to its corrected statement; ``sub_answers`` is a list of
    ``{"sub_question", "answer", "documents"}``. JSON replies are read field by
    field; plain-text replies fall back to "Answer: X" and labelled lines.
    """
    from .prompts import MEDRGB_SCENARIOS

    raw = _check_raw(text)
    if scenario not in MEDRGB_SCENARIOS:
        raise ValueError(f"scenario must be one of {MEDRGB_SCENARIOS}, got {scenario!r}")
    body = _clean(raw)
    out: dict = {"choice": "", "reasoning": "", "relevant_documents": [], "noisy_documents": [],
                 "corrections": {}, "sub_answers": []}
    obj = _find_json(body, dict)
    if obj is not None:
        d = _lower_keys(obj)
        out["choice"] = parse_choice(body, options)
        out["reasoning"] = str(d.get("step_by_step_thinking", d.get("reasoning", "")) or "")
        if "relevant_documents" in d:
            out["relevant_documents"] = _doc_ids(d["relevant_documents"])
        for entry in d.get("document_analysis") or []:
            if not isinstance(entry, dict):
                continue
            e = _lower_keys(entry)
            ids = _doc_ids(e.get("document", e.get("document_id", e.get("id"))))
            if ids and _truthy(e.get("has_factual_error", e.get("factual_error", False))):
                out["noisy_documents"].append(ids[0])
                if e.get("correction"):
                    out["corrections"][ids[0]] = str(e["correction"]).strip()
        if "noisy_documents" in d:
            out["noisy_documents"].extend(_doc_ids(d["noisy_documents"]))
        for entry in d.get("sub_answers") or []:
            if isinstance(entry, dict):
                e = _lower_keys(entry)
                out["sub_answers"].append({
                    "sub_question": str(e.get("sub_question", e.get("question", ""))),
                    "answer": str(e.get("answer", "")),
                    "documents": _doc_ids(e.get("documents", [])),
                })
        out["noisy_documents"] = sorted(set(out["noisy_documents"]))
    else:
        out["choice"] = parse_choice(body, options)
        out["reasoning"] = body
        m = re.search(r"relevant documents?\s*[:=]\s*(.+)", body, re.IGNORECASE)
        if m:
            out["relevant_documents"] = _doc_ids(m.group(1))
        noisy = re.findall(
            r"document\s*\[?(\d+)\]?[^\n]*?(?<!no )(?:contains|has)\s+(?:an?\s+)?factual error", body, re.IGNORECASE
        )
        out["noisy_documents"] = sorted({int(x) for x in noisy})
        for doc, fix in re.findall(r"document\s*\[?(\d+)\]?[^\n]*?correct(?:ion|ed)[^:\n]*:\s*([^\n]+)", body,
                                   re.IGNORECASE):
            out["corrections"][int(doc)] = fix.strip()
    return out


# ---------------------------------------------------------------------------
# Lists, sub-QA, counterfactuals, judge

def _strings_from_json(value: Any) -> Optional[list[str]]:
    if isinstance(value, dict):
        lists = [v for v in value.values() if isinstance(v, list)]
        return _strings_from_json(lists[0]) if len(lists) == 1 else None
    if isinstance(value, list):
        out = []
        for it in value:
            if isinstance(it, str):
                out.append(it)
            elif isinstance(it, dict):
                strs = [v for k, v in _lower_keys(it).items() if isinstance(v, str)]
                named = [it[k] for k in it if str(k).lower() in ("term", "topic", "query", "synonym", "concept")]
                if named or strs:
                    out.append(str((named or strs)[0]))
            elif isinstance(it, (int, float)) and not isinstance(it, bool):
                out.append(str(it))
        return out
    return None


def parse_list(text: str) -> list[str]:
    """Items of a list reply (search topics, expansion terms): a JSON array (or an
    object holding one), bullet / numbered lines, or ``|`` / ``;`` / ``,`` separated."""
    raw = _check_raw(text)
    body = _clean(raw)
    obj = _find_json(body)
    items = _strings_from_json(obj) if obj is not None else None
    if items is None:
        lines = [ln for ln in body.splitlines() if ln.strip()]
        # Drop a lead-in such as "Here are the synonyms:".
        if len(lines) > 1 and lines[0].rstrip().endswith(":"):
            lines = lines[1:]
        items = _split_items("\n".join(lines)) if lines else []
    items = _dedupe(_clean_item(i) for i in items)
    if not items:
        raise ParseError("no list items found", raw)
    return items


def parse_sub_qa(text: str) -> list[dict]:
    """``[{"question", "answer"}, ...]`` from a JSON array or ``Q: ... A: ...`` lines."""
    raw = _check_raw(text)
    body = _clean(raw)
    obj = _find_json(body, list)
    pairs: list[dict] = []
    if obj is not None:
        for it in obj:
            if isinstance(it, dict):
                d = _lower_keys(it)
                q = d.get("question", d.get("sub_question", d.get("q")))
                a = d.get("answer", d.get("a"))
                if isinstance(q, str) and q.strip() and a is not None:
                    pairs.append({"question": q.strip(), "answer": str(a).strip()})
    else:
        pattern = re.compile(
            r"(?:^|\n)\s*(?:\d+[.)]\s*)?(?:sub-?question|question|q)\s*\d*\s*[:.]\s*(.+?)\s*\n\s*"
            r"(?:answer|a)\s*\d*\s*[:.]\s*(.+?)(?=\n|$)",
            re.IGNORECASE,
        )
        pairs = [{"question": q.strip(), "answer": a.strip()} for q, a in pattern.findall(body)]
    if not pairs:
        raise ParseError("no question/answer pairs found", raw)
    return pairs


def parse_counterfactual(text: str) -> dict:
    """``{"document": str, "counterfactual_answer": str}`` from the counterfactual reply
    (JSON, or ``Counterfactual answer: ...`` + ``Document: ...`` lines, or the bare rewritten document)."""
    raw = _check_raw(text)
    body = _clean(raw)
    obj = _find_json(body, dict)
    if obj is not None:
        d = _lower_keys(obj)
        doc = d.get("document", d.get("counterfactual_document", d.get("rewritten_document")))
        ans = d.get("counterfactual_answer", d.get("new_answer", d.get("answer", "")))
        if isinstance(doc, str) and doc.strip():
            return {"document": doc.strip(), "counterfactual_answer": str(ans or "").strip()}
        raise ParseError("the JSON reply has no 'document' text", raw)
    ans_m = re.search(r"(?:counterfactual|new|incorrect) answer\s*:\s*(.+)", body, re.IGNORECASE)
    doc_m = re.search(r"(?:rewritten |counterfactual )?document\s*:\s*(.+)", body, re.IGNORECASE | re.DOTALL)
    if doc_m:
        doc = doc_m.group(1).strip()
    else:
        doc = body
        if ans_m:
            doc = (body[: ans_m.start()] + body[ans_m.end():]).strip()
    if not doc:
        raise ParseError("no rewritten document found", raw)
    return {"document": doc, "counterfactual_answer": ans_m.group(1).strip() if ans_m else ""}


_JUDGE_VALUES = (0.0, 0.5, 1.0)


def parse_judge(text: str) -> float:
    """The judge's score, one of 0.0, 0.5, 1.0 (``SCORE: x``, JSON ``{"score": x}``,
    a bare number, or the words correct / partially correct / incorrect)."""
    raw = _check_raw(text)
    body = _clean(raw)
    value: Optional[float] = None
    obj = _find_json(body, dict)
    if obj is not None:
        d = _lower_keys(obj)
        v = d.get("score", d.get("grade"))
        try:
            value = float(v) if v is not None and not isinstance(v, bool) else None
        except (TypeError, ValueError):
            value = None
    if value is None:
        m = re.search(r"score\s*[:=]?\s*\**\s*(1/2|[01](?:\.\d+)?|\.5)", body, re.IGNORECASE)
        if m is None:
            m = re.match(r"^\s*\**\s*(1/2|[01](?:\.\d+)?|\.5)\s*\**\s*$", body)
        if m:
            value = 0.5 if m.group(1) == "1/2" else float(m.group(1))
    if value is None:
        low = body.lower()
        if re.search(r"\bpartially correct\b|\bpartial\b", low):
            value = 0.5
        elif re.search(r"\bincorrect\b|\bwrong\b", low):
            value = 0.0
        elif re.search(r"\bcorrect\b", low):
            value = 1.0
    if value is None:
        raise ParseError("no score (1, 0.5 or 0) found", raw)
    if value not in _JUDGE_VALUES:
        raise ParseError(f"score {value} is not one of 1, 0.5, 0", raw)
    return value


# ---------------------------------------------------------------------------
# BioASQ submission

def _get(item: Any, key: str, default: Any = None) -> Any:
    if isinstance(item, Mapping):
        return item.get(key, default)
    return getattr(item, key, default)


def _entities(value: Any, limit: int, qid: str) -> list[list[str]]:
    """``[[name, synonym...], ...]`` from a str, ``[str]`` or ``[[str]]``."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"question {qid}: exact_answer must be a list of entities, got {type(value).__name__}")
    out = []
    for v in value:
        names = [v] if isinstance(v, str) else list(v) if isinstance(v, (list, tuple)) else None
        if names is None or not all(isinstance(n, str) for n in names):
            raise ValueError(f"question {qid}: each entity must be a str or a list of synonym strs, got {v!r}")
        names = [n.strip() for n in names if n.strip()]
        if names:
            out.append(names)
    return out[:limit]


def _submission_entry(item: Any) -> dict:
    qid = _get(item, "id")
    if not isinstance(qid, str) or not qid:
        raise ValueError(f"every answer needs a non-empty str 'id', got {qid!r}")
    qtype = _get(item, "type") or _get(item, "qtype")
    if qtype not in BIOASQ_TYPES:
        raise ValueError(f"question {qid}: type must be one of {BIOASQ_TYPES}, got {qtype!r}")
    ideal = _get(item, "ideal_answer") or ""
    if isinstance(ideal, (list, tuple)):
        ideal = " ".join(str(x) for x in ideal)
    entry: dict = {"id": qid, "ideal_answer": str(ideal)}
    exact = _get(item, "exact_answer")
    if qtype == "yesno":
        if isinstance(exact, bool):
            exact = "yes" if exact else "no"
        if isinstance(exact, (list, tuple)) and len(exact) == 1:
            exact = exact[0]
        if not isinstance(exact, str) or exact.strip().lower() not in ("yes", "no"):
            raise ValueError(f"question {qid}: a yesno exact_answer must be 'yes' or 'no', got {exact!r}")
        entry["exact_answer"] = exact.strip().lower()
    elif qtype == "factoid":
        entry["exact_answer"] = _entities(exact, 5, qid)
    elif qtype == "list":
        entry["exact_answer"] = _entities(exact, 100, qid)
    for key, limit in (("documents", 10), ("snippets", 10)):
        value = _get(item, key)
        if value:
            entry[key] = list(value)[:limit]
    return entry


def write_bioasq_submission(
    answers: Iterable[Any],
    path: Union[str, os.PathLike],
    *,
    system: Optional[str] = None,
    username: Optional[str] = None,
    password: Optional[str] = None,
) -> dict:
    """Write BioASQ submission JSON (``{"questions": [...]}``) atomically; returns it.

    Each answer (dict or object) has ``id``, ``type`` (or ``qtype``),
    ``exact_answer``, ``ideal_answer`` and optionally ``documents``/``snippets``.
    Shapes: yesno ``"yes"``/``"no"``; factoid ``[[c1], [c2], ...]`` (at most 5,
    inner lists may hold synonyms); list ``[[e1], [e2], ...]`` (at most 100);
    summary has no ``exact_answer``; ``ideal_answer`` is one string.
    """
    entries = [_submission_entry(a) for a in answers]
    seen: set = set()
    for e in entries:
        if e["id"] in seen:
            raise ValueError(f"question {e['id']} appears twice in the submission")
        seen.add(e["id"])
    doc: dict = {}
    for key, value in (("username", username), ("password", password), ("system", system)):
        if value is not None:
            doc[key] = value
    doc["questions"] = entries
    target = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(target))
    fd, tmp = tempfile.mkstemp(prefix=".submission-", suffix=".json", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, indent=2)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return doc


# ---------------------------------------------------------------------------
# Citation verification

#: Fraction of a sentence's content words (stemmed, stopwords removed) that
#: must appear in the cited source(s) for the sentence to count as supported.
#: 0.5 accepts paraphrases that keep the key terms (drug, disease, effect)
#: and rejects sentences that bring in a new claim not in the source.
SUPPORT_THRESHOLD = 0.5
#: Cosine similarity (sentence vs best cited source) that counts as support
#: when an encoder is given; either test passing is enough.
SEMANTIC_THRESHOLD = 0.6

# Words that describe the sources rather than make a claim ("[1] and [2] both report ...").
_META_WORDS = (
    "source sources document documents study studies report reports reported reporting show shows showed "
    "shown find finds found suggest suggests suggested indicate indicates indicated state states stated "
    "according agree agrees contradict contradicts contradiction describe describes described note notes "
    "noted mention mentions mentioned add adds addition additionally however whereas while both similarly "
    "likewise consistent evidence information provide provides provided support supports supported"
)

_CITE_RE = re.compile(r"\[\s*(\d+(?:\s*(?:[-–,;]|and)\s*\d+)*)\s*\]")
_ABBREV_RE = re.compile(r"(?:\b(?:e\.g|i\.e|et al|vs|approx|fig|figs|dr|no|ca|cf|resp|incl)\.|\b[A-Z]\.)$", re.IGNORECASE)


@dataclass
class Citation:
    """One sentence of an answer and whether its cited sources support it.

    ``sources`` are the 1-based numbers cited in the sentence;
    ``invalid_sources`` those that name no provided source;
    ``support_score`` in [0, 1] is the better of the lexical overlap and (when
    an encoder was given) the cosine similarity; ``reason`` says why.
    """

    sentence: str
    sources: list[int]
    supported: bool
    support_score: float
    reason: str
    invalid_sources: list[int] = field(default_factory=list)


def _cited_numbers(sentence: str) -> list[int]:
    nums: list[int] = []
    for group in _CITE_RE.findall(sentence):
        for part in re.split(r"\s*(?:,|;|and)\s*", group):
            m = re.match(r"(\d+)\s*[-–]\s*(\d+)$", part.strip())
            if m:
                lo, hi = int(m.group(1)), int(m.group(2))
                if lo <= hi and hi - lo < 50:
                    nums.extend(range(lo, hi + 1))
                else:
                    nums.extend([lo, hi])
            elif part.strip().isdigit():
                nums.append(int(part.strip()))
    return sorted(set(nums))


_LEADING_CITES_RE = re.compile(r"^((?:\[[^\]]*\][\s.,;]*)+)(?=[A-Z])")


def split_sentences(text: str) -> list[str]:
    """Sentences of an answer. Citations written after the full stop go with the
    sentence before: a citation-only fragment ("[2].") and markers followed by a
    capitalised word ("... in 2018. [1] Both ...") join the previous sentence,
    while "[1] and [2] report ..." (a lower-case word follows) starts a new one."""
    pieces: list[str] = []
    for line in text.splitlines():
        line = _ITEM_PREFIX.sub("", line).strip()
        if not line:
            continue
        parts = re.split(r"(?<=[.!?])\s+(?=[\[(\"'A-Z0-9])", line)
        merged: list[str] = []
        for p in parts:
            if merged and _ABBREV_RE.search(merged[-1]):
                merged[-1] += " " + p
            else:
                merged.append(p)
        for p in merged:
            if pieces and not _CITE_RE.sub("", p).strip(" .;,!?"):
                pieces[-1] += " " + p
                continue
            lead = _LEADING_CITES_RE.match(p) if pieces else None
            if lead:
                pieces[-1] += " " + lead.group(1).strip()
                p = p[lead.end():]
            pieces.append(p)
    return pieces


def _content_terms(text: str) -> set:
    from .lexical import tokenize

    meta = _meta_terms()
    return {t for t in tokenize(_CITE_RE.sub(" ", text)) if t not in meta}


_META_CACHE: list = []


def _meta_terms() -> frozenset:
    if not _META_CACHE:
        from .lexical import tokenize

        _META_CACHE.append(frozenset(tokenize(_META_WORDS, remove_stopwords=False)))
    return _META_CACHE[0]


def _encode(encoder: Any, texts: list[str]) -> Any:
    import numpy as np

    vecs = encoder.encode(texts) if hasattr(encoder, "encode") else encoder(texts)
    vecs = np.asarray(vecs, dtype=np.float32)
    if vecs.ndim != 2 or vecs.shape[0] != len(texts):
        raise ValueError(f"encoder returned shape {vecs.shape} for {len(texts)} texts; expected [n, dim]")
    norms = np.linalg.norm(vecs, axis=1, keepdims=True)
    return vecs / np.maximum(norms, 1e-12)


def verify_citations(
    answer_text: str,
    sources: Sequence[Any],
    *,
    threshold: float = SUPPORT_THRESHOLD,
    encoder: Any = None,
    semantic_threshold: float = SEMANTIC_THRESHOLD,
    require_citations: bool = True,
) -> list[Citation]:
    """Check every sentence of ``answer_text`` against the numbered ``sources``.

    ``sources`` are numbered from 1 as in the prompt (str, dict with ``text``
    and optional ``title``, or Hit). A sentence is supported when every ``[n]``
    names a provided source and either (a) at least ``threshold`` of its
    content words (stemmed, stopwords and source-describing words removed)
    occur in the union of the cited sources, or (b) an ``encoder`` (``.encode(list[str])
    -> [n, dim]`` or a callable) is given and the cosine similarity to the
    best cited source is at least ``semantic_threshold``. Sentences without a
    citation are returned unsupported ("no citation") when ``require_citations``,
    except ones that say "insufficient information"; otherwise they are skipped.
    """
    if not isinstance(answer_text, str):
        raise TypeError(f"answer_text must be a str, got {type(answer_text).__name__}")
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be in [0, 1], got {threshold}")
    texts = []
    for i, s in enumerate(sources, 1):
        title, text = evidence_text(s, f"source {i}")
        texts.append(f"{title}\n{text}" if title else text)
    source_terms = [_content_terms(t) for t in texts]
    sentences = split_sentences(_clean(answer_text))
    results: list[Citation] = []
    pending_semantic: list[tuple[int, list[int]]] = []
    for sentence in sentences:
        cited = _cited_numbers(sentence)
        if not cited:
            if require_citations and INSUFFICIENT not in sentence.lower():
                results.append(Citation(sentence, [], False, 0.0, "no citation"))
            continue
        invalid = [n for n in cited if not 1 <= n <= len(texts)]
        if invalid:
            results.append(Citation(
                sentence, cited, False, 0.0,
                f"cites {', '.join(f'[{n}]' for n in invalid)} but only {len(texts)} sources were provided",
                invalid,
            ))
            continue
        terms = _content_terms(sentence)
        if not terms:
            results.append(Citation(sentence, cited, True, 1.0, "no content words to check"))
            continue
        union = set().union(*(source_terms[n - 1] for n in cited))
        found = terms & union
        score = len(found) / len(terms)
        cites = "".join(f"[{n}]" for n in cited)
        ok = score >= threshold
        reason = (f"{len(found)}/{len(terms)} content words found in {cites} "
                  f"({score:.2f} {'>=' if ok else '<'} {threshold:.2f})")
        if not ok:
            missing = sorted(terms - union)[:8]
            reason += f"; not in the source: {', '.join(missing)}"
        results.append(Citation(sentence, cited, ok, score, reason))
        if encoder is not None:
            pending_semantic.append((len(results) - 1, cited))
    if encoder is not None and pending_semantic:
        sent_vecs = _encode(encoder, [_CITE_RE.sub(" ", results[i].sentence) for i, _ in pending_semantic])
        src_vecs = _encode(encoder, texts)
        for row, (i, cited) in enumerate(pending_semantic):
            sim = max(float(sent_vecs[row] @ src_vecs[n - 1]) for n in cited)
            c = results[i]
            c.reason += f"; cosine {sim:.2f} ({'>=' if sim >= semantic_threshold else '<'} {semantic_threshold:.2f})"
            c.support_score = max(c.support_score, sim)
            c.supported = c.supported or sim >= semantic_threshold
    return results


# ---------------------------------------------------------------------------
# Abstention and the end-to-end answerer

@dataclass
class AbstentionPolicy:
    """When to answer "insufficient information" without calling the LLM.

    - ``weak``: abstain when the retriever flags the question as weak
      (``SearchResult.weak``) -- unless ``trust_recovery`` and the retriever
      says its recovery changed the result (``recovered``);
    - ``min_top_score``: abstain when the best hit scores below it (the hit's
      ``score``, or ``scores[score_key]`` when ``score_key`` names a stage
      such as ``"rerank"`` or ``"dense"``);
    - ``min_hits``: abstain when fewer hits came back.
    """

    weak: bool = True
    min_top_score: Optional[float] = None
    min_hits: int = 1
    score_key: Optional[str] = None
    trust_recovery: bool = True

    def check(self, result: Any) -> Optional[str]:
        """The reason to abstain, or None to go on and answer."""
        hits = list(_get(result, "hits") or [])
        if len(hits) < self.min_hits:
            return f"only {len(hits)} evidence passages were retrieved (need {self.min_hits})"
        if self.weak and _get(result, "weak", False):
            if not (self.trust_recovery and _get(result, "recovered", False)):
                reasons = _get(result, "weak_reasons") or []
                why = "; ".join(str(r) for r in reasons) or "no reason given"
                return f"the retriever flagged the question as weak ({why})"
        if self.min_top_score is not None and hits:
            scores = []
            for h in hits:
                if self.score_key is None:
                    scores.append(float(_get(h, "score", float("-inf"))))
                else:
                    stage = (_get(h, "scores") or {}).get(self.score_key)
                    if stage is not None:
                        scores.append(float(stage))
            if not scores:
                return f"no evidence has a {self.score_key!r} score to check against {self.min_top_score}"
            best = max(scores)
            if best < self.min_top_score:
                what = "score" if self.score_key is None else f"{self.score_key} score"
                return f"the best evidence {what} {best:.3f} is below the threshold {self.min_top_score}"
        return None


@dataclass
class Answer:
    """A grounded answer and everything needed to judge it.

    ``text`` is the answer (the ideal answer in BioASQ mode, "insufficient
    information" when abstaining); ``exact_answer`` is shaped as by
    :func:`parse_bioasq` (None when not asked for or not given);
    ``timings`` are ms for ``retrieve``, ``generate``, ``verify``, ``total``;
    ``error`` holds the LLM failure message (the pipeline does not raise it).
    """

    question: str
    text: str
    exact_answer: Any = None
    citations: list[Citation] = field(default_factory=list)
    abstained: bool = False
    abstain_reason: str = ""
    evidence: list = field(default_factory=list)
    timings: dict = field(default_factory=dict)
    error: Optional[str] = None
    qtype: Optional[str] = None
    mode: str = "cite"
    raw: str = ""

    @property
    def unsupported(self) -> list[Citation]:
        """Citations whose sentence is not supported by its sources."""
        return [c for c in self.citations if not c.supported]

    def to_dict(self) -> dict:
        """JSON-ready dict (evidence hits as dicts)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "evidence"}
        out["citations"] = [dataclasses.asdict(c) for c in self.citations]
        out["evidence"] = [_hit_dict(h) for h in self.evidence]
        return out

    def submission_entry(self, question_id: str, qtype: Optional[str] = None) -> dict:
        """An entry for :func:`write_bioasq_submission` (id, type, exact and ideal answer, documents)."""
        docs = _dedupe(str(_get(h, "document_id", "")) for h in self.evidence)
        return {"id": question_id, "type": qtype or self.qtype or "summary", "exact_answer": self.exact_answer,
                "ideal_answer": self.text, "documents": [d for d in docs if d]}


def _hit_dict(hit: Any) -> dict:
    if dataclasses.is_dataclass(hit) and not isinstance(hit, type):
        return dataclasses.asdict(hit)
    if isinstance(hit, Mapping):
        return dict(hit)
    keys = ("chunk_id", "document_id", "title", "text", "section", "score", "scores", "metadata", "parent_id")
    return {k: getattr(hit, k) for k in keys if hasattr(hit, k)}


_MODES = ("cite", "answer_only", "bioasq")


class Answerer:
    """Retrieve evidence, abstain when it is too weak, else ask the LLM and check the answer.

    ``retriever`` needs ``search(question, k=..., deadline_ms=...) -> SearchResult``
    (hits, query_type, weak, weak_reasons, recovered); ``backend`` is an LLM
    backend (:class:`medretrieve.llm.Backend`). ``mode``: ``"cite"``
    (numbered sources, [n] citations, verified), ``"answer_only"`` (bare answer,
    for comparison) or ``"bioasq"`` (BioASQ Phase A+ exact + ideal answer).
    ``retrieve_deadline_ms`` is the retrieval budget (ms), capped by what is
    left of the call's ``deadline_ms``; ``max_source_chars`` trims each source
    in the prompt (chars) so small context windows fit.
    """

    def __init__(
        self,
        retriever: Any,
        backend: Any,
        mode: str = "cite",
        policy: Optional[AbstentionPolicy] = None,
        *,
        k: int = 10,
        max_tokens: int = 512,
        temperature: float = 0.0,
        retrieve_deadline_ms: float = 300.0,
        max_source_chars: Optional[int] = 1500,
        encoder: Any = None,
        support_threshold: float = SUPPORT_THRESHOLD,
        search_kwargs: Optional[dict] = None,
    ) -> None:
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
        if not hasattr(retriever, "search"):
            raise TypeError("retriever must have a search(question, k=..., deadline_ms=...) method")
        if not hasattr(backend, "generate"):
            raise TypeError("backend must have a generate(messages, ...) method")
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive int, got {k!r}")
        self.retriever = retriever
        self.backend = backend
        self.mode = mode
        self.policy = policy if policy is not None else AbstentionPolicy()
        self.k = k
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.retrieve_deadline_ms = retrieve_deadline_ms
        self.max_source_chars = max_source_chars
        self.encoder = encoder
        self.support_threshold = support_threshold
        self.search_kwargs = dict(search_kwargs or {})

    def _messages(self, question: str, qtype: Optional[str], hits: list) -> list[dict]:
        if self.mode == "bioasq":
            return bioasq_messages(question, qtype or "summary", hits, phase="A+", max_chars=self.max_source_chars)
        return cite_messages(question, hits, mode=self.mode, qtype=qtype, max_chars=self.max_source_chars)

    def answer(self, question: str, qtype: Optional[str] = None, deadline_ms: Optional[float] = None) -> Answer:
        """Answer ``question``; ``qtype`` (yesno | factoid | list | summary) asks for an
        exact answer too (default: the retriever's ``query_type`` when it is one of those).
        ``deadline_ms`` caps the whole call (retrieval + generation)."""
        from .llm import LLMError, LLMTimeout

        if not isinstance(question, str) or not question.strip():
            raise ValueError("question must be a non-empty str")
        if qtype is not None and qtype not in BIOASQ_TYPES:
            raise ValueError(f"qtype must be one of {BIOASQ_TYPES} or None, got {qtype!r}")
        clock = Deadline(deadline_ms)
        kwargs = dict(self.search_kwargs)
        budget = min(self.retrieve_deadline_ms if self.retrieve_deadline_ms is not None else math.inf,
                     clock.remaining_ms())
        if math.isfinite(budget):
            kwargs["deadline_ms"] = max(0.0, budget)
        with clock.stage("retrieve"):
            result = self.retriever.search(question, k=self.k, **kwargs)
        hits = list(_get(result, "hits") or [])
        if qtype is None and _get(result, "query_type") in BIOASQ_TYPES:
            qtype = _get(result, "query_type")
        if self.mode == "bioasq" and qtype is None:
            qtype = "summary"
        ans = Answer(question=question, text="", qtype=qtype, mode=self.mode, evidence=hits)

        reason = self.policy.check(result)
        if reason is not None:
            ans.text, ans.abstained, ans.abstain_reason = INSUFFICIENT, True, reason
            ans.timings = clock.finish()
            return ans

        messages = self._messages(question, qtype, hits)
        with clock.stage("generate"):
            try:
                remaining = clock.remaining_ms()
                if remaining <= 0:
                    raise LLMTimeout(f"the deadline ({deadline_ms} ms) was used up by retrieval")
                raw = self.backend.generate(
                    messages, max_tokens=self.max_tokens, temperature=self.temperature,
                    deadline_ms=None if math.isinf(remaining) else remaining,
                )
            except LLMError as exc:
                ans.error = f"{type(exc).__name__}: {exc}"
                ans.timings = clock.finish()
                return ans
        ans.raw = raw
        with clock.stage("verify"):
            self._fill(ans, raw, qtype, hits)
        ans.timings = clock.finish()
        return ans

    def _fill(self, ans: Answer, raw: str, qtype: Optional[str], hits: list) -> None:
        if is_insufficient(raw):
            ans.text = _clean(raw)
            ans.abstained = True
            ans.abstain_reason = "the model judged the retrieved evidence insufficient"
            return
        if self.mode == "bioasq":
            try:
                parsed = parse_bioasq(raw, qtype or "summary")
            except ValueError as exc:
                ans.text, ans.error = _clean(raw), f"unreadable BioASQ answer: {exc}"
                return
            ans.text, ans.exact_answer = parsed["ideal_answer"], parsed["exact_answer"]
            return
        body, exact_line = split_exact(_clean(raw))
        ans.text = body
        if qtype in ("yesno", "factoid", "list"):
            try:
                if exact_line is not None:
                    ans.exact_answer = parse_bioasq(exact_line, qtype)["exact_answer"]
                elif qtype == "yesno":
                    ans.exact_answer = parse_bioasq(body, "yesno")["exact_answer"]
            except ValueError:
                ans.exact_answer = None  # the free-text answer still stands
        if self.mode == "cite":
            ans.citations = verify_citations(body, hits, threshold=self.support_threshold, encoder=self.encoder)


# ---------------------------------------------------------------------------
# CLI: medretrieve answer

def add_cli(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "answer",
        help="answer a question from a collection with an OpenAI-compatible LLM, citing sources",
        description="Retrieve evidence from COLLECTION_DIR and answer QUESTION with the LLM at --llm, "
        "citing numbered sources and checking each citation.",
    )
    p.add_argument("collection", metavar="COLLECTION_DIR", help="collection folder (medretrieve build)")
    p.add_argument("question", help="the question to answer")
    p.add_argument("--llm", required=True, metavar="BASE_URL", help="OpenAI-compatible API root, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--model", required=True, help="model name the server knows")
    p.add_argument("--mode", choices=_MODES, default="cite", help="cite (default), answer_only or bioasq")
    p.add_argument("--qtype", choices=BIOASQ_TYPES, default=None, help="ask for an exact answer of this BioASQ type")
    p.add_argument("--k", type=int, default=10, help="evidence passages to retrieve (default 10)")
    p.add_argument("--deadline-ms", type=float, default=None, help="time budget for the whole answer (ms)")
    p.add_argument("--max-tokens", type=int, default=512, help="most tokens the LLM may write (default 512)")
    p.add_argument("--timeout-s", type=float, default=60.0, help="per-request LLM timeout (s, default 60)")
    p.add_argument("--json", action="store_true", help="print the full answer as JSON")
    p.set_defaults(func=_cli_answer)


def _cli_answer(args: Any) -> int:
    from .llm import OpenAIBackend

    try:
        from .collection import Collection
        from .retrieve import Retriever
    except ImportError as exc:
        print(f"medretrieve answer: retrieval is unavailable: {exc}", file=sys.stderr)
        return 2
    try:
        collection = Collection.open(args.collection)
    except (OSError, ValueError) as exc:
        print(f"medretrieve answer: cannot open collection {args.collection!r}: {exc}", file=sys.stderr)
        return 2
    with OpenAIBackend(args.llm, args.model, timeout_s=args.timeout_s) as backend:
        answerer = Answerer(Retriever(collection), backend, mode=args.mode, k=args.k, max_tokens=args.max_tokens)
        ans = answerer.answer(args.question, qtype=args.qtype, deadline_ms=args.deadline_ms)
    if args.json:
        print(json.dumps(ans.to_dict(), indent=2, ensure_ascii=False, default=str))
    else:
        _print_answer(ans)
    if ans.error:
        print(f"medretrieve answer: {ans.error}", file=sys.stderr)
        return 1
    return 0


def _print_answer(ans: Answer) -> None:
    print(ans.text or "(no answer)")
    if ans.exact_answer is not None:
        print(f"\nExact answer: {ans.exact_answer}")
    if ans.abstained:
        print(f"\nAbstained: {ans.abstain_reason}")
    if ans.evidence:
        print("\nSources:")
        for n, h in enumerate(ans.evidence, 1):
            title = _get(h, "title") or ""
            print(f"  [{n}] {_get(h, 'document_id', '')} {title}".rstrip())
    bad = ans.unsupported
    if bad:
        print("\nUnsupported sentences:")
        for c in bad:
            print(f"  - {c.sentence}  ({c.reason})")
    t = ans.timings
    print("\nTimings (ms): " + ", ".join(f"{k} {v:.0f}" for k, v in t.items()))
