"""MedCPT fidelity: does a collection built with a query/article pair score what the towers score?

A tiny random BERT pair is exported MedCPT-style (CLS pooling, no normalisation) and a collection of 400 generated
documents is built with ``--encoder ARTICLE --query-encoder QUERY`` (float32 and int8 storage). For 50 generated
questions the dense first-stage scores (``Hit.scores["dense"]``, top 10) are compared with the raw inner products
of the two towers computed in float64 with torch (``tests/support/encoder_fixtures.torch_reference``):

- max |score - reference| / max |reference| over the hits;
- top-10 agreement of the search with the exact float64 top 10.

(A random tiny BERT's [CLS] vectors all have the same norm, sqrt(hidden), its last LayerNorm being untrained, so
this pair cannot show how normalising would reorder a trained MedCPT's results; it checks the scores themselves.)

Usage: ``MEDRETRIEVE_CORE_DIR=build/dev PYTHONPATH=python:tests/support nice python bench/medcpt_geometry.py``
(needs torch + transformers: the ``export`` extra). Prints a markdown table for bench/RESULTS.md.
"""
from __future__ import annotations

import random
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from encoder_fixtures import _WORDS, export_tiny, torch_reference  # noqa: E402

from medretrieve.corpus.collection import Collection  # noqa: E402
from medretrieve.retrieval.retriever import Retriever  # noqa: E402

N_DOCS, N_QUESTIONS, K = 400, 50, 10


def main() -> None:
    rng = random.Random(0)
    words = [w for w in _WORDS if w.isalpha()]
    docs = [{"id": str(i), "title": " ".join(rng.sample(words, 3)), "text": " ".join(rng.sample(words, 25)) + "."}
            for i in range(N_DOCS)]
    questions = [" ".join(rng.sample(words, 6)) for _ in range(N_QUESTIONS)]
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        query, article = export_tiny(t, "query", seed=3), export_tiny(t, "article", seed=4)
        q = torch_reference(t / "tiny-query-json-hf-3", "query", questions, max_length=64).astype(np.float64)
        a = torch_reference(t / "tiny-article-json-hf-4", "article", [(d["title"], d["text"]) for d in docs]
                            ).astype(np.float64)
        ref = q @ a.T  # [questions, docs], the towers' raw inner products
        exact_top = [set(np.argsort(-row, kind="stable")[:K].tolist()) for row in ref]
        rows = []
        for dtype in ("float32", "int8"):
            col = Collection.build(docs, t / f"col-{dtype}", encoder=article, query_encoder=query, dtype=dtype,
                                   progress=False)
            ret = Retriever(col, warmup=False)
            errs, agree = [], []
            for i, question in enumerate(questions):
                res = ret.search(question, k=K, deadline_ms=None, rerank=False, diversify=False, recover=False,
                                 lexical=False, expand=False, feedback=False)
                got = {int(h.document_id): h.scores["dense"] for h in res.hits}
                scale = float(np.abs(ref[i]).max())
                errs.append(max(abs(s - ref[i][d]) for d, s in got.items()) / scale)
                agree.append(len(set(got) & exact_top[i]) / K)
            rows.append([f"collection, {dtype} storage", f"{max(errs):.2e}", f"{np.mean(agree):.3f}"])
    print(f"{N_DOCS} documents, {N_QUESTIONS} questions, tiny random BERT pair (CLS, raw inner products)\n")
    print(f"| scores | max relative error vs float64 towers | top-{K} agreement with the towers |")
    print("| --- | ---: | ---: |")
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
