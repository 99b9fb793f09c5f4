"""Evaluation runs (``medretrieve eval retrieval | bioasq | medrgb | report``) with JSON results, markdown, plots.

The evaluation functions take plain callables, so any retriever or pipeline
can be measured (and tests need no index):

- :func:`evaluate_retrieval` with ``search_fn(question, k) -> hits`` over BioASQ
  questions: document- and snippet-level MAP@k, P@k, R@k, nDCG@k, MRR.
- :func:`evaluate_bioasq_answers` with ``answer_fn(question) -> BioASQAnswer``:
  exact-answer metrics per type and ROUGE-2 / ROUGE-SU4 of ideal answers.
- MedRGB runs live in :mod:`medretrieve.evaluation.medrgb`; the CLI wires a collection,
  a retriever and an OpenAI-compatible backend to them.

Ranked documents are the distinct ``document_id`` s of the hits in rank order
(the first ``k``); ranked snippets are the first ``k`` hits' texts. So the
retriever is asked for ``fetch_k`` (default ``3 * k``) hits, enough to fill
``k`` distinct documents when several chunks of one document rank high.
"""
from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, List, Mapping, Optional, Sequence, cast

from .._files import write_text_atomic
from ..corpus.collection import Collection
from ..retrieval.retriever import Retriever
from ..training.ranker_fitting import fit_ranker
from . import metrics
from .datasets import BioASQQuestion, MCQuestion, load_dataset

SearchFn = Callable[[str, int], Sequence[Any]]


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def hit_snippet(hit: Any) -> metrics.SnippetRef:
    """A retrieval hit as a snippet for matching.

    Character offsets are used only when the hit's metadata carries BioASQ
    section offsets (``offsetInBeginSection`` / ``offsetInEndSection``);
    chunk offsets in other coordinates would give false matches, so those
    hits are matched by text.
    """
    meta = _get(hit, "metadata", None) or {}
    begin, end = meta.get("offsetInBeginSection"), meta.get("offsetInEndSection")
    return metrics.SnippetRef(
        document_id=str(_get(hit, "document_id", "")),
        text=str(_get(hit, "text", "")),
        section=str(meta.get("beginSection") or _get(hit, "section", "") or ""),
        offset_begin=begin if isinstance(begin, int) else None,
        offset_end=end if isinstance(end, int) else None,
    )


PUBMED_URL = "http://www.ncbi.nlm.nih.gov/pubmed/"


def bioasq_evidence(hits: Sequence[Any], k: int = 10) -> dict[str, list]:
    """BioASQ Phase A evidence from ranked hits: ``documents`` (PubMed URLs of the first ``k`` distinct
    documents) and ``snippets`` (the first ``k`` hits that know their place in the source, ``Hit.span``: the
    text with its section and character span). A hit without a span is left out of the snippets rather than
    given made-up offsets. A snippet's ``text`` is the section's own characters at its offsets (the span's
    ``text`` where the hit's whitespace-normalised text differs from them)."""
    docs = metrics._unique(str(_get(h, "document_id", "")) for h in hits if _get(h, "document_id", ""))[:k]
    snippets: list[dict] = []
    for h in hits:
        span = _get(h, "span", None)
        if span and len(snippets) < k:
            snippets.append({"document": PUBMED_URL + str(_get(h, "document_id")),
                             **span, "text": str(span.get("text", _get(h, "text")))})
    return {"documents": [PUBMED_URL + d for d in docs], "snippets": snippets}


def _means(rows: Sequence[Mapping[str, float]]) -> dict[str, Any]:
    if not rows:
        return {"count": 0}
    keys = {"ap": "map", "precision": "precision", "recall": "recall", "ndcg": "ndcg", "rr": "mrr"}
    return {"count": len(rows), **{name: statistics.fmean(r[key] for r in rows) for key, name in keys.items()}}


@dataclass
class RetrievalResult:
    """Means over questions (``document``, ``snippet``), per type, per question rows, search latency (ms)."""

    k: int
    document: dict[str, Any]
    snippet: dict[str, Any]
    by_type: dict[str, dict[str, Any]]
    rows: list[dict[str, Any]]
    latency_ms: dict[str, float]

    def to_dict(self) -> dict:
        return asdict(self)


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def evaluate_retrieval(
    search_fn: SearchFn,
    questions: Sequence[BioASQQuestion],
    k: int = 10,
    fetch_k: Optional[int] = None,
    min_overlap: float = 0.5,
    progress: bool = False,
) -> RetrievalResult:
    """Score ``search_fn`` on BioASQ questions at document and snippet level.

    ``search_fn(question_body, fetch_k)`` returns ranked hits with
    ``document_id`` and ``text`` (``Hit`` objects or dicts). Questions without
    gold documents (snippets) are left out of the document (snippet) means.
    """
    if not questions:
        raise ValueError("no questions to evaluate")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    fetch_k = fetch_k or 3 * k
    if fetch_k < k:
        raise ValueError(f"fetch_k ({fetch_k}) must be >= k ({k})")
    iterator: Any = questions
    if progress:
        from tqdm import tqdm

        iterator = tqdm(questions, desc="retrieval", unit="q")
    rows = []
    latencies = []
    for q in iterator:
        t0 = time.perf_counter()
        hits = list(search_fn(q.body, fetch_k))
        latencies.append((time.perf_counter() - t0) * 1000.0)
        ranked_docs = metrics._unique(str(_get(h, "document_id", "")) for h in hits)[:k]
        row = retrieval_row(q, ranked_docs, [hit_snippet(h) for h in hits[:k]], k, min_overlap)
        row.update(elapsed_ms=latencies[-1], evidence=bioasq_evidence(hits, k))
        rows.append(row)
    return RetrievalResult(k=k, **retrieval_means(rows), rows=rows, latency_ms={
        "mean": statistics.fmean(latencies),
        "p50": _percentile(latencies, 0.5),
        "p95": _percentile(latencies, 0.95),
    })


def retrieval_row(q: BioASQQuestion, ranked_docs: Sequence[str], snippets: Sequence[metrics.SnippetRef], k: int,
                  min_overlap: float = 0.5) -> dict[str, Any]:
    """One question's document and snippet scores at ``k`` (None where the question has no gold ones):
    ``ranked_docs`` are PMIDs in rank order, ``snippets`` the ranked snippets."""
    row: dict[str, Any] = {"id": q.id, "type": q.type, "gold_documents": len(q.documents),
                           "gold_snippets": len(q.snippets), "retrieved_documents": list(ranked_docs)[:k],
                           "document": None, "snippet": None}
    if q.documents:
        row["document"] = metrics.retrieval_scores(list(ranked_docs)[:k], q.documents, k)
    if q.snippets:
        ranked, relevant = metrics.snippet_run(list(snippets)[:k], q.snippets, min_overlap)
        row["snippet"] = metrics.retrieval_scores(ranked, relevant, k)
    return row


def retrieval_means(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``document`` and ``snippet`` means over :func:`retrieval_row` rows, and the same ``by_type``."""
    by_type = {}
    for t in sorted({r["type"] for r in rows}):
        sub = [r for r in rows if r["type"] == t]
        by_type[t] = {
            "count": len(sub),
            "document": _means([r["document"] for r in sub if r["document"]]),
            "snippet": _means([r["snippet"] for r in sub if r["snippet"]]),
        }
    return {"document": _means([r["document"] for r in rows if r["document"]]),
            "snippet": _means([r["snippet"] for r in rows if r["snippet"]]), "by_type": by_type}


# --------------------------------------------------------------------------- BioASQ answers


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
    retrieval = _means([metrics.retrieval_scores(answers[q.id].documents, q.documents, 10) for q in judged])
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
    from ..generation import parsers, prompts, schemas

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


#: ``deadline_ms`` value meaning "use the retriever's own default deadline".
RETRIEVER_DEFAULT: Any = object()


def retriever_search_fn(retriever: Any, deadline_ms: Any = RETRIEVER_DEFAULT,
                        options: Optional[Mapping[str, Any]] = None) -> SearchFn:
    """``search_fn(query, k) -> hits`` over a :class:`~medretrieve.retrieval.retriever.Retriever`.

    ``deadline_ms``: per search (ms); None for no deadline; by default the
    retriever's own default. ``options``: more ``Retriever.search`` keywords
    (e.g. ``{"bm25": False}`` for a dense-only ablation).
    """

    def search(query: str, k: int) -> Sequence[Any]:
        kwargs: dict[str, Any] = {**(options or {}), "k": k}
        if deadline_ms is not RETRIEVER_DEFAULT:
            kwargs["deadline_ms"] = deadline_ms
        return retriever.search(query, **kwargs).hits

    return search


def open_search_fn(collection_dir: str, deadline_ms: Any = RETRIEVER_DEFAULT,
                   options: Optional[Mapping[str, Any]] = None, ranker: Optional[str] = "default") -> SearchFn:
    """``search_fn`` over a built collection with the default ``Retriever``.

    ``deadline_ms`` as in :func:`retriever_search_fn` (None: no deadline); ``options`` go to every
    ``Retriever.search`` call; ``ranker``: as ``Retriever``'s (``"default"``: the shipped ranker; None: none;
    or a learned ranker JSON from ``medretrieve fit-ranker``).
    """
    return retriever_search_fn(Retriever(Collection.open(collection_dir), ranker=ranker), deadline_ms, options)


def fold_ranker_search_fn(collection_dir: str, questions: Sequence[BioASQQuestion],
                          deadline_ms: Any = RETRIEVER_DEFAULT, options: Optional[Mapping[str, Any]] = None
                          ) -> SearchFn:
    """``search_fn`` whose learned ranker never saw the question: one ranker per source file of ``questions``,
    fitted (``training.fit_ranker``) on the questions of the other files (leave-one-file-out; a question asked
    in several files is held out of every fold that evaluates it)."""
    sources = sorted({q.source for q in questions})
    if len(sources) < 2:
        raise ValueError("leave-one-file-out rankers need questions from at least two BioASQ files")
    retriever = Retriever(Collection.open(collection_dir))
    fold_of = {q.body: q.source for q in questions}
    rankers = {}
    for src in sources:
        # training pairs from the other files, minus any question asked again in this file
        held_out = {q.body for q in questions if q.source == src}
        pairs = [(q.body, q.documents) for q in questions if q.source != src and q.body not in held_out]
        rankers[src] = fit_ranker(retriever, pairs)
    search = retriever_search_fn(retriever, deadline_ms, options)

    def by_fold(query: str, k: int) -> Sequence[Any]:
        retriever.ranker = rankers[fold_of[query]]
        return search(query, k)

    return by_fold


def load_datasets(specs: Sequence[str], limit: Optional[int] = None) -> list[tuple[str, list[MCQuestion]]]:
    """Datasets from ``KIND:PATH`` specs; several specs of one kind are merged (e.g. several BioASQ files);
    ``limit``: the first N questions of each."""
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    merged: dict[str, list[MCQuestion]] = {}
    for spec in specs:
        kind, qs = load_dataset(spec)
        merged.setdefault(kind, []).extend(qs)
    return [(kind, qs[:limit] if limit else qs) for kind, qs in merged.items()]


def retrieval_markdown_for(data: Mapping[str, Any]) -> str:
    """The markdown table of an ``eval retrieval`` results.json, labelled by collection and search options."""
    from .report import retrieval_markdown

    label = Path(str(data.get("collection", ""))).name or None
    if data.get("search_options"):
        label = f"{label} ({', '.join(f'{k}={v}' for k, v in data['search_options'].items())})"
    return retrieval_markdown(data, label=label)


def write_medrgb_report(runs: list, out: Path) -> str:
    """results.md and the accuracy-vs-p plots of MedRGB runs in ``out``; returns the markdown and the plot
    paths' lines."""
    from .report import medrgb_markdown, plot_vs_p

    md = "## MedRGB\n\n" + medrgb_markdown(runs)
    write_text_atomic(out / "results.md", md)
    plots = plot_vs_p(runs, out)
    return md + "".join(f"\nplot: {p}" for p in plots)
