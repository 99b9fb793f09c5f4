"""MedCPT fidelity: a query/article pair (CLS pooling, raw inner products) keeps its own geometry end to end.

A tiny random BERT pair is exported as MedCPT-style models (``export-onnx --kind query|article``: CLS, not
normalised), a collection is built with ``medretrieve build --encoder ARTICLE --query-encoder QUERY``, and the
dense scores of a search must equal the raw inner products of the two towers computed with torch in float64.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from encoder_fixtures import export_tiny, torch_reference  # noqa: E402
from medretrieve.corpus.collection import Collection  # noqa: E402
from medretrieve.models.encoders import read_manifest  # noqa: E402
from medretrieve.retrieval.candidates import feedback_vector  # noqa: E402
from medretrieve.retrieval.retriever import Retriever  # noqa: E402

DOCS = [
    {"id": "11", "title": "aspirin and platelets", "text": "aspirin inhibits platelet aggregation by cyclooxygenase."},
    {"id": "12", "title": "metformin", "text": "metformin is the first line drug for type 2 diabetes mellitus."},
    {"id": "13", "title": "brca1 gene", "text": "brca1 mutations cause hereditary breast and ovarian cancer."},
    {"id": "14", "title": "vaccine", "text": "a vaccine against respiratory syncytial virus in older adults."},
    {"id": "15", "title": "hypertension", "text": "blood pressure therapy for hypertension and kidney disease."},
    {"id": "16", "title": "pneumonia", "text": "fever cough and chest pain in a patient with pneumonia."},
]
QUESTION = "which drug inhibits platelet aggregation"


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("medcpt")
    query = export_tiny(tmp, "query", seed=3)
    article = export_tiny(tmp, "article", seed=4)
    return tmp, query, article


@pytest.fixture(scope="module")
def built(pair, tmp_path_factory):
    from medretrieve.cli import main

    tmp, query, article = pair
    corpus = tmp / "docs.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in DOCS), encoding="utf-8")
    out = {}
    for dtype in ("float32", "int8"):
        target = tmp_path_factory.mktemp(dtype) / "col"
        assert main(["build", str(corpus), str(target), "--encoder", str(article), "--query-encoder", str(query),
                     "--dtype", dtype, "--quiet"]) == 0
        out[dtype] = Collection.open(target)
    return out


def _reference(pair):
    """float64 inner products of the torch towers: query vector . (title, text) article vectors."""
    tmp, query, article = pair
    q = torch_reference(tmp / "tiny-query-json-hf-3", "query", [QUESTION], pooling="cls", max_length=64)[0]
    a = torch_reference(tmp / "tiny-article-json-hf-4", "article", [(d["title"], d["text"]) for d in DOCS],
                        pooling="cls")
    return a.astype(np.float64) @ q.astype(np.float64), q, a


def test_exported_pair_is_medcpt_style(pair):
    _, query, article = pair
    for d, kind in ((query, "query"), (article, "article")):
        m = read_manifest(d)
        assert (m.kind, m.pooling, m.normalize) == (kind, "cls", False)


def test_collection_keeps_raw_vectors_and_records_the_geometry(built, pair):
    col = built["float32"]
    assert col.normalized is False and col.manifest["index"]["normalized"] is False
    assert col.manifest["index"]["space"] == "ip"
    _, _, a = _reference(pair)
    stored = col.vectors(list(range(len(DOCS))))
    norms = np.linalg.norm(stored, axis=1)
    assert not np.allclose(norms, 1.0, atol=1e-2)  # not unit length: the encoder's own geometry
    np.testing.assert_allclose(stored, a, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype,rtol", [("float32", 1e-4), ("int8", 2e-2)])
def test_search_scores_are_the_towers_raw_inner_products(built, pair, dtype, rtol):
    col = built[dtype]
    ref, q, a = _reference(pair)
    res = Retriever(col, warmup=False).search(QUESTION, k=len(DOCS), deadline_ms=None, rerank=False,
                                             mmr=False, recovery=False, bm25=False, expand=False,
                                             feedback=False)
    got = {h.document_id: h.scores["dense"] for h in res.hits}
    assert len(got) == len(DOCS)
    want = {d["id"]: ref[i] for i, d in enumerate(DOCS)}
    scale = float(np.abs(ref).max())
    for doc, score in got.items():
        assert abs(score - want[doc]) <= rtol * scale, (doc, score, want[doc])
    if dtype == "float32":
        assert [h.document_id for h in res.hits] == [d for d, _ in sorted(want.items(), key=lambda x: -x[1])]
    # the query vector the search used is the query tower's raw [CLS] vector
    np.testing.assert_allclose(col.encode_queries([QUESTION])[0], q, rtol=1e-4, atol=1e-4)


def test_full_search_runs_in_raw_geometry(built):
    col = built["int8"]
    # MMR over every candidate; feedback and MMR are off by default (Settings), on here to check their geometry
    res = Retriever(col, mmr_floor=0.0, mmr=True, feedback=True).search(QUESTION, k=3, deadline_ms=None)
    assert len(res.hits) == 3
    for name in ("feedback", "mmr", "rerank"):
        assert res.stage(name).ran, (name, res.stage(name).reason)
    assert all(np.isfinite(h.score) for h in res.hits)
    assert all(-1.0 <= h.scores["mmr"] <= 1.0 for h in res.hits if "mmr" in h.scores)  # cosine scale


def test_feedback_vector_keeps_each_geometry():
    rng = np.random.default_rng(0)
    q = rng.normal(size=8).astype(np.float32) * 5.0
    top = rng.normal(size=(3, 8)).astype(np.float32) * 40.0  # article vectors on another scale
    raw = feedback_vector(q, top, 1.0, normalized=False)
    assert np.isclose(np.linalg.norm(raw), np.linalg.norm(q), rtol=1e-5)
    # the question and the (rescaled) mean weigh alike: the result lies halfway between their directions
    qu, mu = q / np.linalg.norm(q), top.mean(0) / np.linalg.norm(top.mean(0))
    assert np.isclose(float(raw @ qu), float(raw @ mu), rtol=1e-4)
    unit = feedback_vector(q / np.linalg.norm(q), top / np.linalg.norm(top, axis=1, keepdims=True), 1.0, True)
    assert np.isclose(np.linalg.norm(unit), 1.0, rtol=1e-6)


def test_a_pair_of_two_geometries_is_refused(pair, tmp_path):
    tmp, query, _ = pair
    sym = export_tiny(tmp, "symmetric", sentence_transformers="mean", seed=2)  # mean pooling, normalised
    with pytest.raises(ValueError, match="must share one geometry"):
        Collection.build(DOCS, tmp_path / "mixed", encoder=str(sym), query_encoder=str(query), progress=False)
    assert not (tmp_path / "mixed").exists()
    col = Collection.build(DOCS, tmp_path / "sym", encoder=str(sym), progress=False)
    assert col.normalized is True
    with pytest.raises(ValueError, match="must share one geometry"):
        Collection.open(tmp_path / "sym", query_encoder=str(query)).encode_queries(["aspirin"])
