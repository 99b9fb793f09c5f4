"""Chat prompts for grounded answers, built from the template files in ``templates/``.

Every function returns a chat ``messages`` list (``[{"role": "system", ...},
{"role": "user", ...}]``) ready for ``backend.generate``. A template file has a
``### system`` and a ``### user`` section; placeholders are ``$name``
(:class:`string.Template`) so JSON examples in the text need no escaping.

Evidence (``snippets``, ``sources``, ``documents``) may be strings, dicts with
``text`` (and optional ``title``/``id``), or retrieval ``Hit`` objects; they
are numbered from 1 in the order given, which is the number a model cites as
``[n]``. Matching parsers live in :mod:`medretrieve.generation.parsers`.
"""
from __future__ import annotations

import functools
import string
from importlib import resources
from typing import Any, Mapping, Optional, Sequence, Union

__all__ = [
    "BIOASQ_TYPES",
    "MEDRGB_SCENARIOS",
    "INSUFFICIENT",
    "load_template",
    "format_sources",
    "evidence_text",
    "option_letters",
    "bioasq_messages",
    "cite_messages",
    "medrgb_messages",
    "search_topics_messages",
    "sub_qa_messages",
    "counterfactual_messages",
    "judge_messages",
    "expansion_messages",
]

BIOASQ_TYPES = ("yesno", "factoid", "list", "summary")
MEDRGB_SCENARIOS = ("standard", "sufficiency", "integration", "robustness")
#: The exact phrase models are told to use instead of speculating.
INSUFFICIENT = "insufficient information"

Evidence = Union[str, Mapping[str, Any], Any]


@functools.lru_cache(maxsize=None)
def _read(name: str) -> str:
    try:
        return resources.files("medretrieve.generation").joinpath("templates", name).read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"prompt template {name!r} is missing from medretrieve/generation/templates") from exc


def load_template(name: str) -> tuple[Optional[string.Template], string.Template]:
    """``(system, user)`` templates of ``templates/<name>.txt`` (system may be None).

    A file without ``### system`` / ``### user`` markers is one user template
    (used for the format snippets that are inserted into other prompts).
    """
    text = _read(name + ".txt")
    if "### user" not in text:
        return None, string.Template(text)
    head, user = text.split("### user", 1)
    system = head.split("### system", 1)[1] if "### system" in head else ""
    return string.Template(system.strip()), string.Template(user.strip())


def _render(name: str, **values: Any) -> list[dict]:
    system, user = load_template(name)
    messages = []
    if system is not None:
        messages.append({"role": "system", "content": system.substitute(values)})
    messages.append({"role": "user", "content": user.substitute(values)})
    return messages


def _fragment(name: str) -> str:
    return _read(name + ".txt").rstrip("\n")


def _check_text(name: str, value: Any) -> str:
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
    question = _check_text("question", question)
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
    question = _check_text("question", question)
    if mode not in ("cite", "answer_only"):
        raise ValueError(f"mode must be 'cite' or 'answer_only', got {mode!r}")
    if qtype is not None:
        _check_qtype(qtype)
    exact = _fragment(f"exact_{qtype}") if qtype in ("yesno", "factoid", "list") else ""
    body = format_sources(sources, max_chars=max_chars) if sources else "(no sources were found)"
    return _render(mode, sources=body, question=question, exact_instructions=exact)


def option_letters(options: Union[Mapping[str, str], Sequence[str]]) -> dict[str, str]:
    """Options as ``{"A": text, ...}``: a mapping keeps its (upper-cased) keys, a list gets A, B, C..."""
    if isinstance(options, Mapping):
        out = {str(k).strip().upper(): str(v) for k, v in options.items()}
    elif isinstance(options, Sequence) and not isinstance(options, (str, bytes)):
        if len(options) > 26:
            raise ValueError(f"at most 26 options, got {len(options)}")
        out = {chr(ord("A") + i): str(v) for i, v in enumerate(options)}
    else:
        raise TypeError("options must be a dict {letter: text} or a list of option texts")
    if len(out) < 2:
        raise ValueError(f"a multiple-choice question needs at least 2 options, got {len(out)}")
    for k in out:
        if len(k) != 1 or not k.isalpha():
            raise ValueError(f"option keys must be single letters, got {k!r}")
    return out


def medrgb_messages(
    scenario: str,
    question: str,
    options: Union[Mapping[str, str], Sequence[str]],
    documents: Sequence[Evidence],
    sub_questions: Optional[Sequence[str]] = None,
    max_chars: Optional[int] = None,
) -> list[dict]:
    """MedRGB multiple-choice prompt; ``scenario`` in standard | sufficiency | integration | robustness.

    All ask for a JSON object with ``step_by_step_thinking`` and
    ``answer_choice``; sufficiency adds ``relevant_documents`` and the
    "insufficient information" choice, integration ``sub_answers`` (needs
    ``sub_questions``), robustness ``document_analysis`` (errors + corrections)
    and, given ``sub_questions``, ``sub_answers`` too. ``standard`` without
    documents is MedRGB's no-retrieval baseline (n=0): the model answers from its
    own knowledge.
    """
    if scenario not in MEDRGB_SCENARIOS:
        raise ValueError(f"scenario must be one of {MEDRGB_SCENARIOS}, got {scenario!r}")
    question = _check_text("question", question)
    opts = option_letters(options)
    option_text = "\n".join(f"{k}. {v}" for k, v in opts.items())
    if scenario == "sufficiency":
        option_text += f"\n(or answer \"{INSUFFICIENT}\" if the documents are not enough)"
    values: dict = {
        "question": question,
        "options": option_text,
        "letters": ", ".join(opts),
        "documents": format_sources(documents, label="Document [{n}]", max_chars=max_chars)
        if documents
        else "(no documents)",
    }
    numbered = "\n".join(f"{i}. {_check_text('sub-question', q)}" for i, q in enumerate(sub_questions or [], 1))
    if scenario == "integration":
        if not sub_questions:
            raise ValueError("the integration scenario needs sub_questions")
        values["sub_questions"] = numbered
    elif scenario == "robustness":
        values["sub_questions_block"] = f"\nSub-questions to answer first:\n{numbered}\n" if sub_questions else ""
        values["sub_questions_task"] = (" Answer each sub-question from the documents, using only correct "
                                        "information." if sub_questions else "")
        values["sub_answers_format"] = ('"sub_answers": [{"sub_question": "<sub-question>", "answer": "<short '
                                        'answer>", "documents": [<numbers of the documents used>]}], '
                                        if sub_questions else "")
    elif sub_questions:
        raise ValueError("sub_questions are only used by the integration and robustness scenarios, "
                         f"not {scenario!r}")
    if scenario == "standard" and not documents:
        return _render("medrgb_none", **values)
    return _render(f"medrgb_{scenario}", **values)


def _check_n(n: int) -> int:
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 50:
        raise ValueError(f"n must be an int in 1..50, got {n!r}")
    return n


def search_topics_messages(question: str, n: int = 3) -> list[dict]:
    """Ask for ``n`` search topics (keyword queries) for a question; parse with ``parse_list``."""
    return _render("search_topics", question=_check_text("question", question), n=_check_n(n))


def sub_qa_messages(question: str, documents: Sequence[Evidence], n: int = 3, max_chars: Optional[int] = None) -> list[dict]:
    """Ask for ``n`` sub-question/answer pairs grounded in ``documents``; parse with ``parse_sub_qa``."""
    return _render(
        "sub_qa",
        question=_check_text("question", question),
        documents=format_sources(documents, label="Document [{n}]", max_chars=max_chars),
        n=_check_n(n),
    )


def counterfactual_messages(document: str, answer: str) -> list[dict]:
    """Ask to rewrite ``document`` so it supports a wrong answer instead of ``answer``
    (MedRGB robustness noise); parse with ``parse_counterfactual``."""
    return _render(
        "counterfactual", document=_check_text("document", document), answer=_check_text("answer", answer)
    )


def judge_messages(question: str, gold: str, pred: str) -> list[dict]:
    """LLM-judge prompt scoring ``pred`` against ``gold``: 1, 0.5 or 0; parse with ``parse_judge``."""
    pred_text = pred.strip() if isinstance(pred, str) else pred
    if not isinstance(pred_text, str):
        raise TypeError(f"pred must be a str, got {type(pred).__name__}")
    return _render(
        "judge",
        question=_check_text("question", question),
        gold=_check_text("gold", gold),
        pred=pred_text or "(empty answer)",
    )


def expansion_messages(question: str, kind: str = "synonyms", n: int = 10) -> list[dict]:
    """Query-expansion prompt: ``kind="synonyms"`` (abbreviations, drug/gene names, MeSH terms)
    or ``"relations"`` (concepts linked by treats / associated-with / symptom-of ...);
    at most ``n`` terms; parse with ``parse_list``."""
    if kind not in ("synonyms", "relations"):
        raise ValueError(f"kind must be 'synonyms' or 'relations', got {kind!r}")
    return _render(f"expansion_{kind}", question=_check_text("question", question), n=_check_n(n))
