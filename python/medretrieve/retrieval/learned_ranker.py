"""The learned ranker: a logistic model over cheap relevance signals, fitted on training questions.

Without a trained cross-encoder the fused RRF rank is the strongest single signal, but the
retrievers' raw scores, the question's idf-weighted term coverage, pseudo-relevance feedback and
document-level agreement each carry evidence the rank throws away. :class:`LinearRanker` weighs
them: ``p(relevant) = sigmoid(bias + w . (x - mean) / scale)`` over the features in
:data:`FEATURES`, fitted by L2-regularised logistic regression (Newton's method, NumPy only) on
questions with known relevant documents (e.g. BioASQ golden files; a candidate chunk is a positive
when its document is relevant). ``medretrieve.training.fit_ranker`` builds the training set from the
retriever's own candidates, so the model learns the signals exactly as search computes them.

Features of one candidate chunk (computed by ``retrieval.rerank``; all cheap, no model call):

=============  ===================================================================================
rrf            fused RRF score / the best fused score
log_rank       log(1 + fused rank), rank 0 first
dense          inner product of the question vector and the chunk's stored vector (a cosine with a
               normalising encoder, MedCPT's raw score otherwise: fit a ranker per geometry)
dense_gap      dense - the best dense among the candidates
bm25           BM25 score of the question / the best among the candidates
feedback       inner product with the pseudo-relevance-feedback vector (``candidates.feedback_vector``,
               on the ``dense`` scale)
coverage       idf-weighted share of the question's content terms in the chunk (an abbreviation also
               matches its expansion)
doc_coverage   the same over the chunk's whole document (up to 64 chunks)
doc_dense      best ``dense`` among the document's candidate chunks
doc_bm25       best ``bm25`` among the document's candidate chunks
doc_count      number of the document's chunks among the top 30 fused candidates
entity         share of the question's entity-like tokens (IL-6, BRCA1) found in the chunk
doc_subject    share of the question's subject words (``retrieval.query``: outside BERT's
               general-English WordPiece vocabulary, weighted by their piece count) found in the
               chunk's document (``doc_coverage`` when the question has none). Why: in a collection
               built around a topic, the question's subject ("motolimod") is common and its idf low,
               so ``coverage`` prefers a document matching "mechanism of action" about another drug
dense_rank     log(1 + rank of ``dense`` among the candidates), 0 for the best
feedback_rank  log(1 + rank of ``feedback`` among the candidates)
doc_dense_rank log(1 + rank of ``doc_dense`` among the candidates)
=============  ===================================================================================

Encoder scale: ``dense``, ``dense_gap``, ``feedback`` and ``doc_dense`` are raw similarities, whose scale is the
encoder's (cosines of a normalised MiniLM, inner products of ~60-70 for MedCPT), so a ranker fitted with one
encoder misreads them with another. The :data:`PORTABLE_FEATURES` read the vectors only through ranks and work
with any encoder; the shipped default ranker (``retrieval.shipped_ranker``) uses them whenever the collection's
encoder is not the one it was fitted with.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, Sequence, Tuple, Union

import numpy as np

from .._files import read_format_json, write_json_atomic

__all__ = ["FEATURES", "PORTABLE_FEATURES", "MATCHED_FEATURES", "ENCODER_SCALED", "DEFAULT_L2",
           "LinearRanker"]

FEATURES: Tuple[str, ...] = ("rrf", "log_rank", "dense", "dense_gap", "bm25", "feedback", "coverage",
                             "doc_coverage", "doc_dense", "doc_bm25", "doc_count", "entity", "doc_subject",
                             "dense_rank", "feedback_rank", "doc_dense_rank")
# what a ranker fitted with one encoder reads the same way with another (module docstring, "Encoder scale")
ENCODER_SCALED: Tuple[str, ...] = ("dense", "dense_gap", "feedback", "doc_dense")
# the features rankers are fitted on by default: not the feedback ones, since the feedback stage is off when a
# learned ranker is in use (Settings.feedback), and a ranker fitted without it would misread them when a user turns
# it on; the ranks added nothing on top of the raw similarities in the cross-year runs (bench/RESULTS.md)
MATCHED_FEATURES: Tuple[str, ...] = tuple(f for f in FEATURES[:13] if f != "feedback")
PORTABLE_FEATURES: Tuple[str, ...] = tuple(f for f in FEATURES if f not in ENCODER_SCALED and f != "feedback_rank")
# L2 penalty on the standardised weights: strong, because the signals' distributions shift between collections
# and a weakly penalised fit follows the training collection's quirks (cross-year runs in bench/RESULTS.md)
DEFAULT_L2 = 300.0
FORMAT = "medretrieve-ranker-1"


@dataclass
class LinearRanker:
    """Logistic relevance model over :data:`FEATURES` (see module docstring).

    ``mean`` / ``scale`` standardise the features; ``info`` records how the model was fitted
    (questions, positives, regularisation), so a saved ranker says where it came from.
    """

    features: Tuple[str, ...]
    weights: np.ndarray
    bias: float
    mean: np.ndarray
    scale: np.ndarray
    info: Dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.features = tuple(self.features)
        unknown = [f for f in self.features if f not in FEATURES]
        if unknown:
            raise ValueError(f"unknown ranker features {unknown}; known: {list(FEATURES)}")
        self.weights = np.asarray(self.weights, dtype=np.float64).reshape(-1)
        self.mean = np.asarray(self.mean, dtype=np.float64).reshape(-1)
        self.scale = np.asarray(self.scale, dtype=np.float64).reshape(-1)
        n = len(self.features)
        if not (len(self.weights) == len(self.mean) == len(self.scale) == n):
            raise ValueError(f"{n} features but {len(self.weights)} weights, {len(self.mean)} means, "
                             f"{len(self.scale)} scales")
        if not (np.isfinite(self.weights).all() and np.isfinite(self.mean).all()
                and np.isfinite(self.scale).all() and np.isfinite(self.bias)) or (self.scale <= 0).any():
            raise ValueError("ranker weights, means and scales must be finite, scales > 0")
        self.bias = float(self.bias)

    # ------------------------------------------------------------- scoring
    def logits(self, X: np.ndarray) -> np.ndarray:
        """Log-odds of relevance for the rows of ``X`` [n, len(features)]."""
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != len(self.features):
            raise ValueError(f"expected a feature matrix [n, {len(self.features)}], got shape {X.shape}")
        return self.bias + ((X - self.mean) / self.scale) @ self.weights

    def score(self, X: np.ndarray) -> np.ndarray:
        """Probability of relevance (0..1) for the rows of ``X``."""
        return 1.0 / (1.0 + np.exp(-np.clip(self.logits(X), -30, 30)))

    # ------------------------------------------------------------- fitting
    @classmethod
    def fit(cls, X: np.ndarray, y: np.ndarray, features: Sequence[str] = FEATURES, l2: float = 1.0,
            max_iter: int = 50, info: Dict[str, Any] | None = None,
            prior: "LinearRanker | None" = None) -> "LinearRanker":
        """L2-regularised logistic regression by Newton's method on standardised features.

        ``l2`` is the penalty on the standardised weights (the bias is not penalised). With a ``prior`` ranker
        (e.g. the shipped default) the fit *adapts* it: ``features`` must be the prior's, the features are
        standardised with the prior's mean and scale, and the penalty pulls the weights towards the prior's
        instead of towards 0, so a few training questions move it a little and many move it far.
        """
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64).reshape(-1)
        if X.ndim != 2 or X.shape[1] != len(features):
            raise ValueError(f"expected X [n, {len(features)}], got shape {X.shape}")
        if len(X) != len(y):
            raise ValueError(f"{len(X)} rows but {len(y)} labels")
        if not np.isfinite(X).all():
            raise ValueError("features contain NaN or infinity")
        if not ((y == 0) | (y == 1)).all():
            raise ValueError("labels must be 0 or 1")
        if y.min() == y.max():
            raise ValueError("need both relevant and non-relevant examples to fit a ranker")
        if not isinstance(l2, (int, float)) or not np.isfinite(l2) or l2 < 0:
            raise ValueError(f"l2 must be a finite number >= 0, got {l2}")
        if prior is not None and tuple(features) != prior.features:
            raise ValueError(f"a prior ranker reads {list(prior.features)}, not {list(features)}")
        if prior is None:
            mean = X.mean(axis=0)
            scale = X.std(axis=0)
            scale[scale < 1e-9] = 1.0
        else:
            mean, scale = prior.mean.copy(), prior.scale.copy()
        Z = np.hstack([np.ones((len(X), 1)), (X - mean) / scale])
        centre = np.zeros(Z.shape[1])
        if prior is not None:
            centre[1:] = prior.weights
        beta = centre.copy()
        beta[0] = np.log(y.mean() / (1 - y.mean()))
        penalty = np.full(Z.shape[1], float(l2))
        penalty[0] = 0.0

        def loss(b: np.ndarray) -> float:
            z = Z @ b
            return float(np.sum(np.logaddexp(0.0, z) - y * z) + 0.5 * np.sum(penalty * (b - centre) ** 2))

        current = loss(beta)
        for _ in range(max_iter):
            p = 1.0 / (1.0 + np.exp(-np.clip(Z @ beta, -30, 30)))
            grad = Z.T @ (p - y) + penalty * (beta - centre)
            hess = (Z * (p * (1 - p))[:, None]).T @ Z + np.diag(penalty + 1e-9)
            step = np.linalg.solve(hess, grad)
            # damped Newton: halve the step until the loss falls (a full step can overshoot when
            # the classes are nearly separable along some feature)
            t = 1.0
            while t > 1e-10 and loss(beta - t * step) > current:
                t *= 0.5
            beta = beta - t * step
            previous, current = current, loss(beta)
            if np.abs(t * step).max() < 1e-8 or previous - current < 1e-10 * max(1.0, abs(current)):
                break
        meta = {"rows": int(len(y)), "positives": int(y.sum()), "l2": float(l2), **(info or {})}
        return cls(tuple(features), beta[1:], float(beta[0]), mean, scale, meta)

    # ------------------------------------------------------------- persistence
    def to_dict(self) -> Dict[str, Any]:
        return {"format": FORMAT, "features": list(self.features), "weights": self.weights.tolist(),
                "bias": self.bias, "mean": self.mean.tolist(), "scale": self.scale.tolist(), "info": self.info}

    def save(self, path: Union[str, os.PathLike]) -> None:
        """Write the ranker as JSON (atomically: a crash leaves the old file intact)."""
        write_json_atomic(path, self.to_dict())

    @classmethod
    def load(cls, path: Union[str, os.PathLike]) -> "LinearRanker":
        d = read_format_json(path, FORMAT, "ranker")
        try:
            return cls(d["features"], d["weights"], d["bias"], d["mean"], d["scale"], d.get("info", {}))
        except KeyError as exc:
            raise ValueError(f"{path} lacks the field {exc.args[0]!r}") from None
