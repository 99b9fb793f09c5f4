"""Tolerant parsers for MedRGB's replies: the multiple-choice answer of each scenario (:func:`parse_medrgb`,
:func:`parse_choice`), sub-question/answer pairs, counterfactual documents and the judge's scores.

They read replies as the Answerer's parsers do (:mod:`medretrieve.generation.parsers`: ``<think>`` blocks and
code fences dropped, the first JSON object found, keys lower-cased) and raise the same
:class:`~medretrieve.generation.parsers.ParseError` (a ``ValueError`` keeping the raw text as ``.raw``). Lists
(search topics) are read by :func:`medretrieve.generation.parsers.parse_list`, which query expansion uses too.
"""
from __future__ import annotations

import re
from typing import Any, Optional

from ...generation.parsers import ParseError, check_reply, clean_output, find_json, lower_keys
from ...records import INSUFFICIENT
from ..metrics import JUDGE_VALUES
from .prompts import Options, check_scenario, option_letters

__all__ = ["parse_choice", "parse_medrgb", "parse_sub_qa", "parse_counterfactual", "parse_judge"]


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


def parse_choice(text: str, options: Options) -> str:
    """The chosen option letter (upper case), or ``"insufficient information"``.

    Looks, in order, at a JSON ``answer_choice``/``answer``/``choice`` field,
    the last "answer (is) X" phrase, a reply that is just a letter or an
    option, and an option text quoted alone in the reply.
    """
    raw = check_reply(text)
    opts = option_letters(options)
    body = clean_output(raw)
    obj = find_json(body, dict)
    if obj is not None:
        d = lower_keys(obj)
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


def parse_medrgb(text: str, scenario: str, options: Options) -> dict:
    """Read a MedRGB reply into ``{"choice", "reasoning", "relevant_documents",
    "noisy_documents", "corrections", "sub_answers"}``.

    ``choice`` is a letter or "insufficient information"; document ids are the
    1-based numbers shown in the prompt; ``corrections`` maps a noisy document
    id to its corrected statement; ``sub_answers`` is a list of
    ``{"sub_question", "answer", "documents"}``. JSON replies are read field by
    field; plain-text replies fall back to "Answer: X" and labelled lines.
    """
    raw = check_reply(text)
    check_scenario(scenario)
    body = clean_output(raw)
    out: dict = {"choice": "", "reasoning": "", "relevant_documents": [], "noisy_documents": [],
                 "corrections": {}, "sub_answers": []}
    obj = find_json(body, dict)
    if obj is not None:
        d = lower_keys(obj)
        out["choice"] = parse_choice(body, options)
        out["reasoning"] = str(d.get("step_by_step_thinking", d.get("reasoning", "")) or "")
        if "relevant_documents" in d:
            out["relevant_documents"] = _doc_ids(d["relevant_documents"])
        for entry in d.get("document_analysis") or []:
            if not isinstance(entry, dict):
                continue
            e = lower_keys(entry)
            ids = _doc_ids(e.get("document", e.get("document_id", e.get("id"))))
            if ids and _truthy(e.get("has_factual_error", e.get("factual_error", False))):
                out["noisy_documents"].append(ids[0])
                if e.get("correction"):
                    out["corrections"][ids[0]] = str(e["correction"]).strip()
        if "noisy_documents" in d:
            out["noisy_documents"].extend(_doc_ids(d["noisy_documents"]))
        for entry in d.get("sub_answers") or []:
            if isinstance(entry, dict):
                e = lower_keys(entry)
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


def parse_sub_qa(text: str) -> list[dict]:
    """``[{"question", "answer"}, ...]`` from a JSON array or ``Q: ... A: ...`` lines."""
    raw = check_reply(text)
    body = clean_output(raw)
    obj = find_json(body, list)
    pairs: list[dict] = []
    if obj is not None:
        for it in obj:
            if isinstance(it, dict):
                d = lower_keys(it)
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
    raw = check_reply(text)
    body = clean_output(raw)
    obj = find_json(body, dict)
    if obj is not None:
        d = lower_keys(obj)
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


def parse_judge(text: str) -> float:
    """The judge's score, one of 0.0, 0.5, 1.0 (``SCORE: x``, JSON ``{"score": x}``,
    a bare number, or the words correct / partially correct / incorrect)."""
    raw = check_reply(text)
    body = clean_output(raw)
    value: Optional[float] = None
    obj = find_json(body, dict)
    if obj is not None:
        d = lower_keys(obj)
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
    if value not in JUDGE_VALUES:
        raise ParseError(f"score {value} is not one of 1, 0.5, 0", raw)
    return value
