"""Chat prompts for grounded answers, built from the template files in ``templates/``.

Every function returns a chat ``messages`` list (``[{"role": "system", ...},
{"role": "user", ...}]``) ready for ``backend.generate``. A template file has a
``### system`` and a ``### user`` section; placeholders are ``$name``
(:class:`string.Template`) so JSON examples in the text need no escaping.

Evidence (``snippets``, ``sources``, ``documents``) may be strings, dicts with
``text`` (and optional ``title``/``id``), or retrieval ``Hit`` objects; they
are numbered from 1 in the order given, which is the number a model cites as
``[n]``. Matching parsers live in :mod:`medretrieve.generation.parsers`.

These are the prompts the Answerer sends (grounded answers, BioASQ answers, expansion terms); the prompts only an
evaluation asks (MedRGB's) live in :mod:`medretrieve.evaluation.medrgb.prompts`, with their own templates, read
by :func:`load_template` / :func:`render_messages` from that package.
"""
from __future__ import annotations

import functools
import string
from importlib import resources
from typing import Any, Mapping, Optional, Sequence, Union

from ..records import BIOASQ_TYPES

__all__ = [
    "TEMPLATES",
    "load_template",
    "render_messages",
    "check_text",
    "check_count",
    "format_sources",
    "evidence_text",
    "bioasq_messages",
    "cite_messages",
    "expansion_messages",
]

#: The package whose ``templates/`` folder holds this module's prompts; evaluation's prompts (MedRGB's) name
#: their own package to the same loader.
TEMPLATES = "medretrieve.generation"

Evidence = Union[str, Mapping[str, Any], Any]


@functools.lru_cache(maxsize=None)
def _read(package: str, name: str) -> str:
    try:
        return resources.files(package).joinpath("templates", name).read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        folder = package.replace(".", "/") + "/templates"
        raise FileNotFoundError(f"prompt template {name!r} is missing from {folder}") from exc


def load_template(name: str, package: str = TEMPLATES) -> tuple[Optional[string.Template], string.Template]:
    """``(system, user)`` templates of ``templates/<name>.txt`` in ``package`` (system may be None).

    A file without ``### system`` / ``### user`` markers is one user template
    (used for the format snippets that are inserted into other prompts).
    """
    text = _read(package, name + ".txt")
    if "### user" not in text:
        return None, string.Template(text)
    head, user = text.split("### user", 1)
    system = head.split("### system", 1)[1] if "### system" in head else ""
    return string.Template(system.strip()), string.Template(user.strip())


def render_messages(name: str, values: Mapping[str, Any], package: str = TEMPLATES) -> list[dict]:
    """The chat ``messages`` of template ``name`` (in ``package``) with its ``$placeholders`` filled from
    ``values`` (a missing one is a ``KeyError`` naming it)."""
    system, user = load_template(name, package)
    messages = []
    if system is not None:
        messages.append({"role": "system", "content": system.substitute(values)})
    messages.append({"role": "user", "content": user.substitute(values)})
    return messages


def _render(name: str, **values: Any) -> list[dict]:
    return render_messages(name, values)


def _fragment(name: str) -> str:
    return _read(TEMPLATES, name + ".txt").rstrip("\n")


def check_text(name: str, value: Any) -> str:
    """``value`` stripped, when it is a non-empty string (else a TypeError / ValueError naming ``name``)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{name} is empty")
    return value.strip()


def _field(item: Any, key: str) -> Any:
    if isinstance(item, Mapping):
        return item.get(key)
    return getattr(item, key, None)


def evidence_text(item: Evidence, where: str = "evidence item") -> tuple[str, str]:
    """``(title, text)`` of a string / dict / Hit-like evidence item."""
    if isinstance(item, str):
        return "", item.strip()
    text = _field(item, "text")
    if not isinstance(text, str):
        raise TypeError(f"{where} must be a str, a dict with 'text' or a Hit, got {type(item).__name__}")
    title = _field(item, "title")
    return (title.strip() if isinstance(title, str) else ""), text.strip()


def format_sources(items: Sequence[Evidence], label: str = "[{n}]", max_chars: Optional[int] = None) -> str:
    """Number evidence items from 1: ``[1] Title: ...\\ntext`` blocks separated by blank lines.

    ``max_chars`` trims each item's text (chars) so a prompt fits a small context.
    """
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise TypeError("evidence must be a list of strings, dicts with 'text', or Hits")
    blocks = []
    for n, item in enumerate(items, 1):
        title, text = evidence_text(item, f"evidence item {n}")
        if max_chars is not None and len(text) > max_chars:
            text = text[:max_chars].rstrip() + " ..."
        head = label.format(n=n)
        blocks.append(f"{head} {title}\n{text}" if title else f"{head} {text}")
    return "\n\n".join(blocks)


def _check_qtype(qtype: str) -> str:
    if qtype not in BIOASQ_TYPES:
        raise ValueError(f"qtype must be one of {BIOASQ_TYPES}, got {qtype!r}")
    return qtype


def bioasq_messages(
    question: str, qtype: str, snippets: Sequence[Evidence], phase: str = "A+", max_chars: Optional[int] = None
) -> list[dict]:
    """BioASQ answer prompt for ``qtype`` in yesno | factoid | list | summary.

    ``phase="A+"``: the snippets were retrieved by the system (may be
    incomplete or irrelevant); ``phase="B"``: gold snippets chosen by experts.
    Output format: ``EXACT: ...`` (yes/no; up to 5 ranked factoid candidates;
    list entities separated by ``|``) and ``IDEAL: ...``; summary: ``IDEAL`` only.
    """
    question = check_text("question", question)
    _check_qtype(qtype)
    if phase not in ("A+", "B"):
        raise ValueError(f"phase must be 'A+' (retrieved evidence) or 'B' (gold snippets), got {phase!r}")
    if phase == "B":
        intro = "Here are snippets selected by biomedical experts as relevant to the question:"
    else:
        intro = (
            "Here are snippets retrieved from PubMed for the question (they may be incomplete, "
            "and some may be irrelevant; rely on the relevant ones):"
        )
    body = format_sources(snippets, max_chars=max_chars) if snippets else "(no snippets were found)"
    readable = {"yesno": "yes/no", "factoid": "factoid", "list": "list", "summary": "summary"}[qtype]
    return _render(
        "bioasq",
        evidence_intro=intro,
        snippets=body,
        question=question,
        qtype=readable,
        format_instructions=_fragment(f"bioasq_{qtype}"),
    )


def cite_messages(
    question: str,
    sources: Sequence[Evidence],
    mode: str = "cite",
    qtype: Optional[str] = None,
    max_chars: Optional[int] = None,
) -> list[dict]:
    """Grounded answer over numbered sources.

    ``mode="cite"``: every claim cites ``[n]``, relations between sources are
    stated, "insufficient information" instead of speculation.
    ``mode="answer_only"``: the bare answer, no citations (for comparison).
    ``qtype`` yesno/factoid/list adds a final ``EXACT: ...`` line request.
    """
    question = check_text("question", question)
    if mode not in ("cite", "answer_only"):
        raise ValueError(f"mode must be 'cite' or 'answer_only', got {mode!r}")
    if qtype is not None:
        _check_qtype(qtype)
    exact = _fragment(f"exact_{qtype}") if qtype in ("yesno", "factoid", "list") else ""
    body = format_sources(sources, max_chars=max_chars) if sources else "(no sources were found)"
    return _render(mode, sources=body, question=question, exact_instructions=exact)


def check_count(n: int) -> int:
    """``n`` when it is an int in 1..50 (how many items a prompt asks for), else a ValueError."""
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 50:
        raise ValueError(f"n must be an int in 1..50, got {n!r}")
    return n


def expansion_messages(question: str, kind: str = "synonyms", n: int = 10) -> list[dict]:
    """Query-expansion prompt: ``kind="synonyms"`` (abbreviations, drug/gene names, MeSH terms)
    or ``"relations"`` (concepts linked by treats / associated-with / symptom-of ...);
    at most ``n`` terms; parse with ``parse_list``."""
    if kind not in ("synonyms", "relations"):
        raise ValueError(f"kind must be 'synonyms' or 'relations', got {kind!r}")
    return _render(f"expansion_{kind}", question=check_text("question", question), n=check_count(n))
