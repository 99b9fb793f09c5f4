"""Evaluation metrics: retrieval (document and snippet level), BioASQ answers, ROUGE, MedRGB.

Conventions
-----------
- Ranked lists are sequences of ids, best first. A repeated id counts once, at
  its first rank (several chunks of one document make one ranked document).
- Per-question functions raise ``ValueError`` when the gold set is empty: a
  question without gold cannot be scored and must be left out by the caller.
- BioASQ average precision divides by ``min(k, |relevant|)`` (the BioASQ
  normalisation), so a perfect top-k list scores 1 even with many gold items.
- Snippet-level relevance (:func:`match_snippets`): a retrieved snippet matches
  a gold snippet of the *same document* when their character spans overlap
  (both have offsets and the same section), else when their texts overlap
  (one normalised text contains the other, or they share at least
  ``min_overlap`` of the shorter one's word types). Each gold snippet is
  matched at most once, by the first retrieved snippet that matches it, so
  precision, recall and AP stay within [0, 1].
- Answer strings are compared case-insensitively with surrounding whitespace
  and trailing full stops removed (:func:`normalize_answer`).
"""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Hashable, Iterable, Mapping, Optional, Sequence

from ..records import INSUFFICIENT

# --------------------------------------------------------------------------- retrieval


def _unique(ranked: Iterable[Hashable]) -> list:
    seen: set = set()
    out = []
    for item in ranked:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


def _check(ranked: Sequence[Hashable], relevant: Iterable[Hashable], k: Optional[int]) -> tuple[list, set]:
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise ValueError(f"k must be a positive integer, got {k!r}")
    if isinstance(ranked, (str, bytes)) or isinstance(relevant, (str, bytes)):
        raise TypeError("ranked and relevant must be sequences of ids, not a single string")
    rel = set(relevant)
    if not rel:
        raise ValueError("the relevant (gold) set is empty; leave this question out")
    top = _unique(ranked)
    return (top if k is None else top[:k]), rel


def precision_at_k(ranked: Sequence[Hashable], relevant: Iterable[Hashable], k: int = 10) -> float:
    """Relevant items among the first ``k`` retrieved, divided by ``k``."""
    top, rel = _check(ranked, relevant, k)
    return sum(1 for d in top if d in rel) / k


def recall_at_k(ranked: Sequence[Hashable], relevant: Iterable[Hashable], k: int = 10) -> float:
    """Share of the relevant items found in the first ``k`` retrieved."""
    top, rel = _check(ranked, relevant, k)
    return sum(1 for d in top if d in rel) / len(rel)


def average_precision_at_k(ranked: Sequence[Hashable], relevant: Iterable[Hashable], k: int = 10) -> float:
    """BioASQ AP@k: sum of precision@i at each relevant rank i <= k, divided by min(k, |relevant|)."""
    top, rel = _check(ranked, relevant, k)
    hits = 0
    total = 0.0
    for i, d in enumerate(top, start=1):
        if d in rel:
            hits += 1
            total += hits / i
    return total / min(k, len(rel))


def ndcg_at_k(ranked: Sequence[Hashable], relevant: Iterable[Hashable], k: int = 10) -> float:
    """Binary-gain nDCG@k with log2(rank + 1) discounts."""
    top, rel = _check(ranked, relevant, k)
    dcg = sum(1.0 / math.log2(i + 1) for i, d in enumerate(top, start=1) if d in rel)
    ideal = sum(1.0 / math.log2(i + 1) for i in range(1, min(k, len(rel)) + 1))
    return dcg / ideal


def reciprocal_rank(ranked: Sequence[Hashable], relevant: Iterable[Hashable], k: Optional[int] = None) -> float:
    """1 / rank of the first relevant item (within ``k`` when given), 0 when none."""
    top, rel = _check(ranked, relevant, k)
    for i, d in enumerate(top, start=1):
        if d in rel:
            return 1.0 / i
    return 0.0


Run = tuple[Sequence[Hashable], Iterable[Hashable]]  # (ranked ids, relevant ids) of one question


def _mean(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("no questions to average over")
    return float(sum(values) / len(values))


def mean_average_precision(runs: Sequence[Run], k: int = 10) -> float:
    """MAP@k over ``runs``: a sequence of ``(ranked, relevant)`` pairs, one per question."""
    return _mean([average_precision_at_k(r, g, k) for r, g in runs])


def mrr(runs: Sequence[Run], k: Optional[int] = None) -> float:
    """Mean reciprocal rank over ``(ranked, relevant)`` pairs."""
    return _mean([reciprocal_rank(r, g, k) for r, g in runs])


# --------------------------------------------------------------------------- snippets

_WORD = re.compile(r"[a-z0-9]+")


def _norm_text(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


@dataclass(frozen=True)
class SnippetRef:
    """A snippet for matching: document id, text and (optional) section + character span."""

    document_id: str
    text: str
    section: str = ""
    offset_begin: Optional[int] = None
    offset_end: Optional[int] = None


def snippets_overlap(a: Any, b: Any, min_overlap: float = 0.5) -> bool:
    """Whether two snippets (objects with ``document_id``, ``text`` and optional
    ``section``/``begin_section``, ``offset_begin``, ``offset_end``) overlap by the rule in the module docstring."""
    if str(a.document_id) != str(b.document_id):
        return False
    a0, a1, b0, b1 = (getattr(s, f"offset_{e}", None) for s in (a, b) for e in ("begin", "end"))
    if a0 is not None and a1 is not None and b0 is not None and b1 is not None:
        sec_a = getattr(a, "section", None) or getattr(a, "begin_section", "") or ""
        sec_b = getattr(b, "section", None) or getattr(b, "begin_section", "") or ""
        if not sec_a or not sec_b or sec_a == sec_b:
            return bool(max(a0, b0) < min(a1, b1))
        return False
    ta, tb = _norm_text(a.text), _norm_text(b.text)
    if not ta or not tb:
        return False
    if ta in tb or tb in ta:
        return True
    wa, wb = set(ta.split()), set(tb.split())
    return len(wa & wb) / min(len(wa), len(wb)) >= min_overlap


def match_snippets(retrieved: Sequence[Any], gold: Sequence[Any], min_overlap: float = 0.5) -> list:
    """Map each retrieved snippet to the index of the gold snippet it is credited with, or None.

    Greedy in rank order: a gold snippet is credited to the first retrieved
    snippet that overlaps it and is not available afterwards. The result can be
    fed to the id-based metrics: ranked = matched ids (misses get unique ids),
    relevant = ``range(len(gold))``.
    """
    used: set[int] = set()
    out: list = []
    for r in retrieved:
        credited = None
        for j, g in enumerate(gold):
            if j not in used and snippets_overlap(r, g, min_overlap):
                credited = j
                used.add(j)
                break
        out.append(credited)
    return out


def snippet_run(retrieved: Sequence[Any], gold: Sequence[Any], min_overlap: float = 0.5) -> Run:
    """``(ranked, relevant)`` ids for the id-based metrics from retrieved and gold snippets."""
    matched = match_snippets(retrieved, gold, min_overlap)
    ranked = [("gold", j) if j is not None else ("miss", i) for i, j in enumerate(matched)]
    return ranked, [("gold", j) for j in range(len(gold))]


def retrieval_scores(ranked: Sequence[Hashable], relevant: Iterable[Hashable], k: int = 10) -> dict[str, float]:
    """Per-question ``{"ap", "precision", "recall", "ndcg", "rr"}`` at ``k``."""
    relevant = list(relevant)
    return {
        "ap": average_precision_at_k(ranked, relevant, k),
        "precision": precision_at_k(ranked, relevant, k),
        "recall": recall_at_k(ranked, relevant, k),
        "ndcg": ndcg_at_k(ranked, relevant, k),
        "rr": reciprocal_rank(ranked, relevant, k),
    }


# --------------------------------------------------------------------------- BioASQ exact answers


def normalize_answer(text: Any) -> str:
    """Lower-case, collapse whitespace, strip surrounding spaces and trailing full stops."""
    return " ".join(str(text).lower().split()).rstrip(".").strip()


def yesno_scores(preds: Sequence[Optional[str]], golds: Sequence[str]) -> dict[str, float]:
    """Accuracy and macro F1 over the classes yes and no (BioASQ).

    A missing or unreadable prediction (None, "") counts as wrong. A class
    with no gold and no predicted instances has F1 0.
    """
    _same_length(preds, golds)
    p = [normalize_answer(x) if x is not None else "" for x in preds]
    g = [normalize_answer(x) for x in golds]
    bad = sorted({x for x in g if x not in ("yes", "no")})
    if bad:
        raise ValueError(f"yes/no golds must be 'yes' or 'no', got {bad}")
    accuracy = sum(a == b for a, b in zip(p, g)) / len(g)
    f1s = []
    for cls in ("yes", "no"):
        tp = sum(a == cls and b == cls for a, b in zip(p, g))
        predicted = sum(a == cls for a in p)
        actual = sum(b == cls for b in g)
        prec = tp / predicted if predicted else 0.0
        rec = tp / actual if actual else 0.0
        f1s.append(2 * prec * rec / (prec + rec) if prec + rec else 0.0)
    return {"accuracy": accuracy, "macro_f1": sum(f1s) / 2}


def _same_length(preds: Sequence, golds: Sequence) -> None:
    if isinstance(preds, str) or isinstance(golds, str):
        raise TypeError("preds and golds must be lists (one entry per question), not strings")
    if len(preds) != len(golds):
        raise ValueError(f"{len(preds)} predictions for {len(golds)} gold answers")
    if not golds:
        raise ValueError("no questions to score")


def _gold_set(synonym_lists: Sequence[Sequence[str]]) -> set[str]:
    if isinstance(synonym_lists, str):
        raise TypeError("a gold answer must be a list of synonym lists, not a string")
    out = set()
    for entry in synonym_lists:
        for s in [entry] if isinstance(entry, str) else entry:
            out.add(normalize_answer(s))
    return out


def factoid_scores(preds: Sequence[Sequence[str]], golds: Sequence[Sequence[Sequence[str]]]) -> dict[str, float]:
    """Strict accuracy (top-1), lenient accuracy (any of the top 5) and MRR (over the top 5).

    ``preds[i]``: ranked candidate answers (only the first five count);
    ``golds[i]``: list of synonym lists (any synonym of any entry is correct).
    """
    _same_length(preds, golds)
    strict = lenient = rr = 0.0
    for cands, gold in zip(preds, golds):
        if isinstance(cands, str):
            raise TypeError("each factoid prediction must be a list of candidates, not a string")
        g = _gold_set(gold)
        for rank, cand in enumerate(list(cands)[:5], start=1):
            if normalize_answer(cand) in g:
                strict += rank == 1
                lenient += 1
                rr += 1.0 / rank
                break
    n = len(golds)
    return {"strict": strict / n, "lenient": lenient / n, "mrr": rr / n}


def list_scores(preds: Sequence[Sequence[str]], golds: Sequence[Sequence[Sequence[str]]]) -> dict[str, float]:
    """Mean precision, recall and F1 over questions (BioASQ list questions).

    Precision: predicted items (deduplicated) that match a synonym of some gold
    entry, over the predicted items. Recall: gold entries matched by some
    prediction, over the gold entries. An empty prediction scores 0.
    """
    _same_length(preds, golds)
    ps, rs, fs = [], [], []
    for items, gold in zip(preds, golds):
        if isinstance(items, str):
            raise TypeError("each list prediction must be a list of items, not a string")
        pred = _unique(normalize_answer(x) for x in items if normalize_answer(x))
        entries = [_gold_set([e]) for e in gold]
        if not entries:
            raise ValueError("a list question has no gold entries")
        correct = sum(1 for x in pred if any(x in e for e in entries))
        found = sum(1 for e in entries if any(x in e for x in pred))
        p = correct / len(pred) if pred else 0.0
        r = found / len(entries)
        ps.append(p)
        rs.append(r)
        fs.append(2 * p * r / (p + r) if p + r else 0.0)
    return {"precision": _mean(ps), "recall": _mean(rs), "f1": _mean(fs)}


# --------------------------------------------------------------------------- ROUGE


def _rouge_tokens(text: str) -> list[str]:
    # rouge-score's tokenizer (lower-case, non-alphanumerics to spaces), so both
    # scores read the same tokens; no stemming, as in rouge-score's default.
    from rouge_score import tokenize

    return tokenize.tokenize(text, None)


def _f_measure(overlap: int, n_pred: int, n_ref: int) -> float:
    if overlap == 0 or n_pred == 0 or n_ref == 0:
        return 0.0
    p, r = overlap / n_pred, overlap / n_ref
    return 2 * p * r / (p + r)


def skip_bigrams(tokens: Sequence[str], max_gap: int = 4) -> Counter:
    """Ordered word pairs with at most ``max_gap`` words between them (ROUGE-1.5.5 ``-2 4``)."""
    out: Counter = Counter()
    for i in range(len(tokens)):
        for j in range(i + 1, min(len(tokens), i + max_gap + 2)):
            out[(tokens[i], tokens[j])] += 1
    return out


def rouge_su4_f(pred: str, ref: str) -> float:
    """ROUGE-SU4 F1: skip-bigrams (max gap 4) plus unigrams, clipped counts (ROUGE-1.5.5 ``-2 4 -u``)."""
    tp, tr = _rouge_tokens(pred), _rouge_tokens(ref)
    cp = skip_bigrams(tp) + Counter((t,) for t in tp)
    cr = skip_bigrams(tr) + Counter((t,) for t in tr)
    overlap = sum((cp & cr).values())
    return _f_measure(overlap, sum(cp.values()), sum(cr.values()))


def rouge_scores(pred: str, ref: str) -> dict[str, float]:
    """``{"rouge2_f", "rougesu4_f"}`` of a predicted ideal answer against one reference.

    ROUGE-2 comes from rouge-score; ROUGE-SU4 (which rouge-score lacks) is
    computed here on the same tokens. For several references take the max
    (BioASQ reports per-reference scores; :func:`rouge_best` does that).
    """
    if not isinstance(pred, str) or not isinstance(ref, str):
        raise TypeError("rouge_scores takes two strings")
    from rouge_score import rouge_scorer

    r2 = rouge_scorer.RougeScorer(["rouge2"], use_stemmer=False).score(ref, pred)["rouge2"].fmeasure
    return {"rouge2_f": float(r2), "rougesu4_f": rouge_su4_f(pred, ref)}


def rouge_best(pred: str, refs: Sequence[str]) -> dict[str, float]:
    """Best ROUGE-2 and ROUGE-SU4 F1 of ``pred`` over several references."""
    if not refs:
        raise ValueError("no reference answers")
    scores = [rouge_scores(pred, r) for r in refs]
    return {key: max(s[key] for s in scores) for key in ("rouge2_f", "rougesu4_f")}


# --------------------------------------------------------------------------- MedRGB


def accuracy(preds: Sequence[Optional[str]], golds: Sequence[str]) -> float:
    """Share of exact (case-insensitive) matches; MedRGB main accuracy over option letters."""
    _same_length(preds, golds)
    return sum(p is not None and normalize_answer(p) == normalize_answer(g) for p, g in zip(preds, golds)) / len(golds)


def insufficient_share(preds: Sequence[Optional[str]]) -> float:
    """Share of answers that are "insufficient information" (MedRGB sufficiency)."""
    if not preds:
        raise ValueError("no predictions")
    return sum(p is not None and normalize_answer(p) == INSUFFICIENT for p in preds) / len(preds)


def noise_detection_accuracy(
    predicted_noise: Sequence[Iterable[Hashable]],
    true_noise: Sequence[Iterable[Hashable]],
    documents: Sequence[Iterable[Hashable]],
) -> float:
    """Mean over questions of the share of documents labelled correctly as signal or noise.

    ``documents[i]``: the ids shown for question i; ``true_noise[i]`` and
    ``predicted_noise[i]``: the ids that are / are said to be noise. A document
    not said to be noise is taken as said to be signal.
    """
    _same_length(predicted_noise, true_noise)
    if len(documents) != len(true_noise):
        raise ValueError("one document list per question is needed")
    scores = []
    for pred, truth, docs in zip(predicted_noise, true_noise, documents):
        docs = list(docs)
        if not docs:
            raise ValueError("a question has no documents to label")
        pred, truth = set(pred), set(truth)
        scores.append(sum((d in pred) == (d in truth) for d in docs) / len(docs))
    return _mean(scores)


def sub_answer_exact_match(preds: Sequence[Sequence[Optional[str]]], golds: Sequence[Sequence[str]]) -> float:
    """Mean over all sub-questions of normalised exact match (MedRGB integration).

    A missing predicted sub-answer (shorter list, None) counts as wrong.
    """
    _same_length(preds, golds)
    total = hits = 0
    for p, g in zip(preds, golds):
        p = list(p)
        for j, gold in enumerate(g):
            total += 1
            if j < len(p) and p[j] is not None and normalize_answer(p[j]) == normalize_answer(gold):
                hits += 1
    if total == 0:
        raise ValueError("no sub-questions to score")
    return hits / total


JUDGE_VALUES = (0.0, 0.5, 1.0)


def judge_score(scores: Sequence[float]) -> float:
    """Mean LLM-judge score; each score must be 1 (correct), 0.5 (partly) or 0 (wrong)."""
    if not scores:
        raise ValueError("no judge scores")
    bad = [s for s in scores if s not in JUDGE_VALUES]
    if bad:
        raise ValueError(f"judge scores must be 0, 0.5 or 1, got {bad[:5]}")
    return float(sum(scores) / len(scores))


def fact_detection_rate(detected: Sequence[Iterable[Hashable]], counterfactual: Sequence[Iterable[Hashable]]) -> float:
    """Share of counterfactual documents the model flagged (pooled over questions, MedRGB robustness).

    ``counterfactual[i]``: ids of the documents with planted factual errors;
    ``detected[i]``: ids the model said contain errors. Flags on correct
    documents do not count here (see :func:`false_alarm_rate`).
    """
    _same_length(detected, counterfactual)
    total = sum(len(set(c)) for c in counterfactual)
    if total == 0:
        raise ValueError("no counterfactual documents to detect")
    return sum(len(set(d) & set(c)) for d, c in zip(detected, counterfactual)) / total


def false_alarm_rate(
    detected: Sequence[Iterable[Hashable]],
    counterfactual: Sequence[Iterable[Hashable]],
    documents: Sequence[Iterable[Hashable]],
) -> Optional[float]:
    """Share of factually correct documents wrongly flagged; None when every document was counterfactual."""
    _same_length(detected, counterfactual)
    correct = flagged = 0
    for d, c, docs in zip(detected, counterfactual, documents):
        ok = set(docs) - set(c)
        correct += len(ok)
        flagged += len(set(d) & ok)
    return flagged / correct if correct else None


def mean_or_none(values: Iterable[Optional[float]]) -> Optional[float]:
    """Mean of the values that are not None; None when there are none."""
    vals = [v for v in values if v is not None]
    return float(sum(vals) / len(vals)) if vals else None


def summarize(values: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """Means of named per-question score lists (for report rows)."""
    return {name: _mean(list(v)) for name, v in values.items()}
