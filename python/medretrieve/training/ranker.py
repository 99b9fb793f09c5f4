"""Fitting the learned ranker (:class:`~medretrieve.retrieval.ranker.LinearRanker`) on training questions.

Each training question is searched with the retriever itself (no deadline, no reranking), and every fused
candidate becomes a row of features exactly as search computes them: positive when its document is relevant.
Questions whose candidates hold no relevant document teach nothing and are skipped.
"""
from __future__ import annotations

from typing import Any, List

import numpy as np

from ..retrieval.budget import Deadline
from ..retrieval.expansion import training_pairs
from ..retrieval.query import Query
from ..retrieval.ranker import FEATURES, LinearRanker
from ..retrieval.results import StageLog


def fit_ranker(retriever: Any, examples: Any, l2: float = 1.0, progress: bool = False) -> LinearRanker:
    """Fit a ranker on training questions and install it on ``retriever`` (``retriever.ranker``).

    ``examples``: a :class:`~medretrieve.retrieval.expansion.TrainingMemory`, BioASQ golden files, or
    ``(question, relevant document ids)`` pairs. The candidates are gathered as a search with a learned ranker
    gathers them. Returns the ranker (save it with ``ranker.save(path)``); its ``info`` says how many questions
    there were (``given``), how many have a relevant document in the collection (``matched``) and how many had
    one among their candidates and were used (``questions``). A failed fit leaves the retriever's ranker as it
    was; ValueError when no question can be used.
    """
    from tqdm import tqdm

    pairs = training_pairs(examples)
    if not pairs:
        raise ValueError("fit_ranker needs at least one training question")
    X: List[np.ndarray] = []
    y: List[np.ndarray] = []
    col = retriever.collection
    rows_of = col.rows
    matched = 0
    for question, relevant in tqdm(pairs, desc="ranker features", disable=not progress):
        if not question.strip() or not any(col.document_rows(d) for d in relevant):
            continue  # nothing to learn: no relevant document in this collection
        matched += 1
        dl = Deadline(None)
        query = Query.analyse(question)
        cands = retriever.candidates.gather(query, 10, dl, StageLog(dl), ranked=True)
        rows = cands.fused_ids.tolist()
        labels = [rows_of[r].document_id in relevant for r in rows]
        if not any(labels):
            continue
        X.append(retriever.reranker.features(query, cands, rows, FEATURES))
        y.append(np.asarray(labels, dtype=np.float64))
    if not X:
        raise ValueError(f"no training question has a relevant document among its candidates ({matched} of "
                         f"{len(pairs)} have a relevant document in the collection: do the training files match it?)")
    ranker = LinearRanker.fit(np.vstack(X), np.concatenate(y), FEATURES, l2=l2,
                              info={"questions": len(X), "skipped": len(pairs) - len(X), "given": len(pairs),
                                    "matched": matched})
    retriever.ranker = ranker
    return ranker
