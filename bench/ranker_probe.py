"""Probe: what a re-ordering of the fused candidates can reach across BioASQ years, and with which ranker.

    python bench/ranker_probe.py [--work /tmp/q17/work] [--encoder default|minilm|DIR]
                                                            (needs scikit-learn; not a dependency of the package)

Each year's closed corpus (``bench/retrieval.py``'s, reused from ``--work``, encoded with ``--encoder``) is searched
with every question of that year; each question's fused candidates get the encoder-matched ranker features
(``retrieval.ranker``) exactly as search computes them. A ranker fitted on one year's rows re-orders the other year's
candidates, and the distinct documents of that order, cut to 10, give document MAP@10:

- the fused order, the shipped linear recipe (``LinearRanker``, ``DEFAULT_L2``);
- the same linear model fitted on pairs (a relevant against a non-relevant candidate of one question) instead of
  single candidates;
- one linear model per BioASQ question type (the gold type: an upper bound for a detected one);
- the linear model with three candidate-coherence features added (cosine to the fused top 5, its best over the
  document's chunks, cosine to the top 5's centroid: do the other strong candidates vouch for this one?);
- gradient-boosted trees alone and with their logits added to the linear model's.

Then upper bounds that no ranker fitted on another year can pass: the linear and the quadratic (every pairwise
product) model fitted on the test year's own labels and measured on the same rows, and the ceiling (every relevant
candidate first).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import retrieval as bench  # noqa: E402  (bench/retrieval.py: corpora, questions, metrics)

QUESTION_TYPES = ("yesno", "factoid", "list", "summary")
COHERENCE_TOP = 5


def candidate_groups(encoder: str, work: Path, year: str, columns: list) -> List[dict]:
    """Per question of ``year`` with a relevant document in its corpus: its candidates' ranker features ``X``
    [n, F], unit vectors ``V`` [n, d] (fused order), document ids, relevance labels ``y`` and question type."""
    from medretrieve.retrieval.budget import Deadline
    from medretrieve.retrieval.query import Query
    from medretrieve.retrieval.ranker import FEATURES
    from medretrieve.retrieval.results import StageLog
    from medretrieve.retrieval.retriever import Retriever

    col = bench.build_bioasq_collection(encoder, work, year)
    ret = Retriever(col, ranker=None)
    in_corpus = {r.document_id for r in col.rows}
    out = []
    for q in bench.load_questions(year):
        relevant = q["docs"] & in_corpus
        if not relevant:
            continue
        deadline = Deadline(None)
        query = Query.analyse(q["body"])
        cands = ret.candidates.gather(query, 10, deadline, StageLog(deadline), ranked=True)
        rows = cands.fused_ids.tolist()
        docs = [col.rows[r].document_id for r in rows]
        out.append({"X": ret.reranker.features(query, cands, rows, FEATURES)[:, columns],
                    "V": np.asarray(col.vectors(rows), dtype=np.float32), "docs": docs, "relevant": relevant,
                    "y": np.array([d in relevant for d in docs], dtype=float), "type": q["type"]})
    return out


def mean_map(groups: List[dict], score: Callable[[dict], np.ndarray]) -> float:
    aps = []
    for g in groups:
        order = np.argsort(-score(g), kind="stable")
        aps.append(bench._metrics(list(dict.fromkeys(g["docs"][i] for i in order))[:10], g["relevant"])["MAP@10"])
    return float(np.mean(aps))


def coherence(g: dict) -> np.ndarray:
    """[n, 3]: mean cosine to the fused top ``COHERENCE_TOP`` (itself left out), the best of that over its
    document's candidates, cosine to the top's centroid."""
    V = g["V"]
    top = V[:COHERENCE_TOP]
    sims = V @ top.T
    own = np.zeros_like(sims)
    m = min(len(V), COHERENCE_TOP)
    own[np.arange(m), np.arange(m)] = 1.0
    count = np.maximum(top.shape[0] - own.sum(axis=1), 1.0)
    mean = ((sims * (1.0 - own)).sum(axis=1) / count).astype(np.float64)
    best: Dict[str, float] = {}
    for d, v in zip(g["docs"], mean):
        best[d] = max(best.get(d, -np.inf), float(v))
    centroid = top.mean(axis=0)
    centroid /= max(float(np.linalg.norm(centroid)), 1e-12)
    return np.column_stack([mean, [best[d] for d in g["docs"]], V @ centroid])


def stack(groups: List[dict], extra: bool = False) -> tuple:
    X = np.vstack([np.hstack([g["X"], coherence(g)]) if extra else g["X"] for g in groups])
    return X, np.concatenate([g["y"] for g in groups])


def pairs(groups: List[dict], per_question: int = 200, seed: int = 0) -> tuple:
    """Differences of a relevant and a non-relevant candidate of one question, each pair once in each sign."""
    rng = np.random.default_rng(seed)
    diffs = []
    for g in groups:
        pos, neg = np.flatnonzero(g["y"] == 1), np.flatnonzero(g["y"] == 0)
        if len(pos) and len(neg):
            diffs.append(g["X"][rng.choice(pos, per_question)] - g["X"][rng.choice(neg, per_question)])
    D = np.vstack(diffs)
    return np.vstack([D, -D]), np.r_[np.ones(len(D)), np.zeros(len(D))]


def cross_year(train: List[dict], test: List[dict]) -> Dict[str, float]:
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression

    from medretrieve.retrieval.ranker import DEFAULT_L2, MATCHED_FEATURES, LinearRanker

    X, y = stack(train)
    linear = LinearRanker.fit(X, y, MATCHED_FEATURES, l2=DEFAULT_L2)
    pairwise = LinearRanker.fit(*pairs(train), MATCHED_FEATURES, l2=DEFAULT_L2)
    per_type = {t: LinearRanker.fit(*stack([g for g in train if g["type"] == t]), MATCHED_FEATURES, l2=DEFAULT_L2)
                for t in QUESTION_TYPES}
    Xc, yc = stack(train, extra=True)
    mean, scale = Xc.mean(axis=0), Xc.std(axis=0) + 1e-9
    # LinearRanker reads only its named features, so the coherence model is sklearn's logistic regression with
    # the same standardisation and penalty (C = 1 / l2).
    with_coherence = LogisticRegression(C=1.0 / DEFAULT_L2, max_iter=5000).fit((Xc - mean) / scale, yc)
    rows = {"fused order": mean_map(test, lambda g: -np.arange(len(g["docs"]), dtype=float)),
            "linear (the shipped recipe)": mean_map(test, lambda g: linear.logits(g["X"])),
            "linear, fitted on pairs": mean_map(test, lambda g: pairwise.logits(g["X"])),
            "one linear model per question type (gold type)": mean_map(
                test, lambda g: per_type[g["type"]].logits(g["X"])),
            "linear + 3 coherence features": mean_map(test, lambda g: with_coherence.decision_function(
                (np.hstack([g["X"], coherence(g)]) - mean) / scale))}
    for depth, trees, lr in ((3, 100, 0.05), (4, 200, 0.05), (6, 300, 0.03)):
        gbdt = HistGradientBoostingClassifier(max_depth=depth, max_iter=trees, learning_rate=lr,
                                              l2_regularization=1.0, min_samples_leaf=50, early_stopping=False,
                                              random_state=0).fit(X, y)
        rows[f"trees (depth {depth}, {trees}, lr {lr})"] = mean_map(test, lambda g: gbdt.decision_function(g["X"]))
        rows[f"linear + trees (depth {depth}), logits summed"] = mean_map(
            test, lambda g: linear.logits(g["X"]) + gbdt.decision_function(g["X"]))
    return rows


def upper_bounds(test: List[dict]) -> Dict[str, float]:
    from sklearn.linear_model import LogisticRegression

    from medretrieve.retrieval.ranker import DEFAULT_L2, MATCHED_FEATURES, LinearRanker

    X, y = stack(test)
    linear = LinearRanker.fit(X, y, MATCHED_FEATURES, l2=DEFAULT_L2)
    mean, scale = X.mean(axis=0), X.std(axis=0) + 1e-9
    upper = np.triu_indices(X.shape[1])

    def quadratic(Z: np.ndarray) -> np.ndarray:
        Z = (Z - mean) / scale
        return np.hstack([Z, (Z[:, :, None] * Z[:, None, :])[:, upper[0], upper[1]]])

    quad = LogisticRegression(C=10.0, max_iter=5000).fit(quadratic(X), y)
    return {"linear, fitted on the test year itself": mean_map(test, lambda g: linear.logits(g["X"])),
            "quadratic, fitted on the test year itself": mean_map(
                test, lambda g: quad.decision_function(quadratic(g["X"]))),
            "ceiling (relevant candidates first)": mean_map(test, lambda g: g["y"] - 1e-6 * np.arange(len(g["y"])))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", default="/tmp/medretrieve-bench-retrieval")
    p.add_argument("--encoder", default="default",
                   help="default | minilm | a model directory (the corpora under --work must be encoded with it)")
    a = p.parse_args()
    try:
        import sklearn  # noqa: F401
    except ImportError:
        sys.exit("this probe needs scikit-learn (pip install scikit-learn)")
    from medretrieve.retrieval.ranker import FEATURES, MATCHED_FEATURES

    columns = [FEATURES.index(f) for f in MATCHED_FEATURES]
    t0 = time.perf_counter()
    encoder = bench._encoder_dir(a.encoder)
    data = {y: candidate_groups(encoder, Path(a.work), y, columns) for y in ("7B", "12B")}
    print(f"features in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    for train, test in (("7B", "12B"), ("12B", "7B")):
        print(f"\nfitted on {train} ({len(data[train])} questions, {sum(len(g['y']) for g in data[train])} rows), "
              f"measured on {test} ({len(data[test])} questions): document MAP@10\n")
        print("| ranker | doc MAP@10 |\n|---|---|")
        for name, v in {**cross_year(data[train], data[test]), **upper_bounds(data[test])}.items():
            print(f"| {name} | {v:.4f} |")


if __name__ == "__main__":
    main()
