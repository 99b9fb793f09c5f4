"""BioASQ answers: written by an LLM backend from retrieved (Phase A+) or gold (Phase B) snippets, scored as BioASQ
scores them (exact answers per type, ROUGE of the ideal answers), and shaped as submission entries.

The prompt, parser and reply schema (:func:`~medretrieve.generation.prompts.bioasq_messages`,
:func:`~medretrieve.generation.parsers.parse_bioasq`, :func:`~medretrieve.generation.schemas.bioasq_response_format`)
stay in ``generation``: the Answerer's ``mode="bioasq"`` (``POST /v1/answer``) asks them too, and generation sits
below evaluation, so evaluation uses them from there.
"""
from __future__ import annotations

import statistics
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, List, Mapping, Optional, Sequence, cast

from ...generation import parsers, prompts, schemas
from .. import metrics
from ..evaluate import SearchFn, mean_scores
from .evidence import PUBMED_URL, bioasq_evidence
from .golden import BioASQQuestion

__all__ = ["BioASQAnswer", "evaluate_bioasq_answers", "phase_a_entries", "submission_entries",
           "make_bioasq_answer_fn", "generate_bioasq_answer"]



@dataclass
class BioASQAnswer:
    """A system's answer: ``exact`` is "yes"/"no", ranked candidates (factoid) or items (list); None for summary."""

    exact: Any
    ideal: str
    raw: str = ""
    error: str = ""
    documents: list[str] = field(default_factory=list)  # PMIDs of the evidence, best first (may be empty)
    snippets: list[dict] = field(default_factory=list)  # BioASQ snippets of the evidence (bioasq_evidence)


def evaluate_bioasq_answers(
    answer_fn: Callable[[BioASQQuestion], BioASQAnswer],
    questions: Sequence[BioASQQuestion],
    max_workers: int = 1,
    progress: bool = False,
) -> dict[str, Any]:
    """Exact-answer metrics per type and ideal-answer ROUGE (best over the gold ideal answers).

    ``answer_fn`` may raise: the question is then listed under ``errors`` and
    left out of the means (so a dead backend does not read as a bad model).
    An unreadable answer should come back as ``BioASQAnswer(None, "")`` and
    counts as wrong.
    """
    if not questions:
        raise ValueError("no questions to evaluate")
    answers: dict[str, BioASQAnswer] = {}
    errors: list[dict] = []

    def work(q: BioASQQuestion) -> None:
        try:
            answers[q.id] = answer_fn(q)
        except Exception as exc:  # recorded, reported, excluded from the means
            errors.append({"id": q.id, "error": f"{type(exc).__name__}: {exc}"})

    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(questions), desc="bioasq answers", unit="q")
    with ThreadPoolExecutor(max_workers=max(1, max_workers)) as pool:
        for _ in pool.map(work, questions):
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()

    done = [q for q in questions if q.id in answers]
    exact: dict[str, Any] = {}
    # the loader normalised each gold exact answer to its type: "yes"/"no", or lists of synonym lists
    yn = [q for q in done if q.type == "yesno"]
    if yn:
        exact["yesno"] = {"count": len(yn), **metrics.yesno_scores([_yesno(answers[q.id].exact) for q in yn],
                                                                   [cast(str, q.exact_answer) for q in yn])}
    for qtype, scores in (("factoid", metrics.factoid_scores), ("list", metrics.list_scores)):
        qs = [q for q in done if q.type == qtype]
        if qs:
            exact[qtype] = {"count": len(qs), **scores([_strings(answers[q.id].exact) for q in qs],
                                                        [cast(List[List[str]], q.exact_answer) for q in qs])}
    with_ideal = [q for q in done if q.ideal_answer]
    ideal = None
    rows = []
    rouge = {}
    for q in with_ideal:
        pred = answers[q.id].ideal or ""
        rouge[q.id] = metrics.rouge_best(pred, q.ideal_answer) if pred.strip() else {"rouge2_f": 0.0, "rougesu4_f": 0.0}
    if with_ideal:
        ideal = {
            "count": len(with_ideal),
            "rouge2_f": statistics.fmean(r["rouge2_f"] for r in rouge.values()),
            "rougesu4_f": statistics.fmean(r["rougesu4_f"] for r in rouge.values()),
        }
    for q in done:
        a = answers[q.id]
        rows.append({"id": q.id, "type": q.type, "exact": a.exact, "ideal": a.ideal, "gold_exact": q.exact_answer,
                     "documents": a.documents, "snippets": a.snippets, "parse_error": a.error,
                     **rouge.get(q.id, {})})
    # evidence documents against the gold ones (only when the answerer reports them)
    judged = [q for q in done if q.documents and answers[q.id].documents]
    retrieval = mean_scores([metrics.retrieval_scores(answers[q.id].documents, q.documents, 10) for q in judged])
    return {"count": len(done), "exact": exact, "ideal": ideal, "retrieval": retrieval, "rows": rows,
            "errors": errors}


def phase_a_entries(result: Mapping[str, Any]) -> list[dict]:
    """Phase A submission entries (``write_bioasq_submission(..., phase="A")``) of an
    :func:`evaluate_retrieval` result (``RetrievalResult.to_dict()``)."""
    return [{"id": r["id"], **r["evidence"]} for r in result["rows"]]


def submission_entries(questions: Sequence[BioASQQuestion], result: Mapping[str, Any]) -> list[dict]:
    """Rows of :func:`evaluate_bioasq_answers` in the shape ``generate.write_bioasq_submission`` takes
    (Phase A+ rows carry their evidence; Phase B rows have none)."""
    by_id = {r["id"]: r for r in result["rows"]}
    out = []
    for q in questions:
        r = by_id.get(q.id)
        if r is None:
            continue
        exact = r["exact"]
        if q.type == "yesno" and exact not in ("yes", "no"):
            exact = None
        out.append({"id": q.id, "type": q.type, "exact_answer": exact if q.type != "summary" else None,
                    "ideal_answer": r["ideal"] or "",
                    "documents": [PUBMED_URL + d for d in r["documents"]][:10],
                    "snippets": r.get("snippets") or []})
    return out


def _yesno(value: Any) -> Optional[str]:
    if isinstance(value, str):
        return value
    return None


def _strings(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    out = []
    for v in value:
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, (list, tuple)) and v:
            out.append(str(v[0]))
    return out


def make_bioasq_answer_fn(search_fn: Optional[SearchFn], backend: Any, k: int = 10, max_tokens: int = 512,
                          max_chars: Optional[int] = 1500, phase: str = "A+"
                          ) -> Callable[[BioASQQuestion], BioASQAnswer]:
    """BioASQ answering, prompted with ``prompts.bioasq_messages`` and read with ``parsers.parse_bioasq``.

    ``phase="A+"``: the evidence is the ``k`` best hits of ``search_fn`` (reported as the answer's documents
    and snippets); ``phase="B"``: the question's gold snippets from the golden file, no retrieval
    (``search_fn`` may be None).
    """
    import threading

    if phase not in ("A+", "B"):
        raise ValueError(f"phase must be 'A+' (retrieved evidence) or 'B' (gold snippets), got {phase!r}")
    if phase == "A+" and search_fn is None:
        raise ValueError("Phase A+ answering needs a search_fn (a collection or PubMed to retrieve from)")
    lock = threading.Lock()

    def evidence(q: BioASQQuestion) -> list:
        if phase == "B":
            return [{"text": s.text} for s in q.snippets]
        assert search_fn is not None
        with lock:  # retrievers need not be thread-safe; the LLM calls run in parallel
            return list(search_fn(q.body, k))[:k]

    def answer(q: BioASQQuestion) -> BioASQAnswer:
        hits = evidence(q)
        ans = generate_bioasq_answer(backend, q, hits, phase, max_tokens, max_chars)
        if phase == "A+":
            found = bioasq_evidence(hits, k)
            ans.documents = [d[len(PUBMED_URL):] for d in found["documents"]]
            ans.snippets = found["snippets"]
        return ans

    return answer


def generate_bioasq_answer(backend: Any, q: BioASQQuestion, evidence: Sequence[Any], phase: str = "A+",
                           max_tokens: int = 512, max_chars: Optional[int] = 1500,
                           deadline_ms: Optional[float] = None) -> BioASQAnswer:
    """One BioASQ answer from ``backend`` (``prompts.bioasq_messages`` over ``evidence``, asked for as JSON under
    ``schemas.bioasq_response_format``, which llama.cpp and vLLM enforce while decoding; read with
    ``parsers.parse_bioasq``). Raises the backend's ``LLMError``; an unreadable reply comes back with ``error``
    set and no exact answer."""
    text = backend.generate(prompts.bioasq_messages(q.body, q.type, list(evidence), phase=phase,
                                                    max_chars=max_chars),
                            max_tokens=max_tokens, temperature=0.0, deadline_ms=deadline_ms,
                            response_format=schemas.bioasq_response_format(q.type, max_tokens))
    try:
        parsed = parsers.parse_bioasq(text, q.type)
    except ValueError as exc:
        # No readable exact answer: the exact answer scores as missing, but the model's ideal answer (read as a
        # summary's, when the reply has one) or else its prose still stands (as Answerer keeps it), so ROUGE
        # measures it instead of scoring an empty string.
        try:
            ideal = parsers.parse_bioasq(text, "summary")["ideal_answer"]
        except ValueError:
            ideal = parsers.clean_output(text)
        return BioASQAnswer(None, ideal, raw=text, error=str(exc))
    return BioASQAnswer(parsed.get("exact_answer"), parsed.get("ideal_answer") or "", raw=text)
