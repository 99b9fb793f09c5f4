"""medretrieve.training: query-encoder and cross-encoder fine-tuning against a collection (tiny BERT, no download)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from encoder_fixtures import make_tiny_bert_dir  # noqa: E402
from medretrieve.training._loop import INFO_NAME  # noqa: E402
from medretrieve.training.query_encoder import fit_query_encoder  # noqa: E402
from medretrieve.training.cross_encoder import fit_cross_encoder
from medretrieve.corpus.collection import Collection  # noqa: E402
from medretrieve.models.encoders import read_manifest  # noqa: E402
from medretrieve.models.export import export_onnx  # noqa: E402

TOPICS = {
    "1001": "metformin insulin glucose diabetes mellitus type dose",
    "1002": "brca1 gene mutations hereditary breast ovarian cancer carriers genetic testing",
    "1003": "aspirin inhibits platelet aggregation cyclooxygenase thromboxane",
    "1004": "vaccine against respiratory syncytial virus older adults",
    "1005": "pneumonia fever cough chest lung treatment",
    "1006": "hypertension blood pressure heart kidney therapy",
}
# Questions worded unlike their documents, so the random tiny encoder ranks them poorly before training.
TRAIN = [
    ("what is the first line drug for adults", {"1001"}),
    ("which genes cause the syndrome in relatives", {"1002"}),
    ("how does this drug work", {"1003"}),
    ("is there a vaccine for older adults", {"1004"}),
    ("what causes fever and cough", {"1005"}),
    ("what is the treatment of the patient", {"1006"}),
]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("adapt")
    base = make_tiny_bert_dir(tmp, "symmetric", sentence_transformers="mean", seed=5, name="base")
    enc = export_onnx(base, tmp / "enc", "symmetric")
    docs = [{"id": k, "title": "", "text": f"{v}. {v}."} for k, v in TOPICS.items()]
    col = Collection.build(docs, tmp / "col", encoder=str(enc), progress=False)
    return tmp, base, col


def _doc_ranks(col: Collection) -> list:
    """1-based dense rank of each training question's relevant document (its best chunk)."""
    live = np.flatnonzero(col.alive)
    vecs = col.vectors(live)
    out = []
    for (q, docs), qv in zip(TRAIN, col.encode_queries([q for q, _ in TRAIN])):
        order = [col.rows[int(live[i])].document_id for i in np.argsort(-(vecs @ qv), kind="stable")]
        out.append(order.index(next(iter(docs))) + 1)
    return out


def test_adaptation_moves_training_questions_to_their_documents(setup):
    tmp, base, col = setup
    before = _doc_ranks(col)
    res = fit_query_encoder(col, TRAIN, base, tmp / "q1", epochs=40, lr=1e-3, batch_size=4, seed=0)
    after = _doc_ranks(Collection.open(col.directory, query_encoder=res.out_dir))
    assert sum(before) > len(TRAIN)  # the untrained encoder gets some wrong
    assert after == [1] * len(TRAIN), (before, after)
    assert res.losses[-1] < res.losses[0]
    assert res.agreement > 0.999  # base is the collection's own model (fp32 export)
    assert (res.questions, res.skipped, res.candidates) == (len(TRAIN), 0, len(col))
    m = read_manifest(res.out_dir)
    assert (m.kind, m.pooling, m.normalize) == ("query", "mean", True)
    info = json.loads((Path(res.out_dir) / INFO_NAME).read_text())
    assert info["questions"] == len(TRAIN) and len(info["losses"]) == 40
    # the stored document vectors are untouched: only the query side changed
    assert np.array_equal(Collection.open(col.directory).vectors([0, 1]), col.vectors([0, 1]))


def test_questions_without_documents_in_the_collection_are_skipped_or_refused(setup):
    tmp, base, col = setup
    res = fit_query_encoder(col, TRAIN[:2] + [("what about gout", {"nowhere"})], base, tmp / "q2", epochs=1)
    assert (res.questions, res.skipped) == (2, 1)
    with pytest.raises(ValueError, match="none of the 1 training questions"):
        fit_query_encoder(col, [("what about gout", {"nowhere"})], base, tmp / "q3", epochs=1)


def test_a_base_that_is_not_the_collections_model_is_refused(setup):
    tmp, _, col = setup
    other = make_tiny_bert_dir(tmp, "symmetric", sentence_transformers="mean", seed=9, name="other")
    with pytest.raises(ValueError, match="does not reproduce the collection's query encoder"):
        fit_query_encoder(col, TRAIN, other, tmp / "q4", epochs=1)
    assert not (tmp / "q4").exists()


@pytest.mark.parametrize("kwargs,match", [
    (dict(epochs=0), "epochs"), (dict(epochs=1.5), "epochs"), (dict(lr=-1.0), "lr"),
    (dict(temperature=float("nan")), "temperature"), (dict(batch_size=0), "batch_size"),
])
def test_bad_settings_raise(setup, kwargs, match):
    tmp, base, col = setup
    with pytest.raises(ValueError, match=match):
        fit_query_encoder(col, TRAIN, base, tmp / "bad", **kwargs)


def test_existing_output_is_kept_unless_overwrite(setup):
    tmp, base, col = setup
    out = tmp / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        fit_query_encoder(col, TRAIN, base, out, epochs=1)
    assert (out / "keep.txt").read_text() == "mine"
    with pytest.raises(FileNotFoundError, match="config.json"):
        fit_query_encoder(col, TRAIN, tmp / "no-model", tmp / "q5", epochs=1)
    with pytest.raises(TypeError):
        fit_query_encoder(col, 42, base, tmp / "q6", epochs=1)


def test_a_query_encoder_of_another_width_is_refused_on_use(setup):
    tmp, _, col = setup
    wide = make_tiny_bert_dir(tmp, "query", seed=1, name="wide")
    from transformers import BertConfig, BertModel

    cfg = BertConfig.from_pretrained(wide)
    cfg.hidden_size, cfg.intermediate_size = 48, 96
    BertModel(cfg).save_pretrained(wide)
    enc = export_onnx(wide, tmp / "wide-onnx", "query")
    reopened = Collection.open(col.directory, query_encoder=str(enc))
    with pytest.raises(ValueError, match="48-dim vectors but the collection's index holds 32-dim"):
        reopened.encode_queries(["what is the first line drug"])


@pytest.mark.parametrize("command,fitted,search_flag", [
    ("fit-query-encoder", "adapted on 6 questions", "--query-encoder"),
    ("fit-cross-encoder", "cross-encoder fitted on 6 questions", "--cross-encoder"),
])
def test_cli_fit_and_search_with_the_result(setup, tmp_path, capsys, command, fitted, search_flag):
    from medretrieve.cli import main

    tmp, base, col = setup
    golden = tmp_path / "golden.json"
    golden.write_text(json.dumps({"questions": [
        {"body": q, "type": "summary", "documents": [f"http://www.ncbi.nlm.nih.gov/pubmed/{d}" for d in docs]}
        for q, docs in TRAIN]}))
    out = tmp_path / "model"
    assert main([command, str(col.directory), str(golden), "--base", str(base), "-o", str(out),
                 "--epochs", "2", "--lr", "1e-3"]) == 0
    assert fitted in capsys.readouterr().out
    assert main(["search", str(col.directory), "what is the first line drug for adults", search_flag,
                 str(out), "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)["hits"]
    assert hits and (search_flag != "--cross-encoder" or "cross_encoder" in hits[0]["scores"])
    assert main([command, str(col.directory), str(golden), "--base", str(base), "-o", str(out)]) == 2
    assert "not empty" in capsys.readouterr().err


# ----------------------------------------------------------------- cross-encoder
def test_fit_cross_encoder_learns_the_training_pairs_and_exports_onnx(setup):
    from medretrieve.models.encoders import CrossEncoder
    from medretrieve.retrieval.retriever import Retriever

    tmp, base, col = setup
    ret = Retriever(col, warmup=False)
    res = fit_cross_encoder(ret, TRAIN, base, tmp / "ce", epochs=20, lr=5e-3, seed=0)  # a tiny model learns slowly
    # one group per training question (one chunk per document), the relevant chunk against the other five
    assert (res.questions, res.skipped, res.groups) == (6, 0, 6) and len(res.losses) == 20
    assert res.losses[-1] < 0.5 * res.losses[0]
    info = json.loads((tmp / "ce" / INFO_NAME).read_text())
    assert info["groups"] == 6 and info["base"] == str(base)
    ce = CrossEncoder.from_dir(tmp / "ce")
    docs = {r.document_id: (r.title, r.text) for r in col.rows}
    wins = 0
    for q, rel in TRAIN:
        ids = sorted(docs)
        logits = ce.score(q, [docs[d] for d in ids])
        wins += ids[int(np.argmax(logits))] in rel
    assert wins >= 5  # the training questions now find their own documents
    res2 = Retriever(col, cross_encoder=str(tmp / "ce"), warmup=False).search(TRAIN[0][0], k=3, deadline_ms=None)
    assert "cross_encoder" in res2.hits[0].scores and res2.hits[0].document_id in TRAIN[0][1]


@pytest.mark.parametrize("kwargs,match", [
    (dict(epochs=0), "epochs"), (dict(lr=-1.0), "lr"), (dict(group_size=1), "group_size"),
    (dict(max_positives=0), "max_positives"), (dict(max_length=4), "max_length"),
])
def test_fit_cross_encoder_bad_settings_raise_before_training(setup, kwargs, match):
    from medretrieve.retrieval.retriever import Retriever

    tmp, base, col = setup
    with pytest.raises(ValueError, match=match):
        fit_cross_encoder(Retriever(col, warmup=False), TRAIN, base, tmp / "ce-bad", **kwargs)
    assert not (tmp / "ce-bad").exists()


def test_fit_cross_encoder_refuses_unusable_input(setup):
    from medretrieve.retrieval.retriever import Retriever

    tmp, base, col = setup
    ret = Retriever(col, warmup=False)
    with pytest.raises(ValueError, match="none of the 1 training questions"):
        fit_cross_encoder(ret, [("what is the first line drug", {"9999"})], base, tmp / "ce-none")
    with pytest.raises(FileNotFoundError, match="config.json"):
        fit_cross_encoder(ret, TRAIN, tmp / "no-model", tmp / "ce-none2")
    taken = tmp / "ce-taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        fit_cross_encoder(ret, TRAIN, base, taken)
    assert (taken / "keep.txt").read_text() == "mine"


# ----------------------------------------------------------------- both towers (fit_encoder)
def test_fit_encoder_moves_questions_and_chunks_together(setup):
    from medretrieve.training.encoder import fit_encoder

    tmp, base, col = setup
    stored = col.vectors(np.flatnonzero(col.alive))
    before = _doc_ranks(col)
    res = fit_encoder(col, TRAIN, base, tmp / "e1", epochs=40, lr=1e-3, batch_size=4, hard_negatives=3, seed=0)
    assert (res.questions, res.skipped, res.with_hard_negatives) == (len(TRAIN), 0, len(TRAIN))
    assert res.agreement > 0.999 and res.losses[-1] < 0.5 * res.losses[0]
    m = read_manifest(res.out_dir)
    assert (m.kind, m.pooling, m.normalize) == ("symmetric", "mean", True)
    assert m.source == f"{base} fine-tuned by medretrieve fit-encoder"  # not the deleted temporary folder
    assert json.loads((Path(res.out_dir) / INFO_NAME).read_text())["hard_negatives"] == 3
    new = col.reencode(tmp / "col-e1", res.out_dir)
    after = _doc_ranks(new)
    assert sum(before) > len(TRAIN) and after == [1] * len(TRAIN), (before, after)
    assert [r.chunk_id for r in new.rows] == [r.chunk_id for r in col.rows]
    assert not np.allclose(new.vectors(np.flatnonzero(new.alive)), stored, atol=0.05)  # both sides moved
    assert np.array_equal(Collection.open(col.directory).vectors(np.flatnonzero(col.alive)), stored)


def test_fit_encoder_refuses_what_it_cannot_train(setup):
    from medretrieve.training.encoder import fit_encoder

    tmp, base, col = setup
    with pytest.raises(ValueError, match="hard_negatives"):
        fit_encoder(col, TRAIN, base, tmp / "e2", hard_negatives=-1)
    with pytest.raises(ValueError, match="hard_negatives"):
        fit_encoder(col, TRAIN, base, tmp / "e2", hard_negatives=True)
    other = make_tiny_bert_dir(tmp, "symmetric", sentence_transformers="mean", seed=11, name="other-e")
    with pytest.raises(ValueError, match="does not reproduce the collection's encoder"):
        fit_encoder(col, TRAIN, other, tmp / "e2", epochs=1)
    with pytest.raises(ValueError, match="none of the 1 training questions"):
        fit_encoder(col, [("what about gout", {"nowhere"})], base, tmp / "e2", epochs=1)
    qenc = export_onnx(base, tmp / "e-query", "query")
    with pytest.raises(ValueError, match="separate query encoder"):
        fit_encoder(Collection.open(col.directory, query_encoder=str(qenc)), TRAIN, base, tmp / "e2", epochs=1)
    assert not (tmp / "e2").exists()


def test_fit_encoder_without_hard_negatives_trains_on_the_batch(setup):
    from medretrieve.models.encoders import ArticleEncoder
    from medretrieve.training.encoder import fit_encoder

    tmp, base, col = setup
    res = fit_encoder(col, TRAIN, base, tmp / "e3", epochs=2, lr=1e-3, batch_size=3, hard_negatives=0,
                      weights_dir=tmp / "e3-weights")
    assert res.with_hard_negatives == 0 and len(res.losses) == 2 and all(np.isfinite(res.losses))
    # the kept Hugging Face weights are the fitted model: exported again, they encode as the fit's export does
    m = read_manifest(res.out_dir)
    texts = list(TOPICS.values())

    def vectors(source: Path, out: str) -> np.ndarray:
        enc = export_onnx(source, tmp / out, "symmetric", pooling=m.pooling, normalize=m.normalize,
                          max_length=m.max_length)
        return ArticleEncoder.from_dir(enc).encode(texts)

    fitted = ArticleEncoder.from_dir(res.out_dir).encode(texts)
    assert np.allclose(vectors(tmp / "e3-weights", "e3-again"), fitted, atol=1e-5)
    assert not np.allclose(vectors(base, "e3-base"), fitted, atol=1e-3)


def test_fit_encoder_keeps_weights_only_where_it_may(setup):
    from medretrieve.training.encoder import fit_encoder

    tmp, base, col = setup
    with pytest.raises(ValueError, match="weights_dir must differ from out_dir"):
        fit_encoder(col, TRAIN, base, tmp / "e4", epochs=1, weights_dir=tmp / "e4")
    taken = tmp / "e4-taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="e4-taken"):
        fit_encoder(col, TRAIN, base, tmp / "e4", epochs=1, weights_dir=taken)
    assert (taken / "keep.txt").read_text() == "mine" and not (tmp / "e4").exists()


def test_cli_fit_encoder_reencodes_and_the_result_searches(setup, tmp_path, capsys):
    from medretrieve.cli import main

    tmp, base, col = setup
    golden = tmp_path / "golden.json"
    golden.write_text(json.dumps({"questions": [
        {"body": q, "type": "summary", "documents": [f"http://www.ncbi.nlm.nih.gov/pubmed/{d}" for d in docs]}
        for q, docs in TRAIN]}))
    out, new = tmp_path / "enc", tmp_path / "col2"
    assert main(["fit-encoder", str(col.directory), str(golden), "--base", str(base), "-o", str(out),
                 "--epochs", "2", "--lr", "1e-3", "--hard-negatives", "2", "--reencode", str(new)]) == 0
    printed = capsys.readouterr().out
    assert "encoder fitted on 6 questions" in printed and f"re-encoded {len(col)} chunks" in printed
    assert main(["search", str(new), "what is the first line drug for adults", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["hits"]
    assert main(["fit-encoder", str(col.directory), str(golden), "--base", str(base), "-o", str(out)]) == 2
    assert "not empty" in capsys.readouterr().err
    # an occupied --reencode target is refused before any training
    assert main(["fit-encoder", str(col.directory), str(golden), "--base", str(base), "-o", str(tmp_path / "e"),
                 "--reencode", str(new)]) == 2
    assert "exists" in capsys.readouterr().err and not (tmp_path / "e").exists()
