"""Tolerant parsers for LLM output: BioASQ answers, cited answers (abstention, the ``EXACT:`` line) and lists.

They accept the usual model noise -- prose around the answer, code fences,
``<think>`` blocks, markdown emphasis, casing, JSON or plain text -- and raise
:class:`ParseError` (a ``ValueError`` keeping the raw text as ``.raw``) when
the text cannot be read. The prompts that ask for these formats are in
:mod:`medretrieve.generation.prompts`. The reading helpers (:func:`check_reply`, :func:`clean_output`,
:func:`find_json`, :func:`lower_keys`) are public so that the evaluation's parsers (MedRGB's multiple choice,
sub-QA, counterfactuals and judge scores, :mod:`medretrieve.evaluation.medrgb.parsers`) read replies the same way.
"""
from __future__ import annotations

import json
import re
from typing import Any, Iterable, Mapping, Optional

from ..records import BIOASQ_TYPES, INSUFFICIENT

__all__ = [
    "ParseError",
    "CITE_RE",
    "INSUFFICIENT",
    "parse_bioasq",
    "parse_list",
    "split_exact",
    "is_insufficient",
    "check_reply",
    "clean_output",
    "find_json",
    "lower_keys",
]

#: A citation marker: [1], [1, 2], [1-3], [1; 2], [1 and 2].
CITE_RE = re.compile(r"\[\s*(\d+(?:\s*(?:[-–,;]|and)\s*\d+)*)\s*\]")

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


def check_reply(text: Any) -> str:
    """``text`` when the model output is a string, else a :class:`ParseError`."""
    if not isinstance(text, str):
        raise ParseError(f"model output must be a str, got {type(text).__name__}", text)
    return text


def _clean(text: str) -> str:
    """Drop reasoning blocks and code fences (keeping the fenced content)."""
    text = _THINK_RE.sub("", text)
    text = _FENCE_RE.sub(lambda m: m.group(1), text)
    return text.replace("```", "").strip()


def find_json(text: str, want: type = object) -> Any:
    """The first JSON value of type ``want`` (dict / list; ``object``: either) in the text, or None."""
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


def lower_keys(d: Mapping) -> dict:
    """``d`` with its keys lower-cased, stripped and spaces as underscores (``"Answer Choice"`` -> ``answer_choice``)."""
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


# "The answer is no.", 'The answer to the question "Is X?" is "yes"': on a line naming the answer, the last
# "is yes/no" past any echoed question (its "?"), so a yes or no inside the question is not read; "is not" is neither.
_IS_YES_NO_RE = re.compile(r"\bis\s*[:*_\"'“”‘’]*\s*(yes|no)\b", re.IGNORECASE)


def _answer_is_yes_no(text: str) -> Optional[str]:
    found: list[str] = []
    for line in text.splitlines():
        named = re.search(r"\banswer\b", line, re.IGNORECASE)
        if named:
            found += _IS_YES_NO_RE.findall(line[named.end():].rsplit("?", 1)[-1])
    return found[-1].lower() if found else None


MAX_ENTITY_WORDS = 6
_CUT_IDEAL = re.compile(r'^\s*\{\s*"ideal_answer"\s*:\s*"((?:[^"\\]|\\.)*)', re.DOTALL)


def _unquote(partial: str) -> str:
    """A JSON string's content without its quotes, escapes read (a dangling escape at a cut dropped)."""
    try:
        return str(json.loads(f'"{partial.rstrip(chr(92))}"'))
    except ValueError:
        return partial
_PLACEHOLDER = re.compile(r"^\s*<[^<>]*>\s*$")  # the prompt's example value ("<entity 1>"), copied by a small model


def _exact_items(exact: str) -> list[str]:
    """Entities of an EXACT value: a JSON list (possibly nested, as in BioASQ files) or delimited text; the
    prompt's placeholders are no entities."""
    items = None
    if exact.lstrip().startswith("["):
        try:
            value = json.loads(exact.strip())
        except ValueError:
            value = None
        if isinstance(value, list):
            flat: list = []
            for x in value:
                flat.extend(x[:1] if isinstance(x, list) and x else [x])
            items = _dedupe(_clean_item(str(x)) for x in flat)
    if items is None:
        items = _split_items(exact)
    return [x for x in items if not _PLACEHOLDER.match(x)]


def parse_bioasq(text: str, qtype: str) -> dict:
    """``{"exact_answer": ..., "ideal_answer": str}`` from a BioASQ-style reply.

    ``exact_answer`` by type: yesno ``"yes"``/``"no"``; factoid a ranked
    ``list[str]`` of at most 5 candidates; list a ``list[str]`` of entities;
    summary ``None``. (:func:`write_bioasq_submission` wraps the lists into the
    ``[[c1], [c2], ...]`` submission shape.) Reads ``EXACT:``/``IDEAL:`` lines
    or a JSON object with ``exact_answer``/``ideal_answer``.
    """
    raw = check_reply(text)
    if qtype not in BIOASQ_TYPES:
        raise ValueError(f"qtype must be one of {BIOASQ_TYPES}, got {qtype!r}")
    body = _clean(raw)
    exact: Any = None
    ideal: Optional[str] = None
    obj = find_json(body, dict)
    if obj is not None:
        d = lower_keys(obj)
        exact = d.get("exact_answer", d.get("exact", d.get("answer")))
        ideal = d.get("ideal_answer", d.get("ideal", d.get("explanation")))
        if isinstance(ideal, list):
            ideal = " ".join(str(x) for x in ideal)
        if isinstance(exact, list):  # one entity per entry (an inner list: the entity and its synonyms)
            exact = json.dumps([x for x in exact if x not in (None, "", [])], ensure_ascii=False)
        if exact is not None and not isinstance(exact, str):
            exact = str(exact)
    elif (cut := _CUT_IDEAL.search(body)) is not None:  # a JSON reply cut at the token budget: its ideal so far
        ideal = _unquote(cut.group(1))
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
    if ideal and _PLACEHOLDER.match(ideal):
        ideal = ""
    if exact and _PLACEHOLDER.match(exact):
        exact = None
    if qtype == "summary":
        if not ideal:
            raise ParseError("no ideal answer found in the summary reply", raw)
        return {"exact_answer": None, "ideal_answer": ideal}
    if qtype == "yesno":
        answer = _yes_no(exact) if exact else None
        if answer is None:
            answer = _yes_no(ideal or body) or _answer_is_yes_no(body)
        if answer is None:
            raise ParseError("no yes/no answer found (expected a line 'EXACT: yes' or 'EXACT: no')", raw)
        return {"exact_answer": answer, "ideal_answer": ideal}
    if not exact:
        raise ParseError(f"no 'EXACT:' line found in the {qtype} reply", raw)
    # a "name" of more than MAX_ENTITY_WORDS words is a sentence the model wrote (SmolLM2 put the start of its
    # ideal answer there); 95% of the 7b and 12b golden factoid and list answers have at most 6 words
    items = [x for x in _exact_items(exact) if len(x.split()) <= MAX_ENTITY_WORDS]
    if not items:
        raise ParseError(f"the {qtype} exact answer lists no entity (a short name)", raw)
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
    (or "Answer: insufficient information"), or it is short (<= 25 words), cites
    no source and says it."""
    cleaned = _clean(text).lower()
    if not cleaned:
        return False
    stripped = re.sub(r"^[\s*_\"'>#:-]+", "", cleaned)
    if stripped.startswith(INSUFFICIENT) or re.match(r"^(answer|exact)\s*:\s*\**\s*insufficient information", stripped):
        return True
    return INSUFFICIENT in cleaned and len(cleaned.split()) <= 25 and not CITE_RE.search(cleaned)


# ---------------------------------------------------------------------------
# Lists

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
                strs = [v for k, v in lower_keys(it).items() if isinstance(v, str)]
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
    raw = check_reply(text)
    body = _clean(raw)
    obj = find_json(body)
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


def clean_output(text: str) -> str:
    """Model output without ``<think>`` blocks and code fences (fenced content kept), stripped."""
    return _clean(text)
