"""The shipped default ranker: what it holds, which form a collection gets (encoder-matched or portable), the
``ranker=`` switch of the Retriever, fitting a bundle, adapting a ranker (``prior``), and bad input."""
from __future__ import annotations

import json

import numpy as np
import pytest

from medretrieve.retrieval.shipped_ranker import (DEFAULT_RANKER_FILE, RankerBundle, choose, default_bundle,
                                                  encoder_fingerprints, resolve)
from medretrieve.retrieval.learned_ranker import FEATURES, MATCHED_FEATURES, PORTABLE_FEATURES, LinearRanker

from demo_training import TRAINING  # tests/ is on sys.path (tests/conftest.py)


def _demo_docs(n: int = 24):
    from medretrieve.cli.demo import DEMO_CORPUS

    return [json.loads(line) for line in DEMO_CORPUS.read_text().splitlines()[:n]]


@pytest.fixture(scope="module")
def minilm_collection(tmp_path_factory):
    from medretrieve.corpus.collection import Collection
    from medretrieve.models.encoders import default_model_dir

    return Collection.build(_demo_docs(), tmp_path_factory.mktemp("dr") / "col", encoder=default_model_dir(),
                            progress=False)


@pytest.fixture(scope="module")
def tiny_collection(tmp_path_factory):
    pytest.importorskip("torch")
    from encoder_fixtures import export_tiny

    from medretrieve.corpus.collection import Collection

    base = tmp_path_factory.mktemp("tiny")
    return Collection.build(_demo_docs(), base / "col", encoder=export_tiny(base, "symmetric"), progress=False)


def test_the_shipped_bundle_holds_weights_only_and_names_its_encoder():
    bundle = default_bundle()
    assert bundle.matched.features == MATCHED_FEATURES
    assert bundle.portable.features == PORTABLE_FEATURES
    assert not set(bundle.portable.features) & {"dense", "dense_gap", "feedback", "doc_dense"}
    assert len(bundle.encoder["sha256"]) == 64 and bundle.encoder["dim"] == 384
    names = " ".join(s["name"] for s in bundle.training["sets"])
    assert "7b" in names and "12b" in names and bundle.training["l2"] > 0
    assert all(s["questions_used"] > 100 for s in bundle.training["sets"])
    assert DEFAULT_RANKER_FILE.stat().st_size < 20_000  # a few numbers, no BioASQ text
    text = DEFAULT_RANKER_FILE.read_text()
    assert "?" not in text and '"body"' not in text and '"text"' not in text  # no question, no passage
    # the signals point the way the data says: the fused rank and the subject's presence count for relevance
    w = dict(zip(bundle.matched.features, bundle.matched.weights))
    assert w["rrf"] > 0 and w["doc_subject"] > 0 and w["doc_coverage"] > 0


def test_the_bundle_was_fitted_with_the_embedded_encoder():
    from medretrieve.models.encoders import default_model_dir, read_manifest

    assert default_bundle().encoder["sha256"] == read_manifest(default_model_dir()).sha256


def test_default_retriever_uses_the_matched_ranker_with_the_embedded_encoder(minilm_collection):
    from medretrieve.retrieval.retriever import Retriever

    ret = Retriever(minilm_collection)
    assert ret.ranker is default_bundle().matched
    assert encoder_fingerprints(minilm_collection) == (default_bundle().encoder["sha256"],) * 2
    res = ret.search("Which inhalers treat asthma?", k=3, deadline_ms=None)
    reason = res.stage("rerank").reason
    assert "learned ranker (default ranker (fitted with this collection's encoder" in reason
    assert res.hits[0].document_id == "demo-007"
    # with the learned ranker the subject boost is off (the ranker's doc_subject weighs the subject)
    none = Retriever(minilm_collection, ranker=None).search("Which inhalers treat asthma?", k=3, deadline_ms=None)
    assert "heuristics" in none.stage("rerank").reason


def test_other_encoders_get_the_portable_ranker_and_are_told_why(tiny_collection):
    from medretrieve.retrieval.retriever import Retriever

    ret = Retriever(tiny_collection)
    assert ret.ranker is default_bundle().portable
    res = ret.search("Which inhalers treat asthma?", k=3, deadline_ms=None)
    reason = res.stage("rerank").reason
    assert "portable" in reason and "article encoder is not the one" in reason and "through ranks only" in reason
    assert len(res.hits) == 3 and all(0.0 <= h.scores["rerank"] <= 1.0 for h in res.hits)


def test_a_replaced_query_encoder_also_gets_the_portable_ranker(minilm_collection, tiny_collection):
    from types import SimpleNamespace

    # the stored vectors are MiniLM's, but the collection is searched with another query encoder
    # (Collection.open(..., query_encoder=DIR)); only the manifests are read
    col = SimpleNamespace(manifest=minilm_collection.manifest, query_encoder_dir=tiny_collection.query_encoder_dir)
    ranker, note = choose(default_bundle(), col)
    assert ranker is default_bundle().portable and "query encoder is not the one" in note
    ranker, note = choose(default_bundle(), minilm_collection)
    assert ranker is default_bundle().matched


def test_portable_features_do_not_depend_on_the_similarity_scale(minilm_collection):
    """Scaling every stored vector (another encoder's inner-product scale) leaves the portable features as they
    are, while the raw dense features move."""
    from medretrieve.retrieval.budget import Deadline
    from medretrieve.retrieval.candidates import Switches
    from medretrieve.retrieval.query import Query
    from medretrieve.retrieval.results import StageLog
    from medretrieve.retrieval.retriever import Retriever

    ret = Retriever(minilm_collection, ranker=None)
    q = Query.analyse("Which inhalers treat asthma?")
    dl = Deadline(None)
    cands = ret.candidates.gather(ret.scope(), q, 10, dl, StageLog(dl), Switches(feedback=True), ranked=True)
    rows = cands.fused_ids.tolist()
    before = ret.reranker.features(ret.scope(), q, cands, rows, FEATURES)
    cands.vectors = cands.vectors * 60.0
    cands.feedback_vector = cands.feedback_vector * 60.0
    after = ret.reranker.features(ret.scope(), q, cands, rows, FEATURES)
    port = [FEATURES.index(f) for f in PORTABLE_FEATURES + ("feedback_rank",)]
    np.testing.assert_allclose(after[:, port], before[:, port])
    assert not np.allclose(after[:, FEATURES.index("dense")], before[:, FEATURES.index("dense")])
    ranks = before[:, FEATURES.index("dense_rank")]
    assert ranks.min() == 0.0 and np.argmin(ranks) == np.argmax(before[:, FEATURES.index("dense")])


def test_ranker_argument_forms_and_bad_input(minilm_collection, tmp_path):
    bundle = default_bundle()
    path = tmp_path / "bundle.json"
    bundle.save(path)
    assert resolve(path, minilm_collection)[0].features == bundle.matched.features
    assert resolve(bundle, minilm_collection)[0] is bundle.matched
    assert resolve(None, minilm_collection) == (None, "")
    single = tmp_path / "ranker.json"
    bundle.portable.save(single)
    assert resolve(str(single), minilm_collection)[0].features == PORTABLE_FEATURES
    with pytest.raises(TypeError, match="ranker must be"):
        resolve(3, minilm_collection)
    with pytest.raises(FileNotFoundError):
        resolve(tmp_path / "missing.json", minilm_collection)
    d = bundle.to_dict()
    d["encoder"] = {}
    (tmp_path / "no-sha.json").write_text(json.dumps(d))
    with pytest.raises(ValueError, match="sha256"):
        RankerBundle.load(tmp_path / "no-sha.json")
    d = bundle.to_dict()
    d["portable"] = bundle.matched.to_dict()  # raw dense features are not portable
    (tmp_path / "bad-portable.json").write_text(json.dumps(d))
    with pytest.raises(ValueError, match="portable default ranker reads"):
        RankerBundle.load(tmp_path / "bad-portable.json")
    d = bundle.to_dict()
    del d["matched"]
    (tmp_path / "partial.json").write_text(json.dumps(d))
    with pytest.raises(ValueError, match="matched"):
        RankerBundle.load(tmp_path / "partial.json")
    (tmp_path / "other.json").write_text(json.dumps({"format": "x"}))
    with pytest.raises(ValueError, match="not a medretrieve default ranker"):
        RankerBundle.load(tmp_path / "other.json")


def test_fit_default_bundle_and_adapting_a_ranker(minilm_collection, tiny_collection):
    from medretrieve.retrieval.retriever import Retriever
    from medretrieve.training.ranker_fitting import fit_default_bundle, fit_ranker

    ret = Retriever(minilm_collection, ranker=None)
    bundle = fit_default_bundle([(ret, TRAINING[:3], "first"), (ret, TRAINING[3:], "second")], l2=1.0)
    assert [s["name"] for s in bundle.training["sets"]] == ["first", "second"]
    assert sum(s["questions_used"] for s in bundle.training["sets"]) == len(TRAINING)
    assert bundle.encoder["sha256"] == default_bundle().encoder["sha256"]
    assert choose(bundle, minilm_collection)[0] is bundle.matched
    with pytest.raises(ValueError, match="share one recorded encoder"):
        fit_default_bundle([(ret, TRAINING, "a"), (Retriever(tiny_collection, ranker=None), TRAINING, "b")])
    with pytest.raises(ValueError, match="at least one"):
        fit_default_bundle([])
    # adapting the default: its features, pulled towards its weights
    adapted = fit_ranker(ret, TRAINING, prior="default")
    assert adapted.features == MATCHED_FEATURES and "adapted_from" in adapted.info
    assert ret.ranker is adapted and adapted.info["encoder_sha256"] == bundle.encoder["sha256"]
    with pytest.raises(ValueError, match="prior must be"):
        fit_ranker(ret, TRAINING, prior="best")


def test_fit_with_a_prior_moves_from_the_prior_as_the_penalty_allows():
    rng = np.random.default_rng(3)
    feats = PORTABLE_FEATURES
    X = rng.normal(size=(400, len(feats)))
    y = (X[:, 0] + 0.5 * rng.normal(size=400) > 0).astype(float)
    prior = LinearRanker(feats, rng.normal(size=len(feats)), 0.0, np.zeros(len(feats)), np.ones(len(feats)))
    stiff = LinearRanker.fit(X, y, feats, l2=1e9, prior=prior)
    np.testing.assert_allclose(stiff.weights, prior.weights, atol=1e-4)
    np.testing.assert_array_equal(stiff.mean, prior.mean)
    free = LinearRanker.fit(X, y, feats, l2=1e-6, prior=prior)
    scratch = LinearRanker.fit(X, y, feats, l2=1e-6)
    # nearly unpenalised, both reach the same model (in different standardisations)
    np.testing.assert_allclose(free.logits(X), scratch.logits(X), atol=1e-3)
    # the gradient of the penalised objective vanishes at the fit, with the penalty centred on the prior
    l2 = 5.0
    r = LinearRanker.fit(X, y, feats, l2=l2, prior=prior)
    Z = (X - r.mean) / r.scale
    p = 1 / (1 + np.exp(-(r.bias + Z @ r.weights)))
    grad = Z.T @ (p - y) + l2 * (r.weights - prior.weights)
    assert np.abs(grad).max() < 1e-5 and abs(np.sum(p - y)) < 1e-5
    with pytest.raises(ValueError, match="prior ranker reads"):
        LinearRanker.fit(X[:, :3], y, feats[:3], prior=prior)
    with pytest.raises(ValueError, match="l2"):
        LinearRanker.fit(X, y, feats, l2=float("nan"))
