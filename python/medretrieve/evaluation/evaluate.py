"""Evaluation runs (``medretrieve eval retrieval | bioasq | medrgb | report``) with JSON results, markdown, plots.

The evaluation functions take plain callables, so any retriever or pipeline
can be measured (and tests need no index):

- :func:`evaluate_retrieval` with ``search_fn(question, k) -> hits`` over BioASQ
  questions: document- and snippet-level MAP@k, P@k, R@k, nDCG@k, MRR.
- BioASQ answers (:func:`~medretrieve.evaluation.bioasq.evaluate_bioasq_answers`), batches and submissions live
  in :mod:`medretrieve.evaluation.bioasq`, MedRGB runs in :mod:`medretrieve.evaluation.medrgb`; the CLI wires a
  collection, a retriever and an LLM backend to them.

Ranked documents are the distinct ``document_id`` s of the hits in rank order
(the first ``k``); ranked snippets are the first ``k`` hits' texts. So the
retriever is asked for ``fetch_k`` (default ``3 * k``) hits, enough to fill
``k`` distinct documents when several chunks of one document rank high.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from .._files import write_text_atomic
from ..corpus.collection import Collection
from ..retrieval.retriever import Retriever
from ..training.ranker_fitting import fit_ranker
from . import metrics
from .bioasq.evidence import bioasq_evidence
from .bioasq.golden import BioASQQuestion
from .datasets import MCQuestion, load_dataset

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


def mean_scores(rows: Sequence[Mapping[str, float]]) -> dict[str, Any]:
    """``count`` and the means of :func:`~.metrics.retrieval_scores` rows (``map``, ``precision``, ``recall``,
    ``ndcg``, ``mrr``); ``{"count": 0}`` for none."""
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
            "document": mean_scores([r["document"] for r in sub if r["document"]]),
            "snippet": mean_scores([r["snippet"] for r in sub if r["snippet"]]),
        }
    return {"document": mean_scores([r["document"] for r in rows if r["document"]]),
            "snippet": mean_scores([r["snippet"] for r in rows if r["snippet"]]), "by_type": by_type}


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
