"""Probe: a non-linear ranker (gradient-boosted trees) over the learned ranker's features, across BioASQ years.

    python bench/ranker_probe.py [--work /tmp/q17/work]    (needs scikit-learn; not a dependency of the package)

Each year's closed corpus (``bench/retrieval.py``'s, reused from ``--work``) is searched with every question of that
year; each question's fused candidates get the encoder-matched ranker features (``retrieval.ranker``) exactly as
search computes them. A ranker fitted on one year's rows re-orders the other year's candidates, and the distinct
documents of that order, cut to 10, give document MAP@10: the fused order, the shipped linear recipe
(``LinearRanker``, ``DEFAULT_L2``), gradient-boosted trees alone, and the sum of the linear and the tree logits.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import retrieval as bench  # noqa: E402  (bench/retrieval.py: corpora, questions, metrics)


def candidate_groups(encoder: str, work: Path, year: str, columns: list) -> list:
    """(features [n, F], candidate document ids, relevant ids) per question of ``year`` with a relevant document
    in its corpus."""
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
        X = ret.reranker.features(query, cands, rows, FEATURES)[:, columns]
        out.append((X, [col.rows[r].document_id for r in rows], relevant))
    return out


def mean_map(groups: list, score) -> float:
    aps = []
    for X, docs, relevant in groups:
        order = np.argsort(-score(X), kind="stable")
        aps.append(bench._metrics(list(dict.fromkeys(docs[i] for i in order))[:10], relevant)["MAP@10"])
    return float(np.mean(aps))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", default="/tmp/medretrieve-bench-retrieval")
    a = p.parse_args()
    try:
        from sklearn.ensemble import HistGradientBoostingClassifier
    except ImportError:
        sys.exit("this probe needs scikit-learn (pip install scikit-learn)")
    from medretrieve.models.encoders import default_model_dir
    from medretrieve.retrieval.ranker import DEFAULT_L2, FEATURES, MATCHED_FEATURES, LinearRanker

    columns = [FEATURES.index(f) for f in MATCHED_FEATURES]
    t0 = time.perf_counter()
    data = {y: candidate_groups(str(default_model_dir()), Path(a.work), y, columns) for y in ("7B", "12B")}
    print(f"features in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    for train, test in (("7B", "12B"), ("12B", "7B")):
        X = np.vstack([g[0] for g in data[train]])
        y = np.concatenate([[d in rel for d in docs] for _, docs, rel in data[train]]).astype(float)
        linear = LinearRanker.fit(X, y, MATCHED_FEATURES, l2=DEFAULT_L2)
        rows = {"fused order": mean_map(data[test], lambda Z: -np.arange(len(Z))),
                "linear (the shipped recipe)": mean_map(data[test], linear.logits)}
        for depth, trees, lr in ((3, 100, 0.05), (4, 200, 0.05), (6, 300, 0.03)):
            gbdt = HistGradientBoostingClassifier(max_depth=depth, max_iter=trees, learning_rate=lr,
                                                  l2_regularization=1.0, min_samples_leaf=50, early_stopping=False,
                                                  random_state=0).fit(X, y)
            rows[f"trees (depth {depth}, {trees}, lr {lr})"] = mean_map(
                data[test], lambda Z: gbdt.decision_function(Z))
            rows[f"linear + trees (depth {depth}), logits summed"] = mean_map(
                data[test], lambda Z: linear.logits(Z) + gbdt.decision_function(Z))
        print(f"\nfitted on {train} ({len(data[train])} questions, {len(y)} rows), measured on {test} "
              f"({len(data[test])} questions): document MAP@10\n")
        print("| ranker | doc MAP@10 |\n|---|---|")
        for name, v in rows.items():
            print(f"| {name} | {v:.4f} |")


if __name__ == "__main__":
    main()
