"""Fitting the learned ranker (:class:`~medretrieve.retrieval.learned_ranker.LinearRanker`) on training questions.

Each training question is searched with the retriever itself (no deadline, no reranking), and every fused
candidate becomes a row of features exactly as search computes them: positive when its document is relevant.
Questions whose candidates hold no relevant document teach nothing and are skipped.

:func:`fit_ranker` fits one ranker for one collection; :func:`fit_default_bundle` fits the shipped default
(:mod:`medretrieve.retrieval.shipped_ranker`: an encoder-matched and a portable ranker) on several collections at
once, each with its own questions.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple, Union

import numpy as np

from ..outbound import Deadline
from ..retrieval.shipped_ranker import RankerBundle, default_bundle, choose, encoder_fingerprints
from ..retrieval.expansion import training_pairs
from ..retrieval.query import Query
from ..retrieval.learned_ranker import DEFAULT_L2, FEATURES, MATCHED_FEATURES, PORTABLE_FEATURES, LinearRanker
from ..retrieval.results import StageLog


@dataclass
class RankerRows:
    """Feature rows (all of :data:`~medretrieve.retrieval.learned_ranker.FEATURES`) of one collection's training
    questions: ``X`` [n, F], ``y`` (1 = the candidate's document is relevant), and the counts of questions
    ``given``, ``matched`` (a relevant document is in the collection) and ``used`` (one is among the candidates)."""

    X: np.ndarray
    y: np.ndarray
    given: int
    matched: int
    used: int

    def columns(self, names: Sequence[str]) -> np.ndarray:
        return self.X[:, [FEATURES.index(n) for n in names]]


def ranker_rows(retriever: Any, examples: Any, progress: bool = False) -> RankerRows:
    """The training rows of ``examples`` on ``retriever``'s collection (see the module docstring).

    ``examples``: a :class:`~medretrieve.retrieval.expansion.TrainingMemory`, BioASQ golden files, or
    ``(question, relevant document ids)`` pairs. The candidates are gathered as a search with a learned ranker
    gathers them. ValueError when no question can be used.
    """
    from tqdm import tqdm

    pairs = training_pairs(examples)
    if not pairs:
        raise ValueError("fitting a ranker needs at least one training question")
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
        scope = retriever.scope()
        cands = retriever.candidates.gather(scope, query, 10, dl, StageLog(dl), ranked=True)
        rows = cands.fused_ids.tolist()
        labels = [rows_of[r].document_id in relevant for r in rows]
        if not any(labels):
            continue
        X.append(retriever.reranker.features(scope, query, cands, rows, FEATURES))
        y.append(np.asarray(labels, dtype=np.float64))
    if not X:
        raise ValueError(f"no training question has a relevant document among its candidates ({matched} of "
                         f"{len(pairs)} have a relevant document in the collection: do the training files match it?)")
    return RankerRows(np.vstack(X), np.concatenate(y), len(pairs), matched, len(X))


def fit_ranker(retriever: Any, examples: Any, l2: float = DEFAULT_L2, progress: bool = False,
               prior: Union[LinearRanker, str, None] = None,
               features: Sequence[str] = MATCHED_FEATURES) -> LinearRanker:
    """Fit a ranker on training questions and install it on ``retriever`` (``retriever.ranker``).

    ``examples`` as in :func:`ranker_rows`. ``l2``: the penalty on the standardised weights (default
    :data:`~medretrieve.retrieval.learned_ranker.DEFAULT_L2`). ``prior``: a ranker to adapt instead of fitting from
    scratch (``LinearRanker.fit(prior=)``; ``"default"``: the shipped default's ranker for this collection; its
    features are then the prior's). ``features``: what the ranker reads (default the 13 encoder-matched ones;
    :data:`~medretrieve.retrieval.learned_ranker.PORTABLE_FEATURES` for a ranker meant for other encoders too).
    Returns the ranker (save it with ``ranker.save(path)``); its ``info`` says how many questions there were
    (``given``), how many have a relevant document in the collection (``matched``) and how many had one among
    their candidates and were used (``questions``), and the encoder it was fitted with. A failed fit leaves the
    retriever's ranker as it was; ValueError when no question can be used.
    """
    if isinstance(prior, str):
        if prior != "default":
            raise ValueError(f"prior must be a LinearRanker, 'default' or None, got {prior!r}")
        prior = choose(default_bundle(), retriever.collection)[0]
    if prior is not None:
        features = prior.features
    data = ranker_rows(retriever, examples, progress)
    article, query = encoder_fingerprints(retriever.collection)
    info: Dict[str, Any] = {"questions": data.used, "skipped": data.given - data.used, "given": data.given,
                            "matched": data.matched, "encoder_sha256": article, "query_encoder_sha256": query}
    if prior is not None:
        info["adapted_from"] = dict(prior.info)
    ranker = LinearRanker.fit(data.columns(features), data.y, tuple(features), l2=l2, info=info, prior=prior)
    retriever.ranker = ranker
    return ranker


def fit_default_bundle(sets: Sequence[Tuple[Any, Any, str]], l2: float = DEFAULT_L2,
                       progress: bool = False) -> RankerBundle:
    """Fit the default ranker bundle on several collections: ``sets`` holds ``(retriever, examples, name)``,
    each retriever over its own collection, ``name`` recorded in the bundle's ``training``. Every collection must
    be encoded with the same encoder (the one the ``matched`` ranker is for); ValueError otherwise."""
    if not sets:
        raise ValueError("fit_default_bundle needs at least one (retriever, examples, name) set")
    parts: List[RankerRows] = []
    training: Dict[str, Any] = {"sets": [], "l2": float(l2)}
    fingerprints = set()
    for retriever, examples, name in sets:
        data = ranker_rows(retriever, examples, progress)
        parts.append(data)
        fingerprints.add(encoder_fingerprints(retriever.collection))
        training["sets"].append({"name": name, "questions_given": data.given, "questions_matched": data.matched,
                                 "questions_used": data.used, "rows": int(len(data.y)),
                                 "positives": int(data.y.sum())})
    if len(fingerprints) != 1 or None in next(iter(fingerprints)):
        raise ValueError(f"the collections must share one recorded encoder (article and query), got {fingerprints}")
    sha = next(iter(fingerprints))[0]
    X = np.vstack([p.X for p in parts])
    y = np.concatenate([p.y for p in parts])
    from ..models.encoders import read_manifest

    model = read_manifest(sets[0][0].collection.query_encoder_dir)
    encoder = {"sha256": sha, "source": model.source, "dim": model.dim}
    fits = {}
    for kind, feats in (("matched", MATCHED_FEATURES), ("portable", PORTABLE_FEATURES)):
        cols = [FEATURES.index(f) for f in feats]
        fits[kind] = LinearRanker.fit(X[:, cols], y, feats, l2=l2, info={"kind": kind})
    return RankerBundle(fits["matched"], fits["portable"], encoder, training)
