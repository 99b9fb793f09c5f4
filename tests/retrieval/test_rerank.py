"""Learned reranker: the logistic fit against its optimality conditions, persistence, bad input, and
its use by the Retriever (fit on training questions, search, CLI)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from medretrieve.retrieval.learned_ranker import FEATURES, LinearRanker
from medretrieve.training.ranker_fitting import fit_ranker

from demo_training import TRAINING  # tests/ is on sys.path (tests/conftest.py)


def _penalised_gradient(r: LinearRanker, X: np.ndarray, y: np.ndarray, l2: float) -> np.ndarray:
    """Gradient of the fitted objective in the standardised space (float64 reference)."""
    Z = (X - r.mean) / r.scale
    p = 1.0 / (1.0 + np.exp(-(r.bias + Z @ r.weights)))
    g_w = Z.T @ (p - y) + l2 * r.weights
    g_b = np.sum(p - y)
    return np.concatenate([[g_b], g_w])


@pytest.mark.parametrize("n,l2", [(7, 0.5), (301, 1.0), (2000, 0.0)])
def test_fit_reaches_the_optimum_of_the_penalised_likelihood(n, l2):
    rng = np.random.default_rng(n)
    spread = rng.uniform(0.1, 5, len(FEATURES))
    X = rng.normal(size=(n, len(FEATURES))) * spread + rng.normal(size=len(FEATURES))
    true_w = rng.normal(size=len(FEATURES))
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-(X - X.mean(0)) @ true_w * 0.5))).astype(float)
    y[0], y[1] = 0.0, 1.0  # both classes
    r = LinearRanker.fit(X, y, l2=l2 if n > 10 else 0.5)
    grad = _penalised_gradient(r, X, y, l2 if n > 10 else 0.5)
    assert np.abs(grad).max() < 1e-5 * max(1.0, n ** 0.5)
    p = r.score(X)
    assert p.shape == (n,) and ((p >= 0) & (p <= 1)).all()
    np.testing.assert_allclose(p, 1 / (1 + np.exp(-r.logits(X))), rtol=1e-12)
    if n == 2000:  # enough data: the sign of every weight that moves the logit visibly is recovered
        visible = np.abs(true_w * spread * 0.5) > 0.3
        assert visible.sum() >= len(FEATURES) // 2
        assert (np.sign(r.weights / r.scale) == np.sign(true_w))[visible].all()


def test_fit_stays_finite_on_separable_data():
    X = np.zeros((40, len(FEATURES)))
    X[:, 0] = np.arange(40)
    y = (X[:, 0] >= 20).astype(float)  # perfectly separable along one feature
    r = LinearRanker.fit(X, y, l2=1e-6)
    assert np.isfinite(r.weights).all() and np.isfinite(r.bias)
    p = r.score(X)
    assert p[:20].max() < 0.5 < p[20:].min()


def test_save_load_round_trip_and_bad_files(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, len(FEATURES)))
    y = (X[:, 2] > 0).astype(float)
    r = LinearRanker.fit(X, y, info={"questions": 5})
    path = tmp_path / "ranker.json"
    r.save(path)
    back = LinearRanker.load(path)
    np.testing.assert_array_equal(back.score(X), r.score(X))
    assert back.info["questions"] == 5 and back.features == FEATURES
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        LinearRanker.load(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(ValueError, match="not a medretrieve ranker"):
        LinearRanker.load(tmp_path / "other.json")
    d = r.to_dict()
    del d["bias"]
    (tmp_path / "partial.json").write_text(json.dumps(d))
    with pytest.raises(ValueError, match="bias"):
        LinearRanker.load(tmp_path / "partial.json")
    with pytest.raises(FileNotFoundError):
        LinearRanker.load(tmp_path / "missing.json")


def test_bad_input_raises_clear_errors():
    X = np.ones((4, len(FEATURES)))
    with pytest.raises(ValueError, match="both relevant and non-relevant"):
        LinearRanker.fit(X, np.ones(4))
    with pytest.raises(ValueError, match="labels must be 0 or 1"):
        LinearRanker.fit(X, np.array([0, 1, 2, 0]))
    bad = X.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        LinearRanker.fit(bad, np.array([0, 1, 0, 1]))
    with pytest.raises(ValueError, match="rows but"):
        LinearRanker.fit(X, np.array([0, 1]))
    with pytest.raises(ValueError, match="expected X"):
        LinearRanker.fit(X[:, :3], np.array([0, 1, 0, 1]))
    with pytest.raises(ValueError, match="l2"):
        LinearRanker.fit(X, np.array([0, 1, 0, 1]), l2=-1)
    r = LinearRanker.fit(np.random.default_rng(1).normal(size=(4, len(FEATURES))), np.array([0, 1, 0, 1]))
    with pytest.raises(ValueError, match="feature matrix"):
        r.score(np.ones((3, 2)))
    with pytest.raises(ValueError, match="unknown ranker features"):
        LinearRanker(("rrf", "nope"), [1, 1], 0.0, [0, 0], [1, 1])
    with pytest.raises(ValueError, match="finite"):
        LinearRanker(("rrf",), [np.inf], 0.0, [0], [1])
    with pytest.raises(ValueError, match="1 features but 2 weights"):
        LinearRanker(("rrf",), [1, 2], 0.0, [0], [1])


# ----------------------------------------------------------------- with a Retriever


@pytest.fixture(scope="module")
def collection(tmp_path_factory):
    from medretrieve.corpus.collection import Collection
    from medretrieve.cli.demo import DEMO_CORPUS
    from medretrieve.models.encoders import default_model_dir

    docs = [json.loads(line) for line in DEMO_CORPUS.read_text().splitlines()[:24]]
    return Collection.build(docs, tmp_path_factory.mktemp("rk") / "col", encoder=default_model_dir(),
                            progress=False)


def test_retriever_fits_and_uses_a_ranker(collection, tmp_path):
    from medretrieve.retrieval.retriever import Retriever

    ret = Retriever(collection, ranker=None)
    assert "heuristics" in ret.search("Which inhalers treat asthma?", k=3, deadline_ms=None).stage("rerank").reason
    r = fit_ranker(ret, TRAINING)
    assert ret.ranker is r and r.info["questions"] == len(TRAINING) and r.info["positives"] > 0
    res = ret.search("Which inhalers treat asthma?", k=3, deadline_ms=None)
    assert "learned ranker" in res.stage("rerank").reason
    assert res.hits[0].document_id == "demo-007"
    assert all(0.0 <= h.scores["rerank"] <= 1.0 for h in res.hits)
    # the features are those search computes: the ranker ranks its own training questions' documents first
    top = [ret.search(q, k=1, deadline_ms=None).hits[0].document_id for q, _ in TRAINING]
    assert sum(t == d[0] for t, (_, d) in zip(top, TRAINING)) >= 5
    path = tmp_path / "r.json"
    r.save(path)
    again = Retriever(collection, ranker=path).search("Which inhalers treat asthma?", k=3, deadline_ms=None)
    assert [h.chunk_id for h in again.hits] == [h.chunk_id for h in res.hits]


def test_fit_ranker_bad_input(collection):
    from medretrieve.retrieval.retriever import Retriever

    ret = Retriever(collection, ranker=None)
    with pytest.raises(ValueError, match="no training question has a relevant document"):
        fit_ranker(ret, [("Which inhalers treat asthma?", ["not-in-the-collection"])])
    assert ret.ranker is None  # a failed fit leaves the retriever as it was
    with pytest.raises((ValueError, TypeError, FileNotFoundError)):
        fit_ranker(ret, [])
    with pytest.raises(FileNotFoundError):
        Retriever(collection, ranker="/nonexistent/ranker.json")


def test_feedback_stage_and_switch(collection):
    from medretrieve.retrieval.retriever import Retriever

    # with a learned ranker (the default) feedback is off unless asked for (Settings.feedback)
    ranked = Retriever(collection)
    res = ranked.search("What are the symptoms of a pulmonary embolism?", k=5, deadline_ms=None)
    assert not res.stage("feedback").ran and "off with a learned ranker" in res.stage("feedback").reason
    assert ranked.search("pulmonary embolism", k=5, deadline_ms=None, feedback=True).stage("feedback").ran
    assert Retriever(collection, feedback=True).search("pulmonary embolism", k=5).stage("feedback").ran
    with pytest.raises(ValueError, match="feedback must be"):
        Retriever(collection, feedback="yes")
    ret = Retriever(collection, ranker=None)
    res = ret.search("What are the symptoms of a pulmonary embolism?", k=5, deadline_ms=None)
    st = res.stage("feedback")
    assert st is not None and st.ran and "mean of the top 3" in st.reason
    assert "RRF of 3 lists" in res.stage("fuse").reason  # dense, BM25 and the feedback list
    off = ret.search("What are the symptoms of a pulmonary embolism?", k=5, feedback=False)
    assert not off.stage("feedback").ran and "RRF of 2 lists" in off.stage("fuse").reason
    bm = ret.search("pulmonary embolism", k=5, dense=False)
    assert not bm.stage("feedback").ran
    with pytest.raises(ValueError, match="feedback"):
        Retriever(collection, feedback_docs=0)


def test_fit_ranker_cli(collection, tmp_path, bioasq_files, capsys):
    from medretrieve.cli import main
    from medretrieve.corpus.collection import Collection
    from medretrieve.models.encoders import default_model_dir

    out = tmp_path / "ranker.json"
    # BioASQ questions have no relevant document in the demo corpus: a clear error, exit code 2
    assert main(["fit-ranker", str(collection.directory), str(bioasq_files[0]), "-o", str(out)]) == 2
    assert "no training question has a relevant document" in capsys.readouterr().err
    assert not out.exists()
    # a small BioASQ closed corpus (12 questions of 7B1): fit from the CLI, then search with the ranker
    golden = json.loads(bioasq_files[0].read_text())
    small = tmp_path / "small_golden.json"
    small.write_text(json.dumps({"questions": golden["questions"][:12]}))
    other = tmp_path / "other_golden.json"
    other.write_text(json.dumps({"questions": json.loads(bioasq_files[1].read_text())["questions"][:12]}))
    col = Collection.build([small, other], tmp_path / "bio", encoder=default_model_dir(), format="bioasq",
                           progress=False)
    assert main(["fit-ranker", str(col.directory), str(small), "-o", str(out), "--memory"]) == 0
    printed = capsys.readouterr().out
    assert "ranker fitted on" in printed and "doc_coverage" in printed
    assert LinearRanker.load(out).info["questions"] >= 10
    q = golden["questions"][0]["body"]
    assert main(["search", str(col.directory), q, "--ranker", str(out), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert any(s["name"] == "rerank" and "learned ranker" in s["reason"] for s in res["stages"])
    # the evaluation harness takes the same ranker
    ev = tmp_path / "eval"
    assert main(["eval", "retrieval", str(col.directory), "--bioasq", str(small), "--ranker", str(out),
                 "--out", str(ev), "--no-progress", "--deadline-ms", "none"]) == 0
    results = json.loads((ev / "results.json").read_text())
    assert results["ranker"] == str(out) and results["latency_ms"]["mean"] > 0
    # leave-one-file-out rankers: each file's questions are ranked by a model fitted on the other file
    assert main(["eval", "retrieval", str(col.directory), "--bioasq", str(small), str(other), "--ranker-folds",
                 "--out", str(ev), "--no-progress", "--deadline-ms", "none"]) == 0
    assert json.loads((ev / "results.json").read_text())["ranker"] == "leave-one-file-out"
    assert main(["eval", "retrieval", str(col.directory), "--bioasq", str(small), "--ranker-folds",
                 "--out", str(ev), "--no-progress"]) == 2  # one file: no fold to hold out
    assert "at least two BioASQ files" in capsys.readouterr().err


class OverlapCrossEncoder:
    """Scores a pair by word overlap (a stand-in with a cross-encoder's interface)."""

    def score(self, query, articles):
        q = set(query.lower().split())
        return np.array([len(q & set((t + " " + x).lower().split())) - 2.0 for t, x in articles], dtype=np.float32)


def test_ranker_with_a_cross_encoder(collection):
    from medretrieve.retrieval.retriever import Retriever

    ret = Retriever(collection, cross_encoder=OverlapCrossEncoder())
    fit_ranker(ret, TRAINING)
    res = ret.search("Which inhalers treat asthma?", k=5, deadline_ms=None)
    assert "cross-encoder depth" in res.stage("rerank").reason
    top = res.hits[0]
    assert "cross_encoder" in top.scores and np.isfinite(top.scores["rerank"])
    # with a ranker its probability takes the fused rank's place in the cross-encoder formula
    plain = Retriever(collection, cross_encoder=OverlapCrossEncoder()).search("Which inhalers treat asthma?", k=5,
                                                                             deadline_ms=None)
    by_chunk = {h.chunk_id: h.scores for h in plain.hits}
    shared = [h for h in res.hits if h.chunk_id in by_chunk]
    assert shared and all(h.scores["cross_encoder"] == by_chunk[h.chunk_id]["cross_encoder"] for h in shared)
    assert any(abs(h.scores["rerank"] - by_chunk[h.chunk_id]["rerank"]) > 1e-6 for h in shared)


class ConstantCrossEncoder:
    """One logit per chunk id (0 for the rest), counting the pairs it saw in order."""

    def __init__(self, collection, logits=None):
        self.by_text = {r.text: r.chunk_id for r in collection.rows}
        self.logits = logits or {}
        self.seen = []

    def score(self, query, articles):
        ids = [self.by_text[x] for _, x in articles]
        self.seen += ids
        return np.array([self.logits.get(i, 0.0) for i in ids], dtype=np.float32)


def test_ranker_and_cross_encoder_add_logits_in_the_rankers_order(collection):
    from medretrieve.retrieval.retriever import Retriever

    q = "Which inhalers treat asthma?"
    ranked = Retriever(collection)
    ranker = fit_ranker(ranked, TRAINING)
    alone = ranked.search(q, k=8, deadline_ms=None, mmr=False, recovery=False)
    p_alone = {h.chunk_id: h.scores["rerank"] for h in alone.hits}

    # a cross-encoder with nothing to say (logit 0) leaves the ranker's probabilities and order as they were, and
    # a cut depth spends itself on the ranker's best candidates
    zero = ConstantCrossEncoder(collection)
    both = Retriever(collection, cross_encoder=zero, ranker=ranker, rerank_depth=4)
    zero.seen.clear()  # warmup's call
    res = both.search(q, k=8, deadline_ms=None, mmr=False, recovery=False)
    assert "learned ranker's order, logits added (weight 0.5)" in res.stage("rerank").reason
    assert zero.seen == [h.chunk_id for h in alone.hits[:4]]
    assert [h.chunk_id for h in res.hits] == [h.chunk_id for h in alone.hits]
    for h in res.hits[:4]:
        assert h.scores["rerank"] == pytest.approx(p_alone[h.chunk_id], rel=1e-5)

    # a logit that outweighs the ranker's margin moves a lower candidate up: sigmoid(logit(p) + 0.5 x logit_ce)
    def logit(p):
        return float(np.log(p / (1 - p)))

    target = alone.hits[3].chunk_id
    ce_logit = 2 * (logit(alone.hits[0].scores["rerank"]) - logit(p_alone[target])) + 2.0
    loud = Retriever(collection, cross_encoder=ConstantCrossEncoder(collection, {target: ce_logit}), ranker=ranker,
                     rerank_depth=4)
    top = loud.search(q, k=8, deadline_ms=None, mmr=False, recovery=False).hits[0]
    assert top.chunk_id == target
    expected = 1 / (1 + np.exp(-(logit(p_alone[target]) + 0.5 * ce_logit)))
    assert top.scores["rerank"] == pytest.approx(expected, rel=1e-4)
    off = Retriever(collection, cross_encoder=ConstantCrossEncoder(collection, {target: ce_logit}), ranker=ranker,
                    rerank_depth=4, ranker_ce_weight=0.0)
    assert off.search(q, k=8, deadline_ms=None, mmr=False, recovery=False).hits[0].chunk_id == \
        alone.hits[0].chunk_id


def test_fit_ranker_rejects_what_is_neither_pairs_nor_files(collection):
    from medretrieve.retrieval.retriever import Retriever

    ret = Retriever(collection)
    for bad in ([1, 2], [("q", ["d"]), 3], 42):
        with pytest.raises(TypeError, match="paths"):
            fit_ranker(ret, bad)
    with pytest.raises(TypeError, match="paths"):
        Retriever(collection, training=[7])


def test_subject_words_are_those_outside_the_general_vocabulary():
    from medretrieve.retrieval.query import subject_words
    from medretrieve.retrieval.vocabulary import wordpiece_count

    assert wordpiece_count("mechanism") == 1 and wordpiece_count("motolimod") >= 3
    assert wordpiece_count("kinases") == wordpiece_count("genomes") == 1  # an inflected known word is known
    words = subject_words("What is the mechanism of action of motolimod?")
    assert [(sorted(t), p) for t, p in words] == [(["motolimod"], wordpiece_count("motolimod"))]
    assert subject_words("What is the first-line treatment of type 2 diabetes?") == []  # known words, "2" too short
    got = {frozenset(t) for t, _ in subject_words("Is anti-CCR4 given with IL-6 kinases? IL-6!")}
    assert any("ccr4" in t for t in got) and any("il-6" in t for t in got) and len(got) == 2


def test_doc_subject_feature_prefers_documents_about_the_questions_subject(tmp_path):
    from medretrieve.retrieval.budget import Deadline
    from medretrieve.corpus.collection import Collection
    from medretrieve.models.encoders import default_model_dir
    from medretrieve.retrieval.candidates import Switches
    from medretrieve.retrieval.query import Query
    from medretrieve.retrieval.results import StageLog
    from medretrieve.retrieval.retriever import Retriever

    docs = [{"id": "m1", "title": "Motolimod", "text": "Motolimod is a selective TLR8 agonist given with cetuximab."},
            {"id": "m2", "title": "", "text": "Motolimod stimulates natural killer cells and monocytes."},
            {"id": "l1", "title": "Losigamone", "text": "Losigamone is an anticonvulsant whose mechanism of action "
                                                        "is not known."}]
    col = Collection.build(docs, tmp_path / "col", encoder=default_model_dir(), progress=False)
    ret = Retriever(col)
    feats = {}
    for q in ("What is the mechanism of action of motolimod?", "What is the mechanism of action?"):
        # the features exactly as search computes them for the fused candidates
        dl = Deadline(None)
        query = Query.analyse(q)
        cands = ret.candidates.gather(ret.scope(), query, 3, dl, StageLog(dl), Switches(expand=False, route=False, feedback=False))
        rows = cands.fused_ids.tolist()
        X = ret.reranker.features(ret.scope(), query, cands, rows, FEATURES)
        feats[q] = {col.rows[r].document_id: X[i, FEATURES.index("doc_subject")] for i, r in enumerate(rows)}
    with_subject = feats["What is the mechanism of action of motolimod?"]
    assert with_subject["m1"] == with_subject["m2"] == 1.0 and with_subject["l1"] == 0.0
    # no subject word: the feature falls back to document coverage, which favours the losigamone abstract
    plain = feats["What is the mechanism of action?"]
    assert plain["l1"] > plain["m1"]


def test_a_ranker_saved_before_a_feature_was_added_still_scores(collection, tmp_path):
    from medretrieve.retrieval.retriever import Retriever

    old = FEATURES[:12]  # the 12 features of rankers written before doc_subject
    rng = np.random.default_rng(1)
    X = rng.normal(size=(60, len(old)))
    r = LinearRanker.fit(X, (X[:, 0] > 0).astype(float), features=old)
    r.save(tmp_path / "old.json")
    res = Retriever(collection, ranker=tmp_path / "old.json").search("Which inhalers treat asthma?", k=3)
    assert "learned ranker" in res.stage("rerank").reason and res.hits


def test_warmup_freezes_the_collection_out_of_the_cyclic_gc_only_when_asked(collection):
    """A library call leaves the process's collector alone; a server asks for the freeze (``freeze_gc``)."""
    import gc

    from medretrieve.retrieval.retriever import Retriever

    gc.unfreeze()
    Retriever(collection, warmup=False)
    assert gc.get_freeze_count() == 0
    ret = Retriever(collection)
    assert gc.get_freeze_count() == 0
    ret.warmup(freeze_gc=True)
    assert gc.get_freeze_count() >= len(collection.rows)  # rows (and everything else alive) frozen
    gc.unfreeze()


def test_subject_boost_reweights_the_questions_bm25(tmp_path):
    from medretrieve.corpus.collection import Collection
    from medretrieve.models.encoders import default_model_dir
    from medretrieve.retrieval.retriever import Retriever

    # the subject ("motolimod") is common in this collection, so plain BM25 ranks the losigamone abstract,
    # which matches the rarer "mechanism", above the motolimod abstracts
    docs = [{"id": f"m{i}", "title": "", "text": f"Motolimod was given to patients in trial {i}."} for i in range(3)]
    docs += [{"id": "l1", "title": "", "text": "The mechanism of losigamone is not known."},
             {"id": "x1", "title": "", "text": "Metformin lowers glucose."},
             {"id": "x2", "title": "", "text": "Aspirin inhibits platelets."},
             {"id": "x3", "title": "", "text": "Asthma is treated with inhalers."}]
    col = Collection.build(docs, tmp_path / "col", encoder=default_model_dir(), progress=False)
    q = "What is the mechanism of action of motolimod?"
    switches = dict(dense=False, expand=False, rerank=False, mmr=False, recovery=False, route=False,
                    feedback=False)
    plain = Retriever(col, subject_boost=0).search(q, k=3, deadline_ms=None, **switches)
    boosted = Retriever(col, subject_boost=2).search(q, k=3, deadline_ms=None, **switches)
    assert plain.hits[0].document_id == "l1"
    assert boosted.hits[0].document_id.startswith("m")

    def bm25(ret, **kw):
        res = ret.search(q, k=7, deadline_ms=None, **dict(switches, **kw))
        return {h.chunk_id: round(h.scores["bm25"], 5) for h in res.hits}

    # default: boosted once without a learned ranker, plain when a ranker orders the candidates
    assert bm25(Retriever(col)) == bm25(Retriever(col, subject_boost=1)) != bm25(Retriever(col, subject_boost=0))
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, len(FEATURES)))
    ranked = Retriever(col, ranker=LinearRanker.fit(X, (X[:, 0] > 0).astype(float)))
    assert bm25(ranked, rerank=True) == bm25(Retriever(col, subject_boost=0), rerank=True)
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="subject_boost"):
            Retriever(col, subject_boost=bad, warmup=False)


def test_a_cut_cross_encoder_depth_in_the_rankers_order_scores_what_it_read(collection):
    """The cross-encoder reads the ranker's best candidates, not the fused ones: each of them gets its combined
    score and leads the results, even when the ranker reverses the fused order (log_rank weighted up)."""
    from medretrieve.retrieval.retriever import Retriever

    reverse = LinearRanker(["log_rank"], [1.0], 0.0, [0.0], [1.0])
    ce = ConstantCrossEncoder(collection)
    ret = Retriever(collection, cross_encoder=ce, ranker=reverse, rerank_depth=3)
    fused = Retriever(collection, ranker=None).search("Which inhalers treat asthma?", k=30, deadline_ms=None,
                                                      rerank=False, mmr=False, recovery=False)
    ce.seen.clear()
    res = ret.search("Which inhalers treat asthma?", k=30, deadline_ms=None, mmr=False, recovery=False)
    assert len(ce.seen) == 3 and not set(ce.seen) & {h.chunk_id for h in fused.hits[:3]}  # none of the fused top 3
    assert [h.chunk_id for h in res.hits[:len(ce.seen)]] == ce.seen
    assert all("rerank" in h.scores and "cross_encoder" in h.scores for h in res.hits[:len(ce.seen)])
