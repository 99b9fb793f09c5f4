"""MedRGB's prompts: the multiple-choice answer of each scenario, and the prompts that build a question's context
(search topics, sub-questions with their answers, counterfactual documents) and grade sub-answers (the judge).

Their templates are this package's ``templates/`` folder, read by the loader the Answerer's prompts use
(:func:`medretrieve.generation.prompts.render_messages`); evidence is numbered as there
(:func:`~medretrieve.generation.prompts.format_sources`), ``Document [n]``. The matching parsers are in
:mod:`.parsers`, the reply schemas in :mod:`.schemas`.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence, Union

from ...generation.prompts import Evidence, check_count, check_text, format_sources, render_messages
from ...records import INSUFFICIENT

__all__ = ["SCENARIOS", "TEMPLATES", "option_letters", "check_scenario", "medrgb_messages", "search_topics_messages",
           "sub_qa_messages", "counterfactual_messages", "judge_messages"]

#: MedRGB's scenarios, in the paper's order.
SCENARIOS = ("standard", "sufficiency", "integration", "robustness")
#: The package whose ``templates/`` folder holds MedRGB's prompts.
TEMPLATES = "medretrieve.evaluation.medrgb"

Options = Union[Mapping[str, str], Sequence[str]]


def _render(name: str, **values: Any) -> list[dict]:
    return render_messages(name, values, TEMPLATES)


def option_letters(options: Options) -> dict[str, str]:
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


def check_scenario(scenario: str) -> str:
    """``scenario`` when it is one of :data:`SCENARIOS`, else a ValueError naming them."""
    if scenario not in SCENARIOS:
        raise ValueError(f"scenario must be one of {SCENARIOS}, got {scenario!r}")
    return scenario


def medrgb_messages(
    scenario: str,
    question: str,
    options: Options,
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
    own knowledge. ``max_chars`` trims each document's text (characters).
    """
    check_scenario(scenario)
    question = check_text("question", question)
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
    numbered = "\n".join(f"{i}. {check_text('sub-question', q)}" for i, q in enumerate(sub_questions or [], 1))
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


def search_topics_messages(question: str, n: int = 3) -> list[dict]:
    """Ask for ``n`` search topics (keyword queries) for a question; parse with
    :func:`medretrieve.generation.parsers.parse_list`."""
    return _render("search_topics", question=check_text("question", question), n=check_count(n))


def sub_qa_messages(question: str, documents: Sequence[Evidence], n: int = 3, max_chars: Optional[int] = None
                    ) -> list[dict]:
    """Ask for ``n`` sub-question/answer pairs grounded in ``documents`` (each trimmed to ``max_chars``
    characters); parse with :func:`.parsers.parse_sub_qa`."""
    return _render(
        "sub_qa",
        question=check_text("question", question),
        documents=format_sources(documents, label="Document [{n}]", max_chars=max_chars),
        n=check_count(n),
    )


def counterfactual_messages(document: str, answer: str) -> list[dict]:
    """Ask to rewrite ``document`` so it supports a wrong answer instead of ``answer``
    (MedRGB robustness noise); parse with :func:`.parsers.parse_counterfactual`."""
    return _render(
        "counterfactual", document=check_text("document", document), answer=check_text("answer", answer)
    )


def judge_messages(question: str, gold: str, pred: str) -> list[dict]:
    """LLM-judge prompt scoring ``pred`` against ``gold``: 1, 0.5 or 0; parse with :func:`.parsers.parse_judge`."""
    pred_text = pred.strip() if isinstance(pred, str) else pred
    if not isinstance(pred_text, str):
        raise TypeError(f"pred must be a str, got {type(pred).__name__}")
    return _render(
        "judge",
        question=check_text("question", question),
        gold=check_text("gold", gold),
        pred=pred_text or "(empty answer)",
    )
