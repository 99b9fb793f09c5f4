"""BM25 lexical index and biomedical tokenisation."""
from __future__ import annotations

import numpy as np
import pytest

from medretrieve.corpus.lexical import LexicalIndex, raw_tokens, tokenize


def test_gene_and_drug_tokens_stay_whole():
    toks = tokenize("IL-6, BRCA1 and COVID-19; TNF-alpha and 5-HT receptors at 2.5 mg")
    for t in ("il-6", "brca1", "covid-19", "tnf-alpha", "5-ht", "2.5"):
        assert t in toks
    assert "tnf" in toks and "alpha" in toks  # parts of hyphenated names also match
    assert "and" not in toks and "receptor" in toks  # stopwords dropped, plain words stemmed
    assert tokenize("Receptors", stem=False) == ["receptors"]
    assert "the" in tokenize("the", remove_stopwords=False)
    assert raw_tokens("IL-6 rises.") == ["il-6", "rises"]
    with pytest.raises(TypeError):
        tokenize(None)


def test_stopwords_are_the_list_stored_indexes_were_tokenised_with():
    """The Lucene list is written out (importing bm25s loads scipy); it must stay bm25s's STOPWORDS_EN, or
    every stored token list would silently disagree with new questions' tokens."""
    bm25s_stopwords = pytest.importorskip("bm25s.stopwords")
    from medretrieve.corpus.lexical import _EXTRA_STOPWORDS, stopwords

    assert stopwords() == frozenset(bm25s_stopwords.STOPWORDS_EN) | frozenset(_EXTRA_STOPWORDS)


CORPUS = [
    "Metformin is the first-line drug for type 2 diabetes.",
    "IL-6 is a cytokine raised in severe COVID-19.",
    "Aspirin inhibits platelet aggregation.",
    "BRCA1 mutations raise breast cancer risk.",
    "Insulin treats type 1 diabetes.",
]


def test_bm25_ranking_delete_add_and_masks(tmp_path):
    idx = LexicalIndex()
    idx.add(CORPUS, [10, 11, 12, 13, 14])
    ids, scores = idx.search("What is the role of IL-6 in COVID-19?", k=3)
    assert ids[0] == 11 and scores[0] > 0 and len(ids) == 1  # only rows that match come back
    ids, scores = idx.search("diabetes drug", k=5)
    assert list(ids[:2]) == [10, 14] and np.all(np.diff(scores) <= 0)
    allowed = np.zeros(20, dtype=bool)
    allowed[14] = True
    assert list(idx.search("diabetes", k=5, allowed=allowed)[0]) == [14]
    assert idx.delete([10, 99]) == 1 and len(idx) == 4
    assert 10 not in idx.search("metformin diabetes", k=5)[0]
    idx.add(["Metformin lowers glucose in diabetes."], [20])
    assert idx.search("metformin", k=5)[0].tolist() == [20]
    with pytest.raises(ValueError, match="already present"):
        idx.add(["dup"], [20])
    with pytest.raises(ValueError):
        idx.add(["a", "b"], [1])
    with pytest.raises(ValueError):
        idx.search("x", k=0)
    idx.save(tmp_path / "lex")
    back = LexicalIndex.load(tmp_path / "lex")
    assert len(back) == 5
    for q in ("metformin", "BRCA1 breast cancer", "aspirin platelets"):
        a, sa = idx.search(q, k=3)
        b, sb = back.search(q, k=3)
        assert a.tolist() == b.tolist() and np.allclose(sa, sb)
    assert back.search("zebra", k=3)[0].size == 0


def test_loaded_tokens_share_one_string_per_distinct_token(tmp_path):
    idx = LexicalIndex()
    idx.add(["metformin lowers glucose", "metformin and lactic acidosis"], [0, 1])
    idx.save(tmp_path)
    back = LexicalIndex.load(tmp_path)
    assert back.tokens_of(0) == idx.tokens_of(0)
    assert back.tokens_of(0)[0] is back.tokens_of(1)[0]  # "metformin": one object, not one per occurrence


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        LexicalIndex.load(tmp_path)
    (tmp_path / LexicalIndex.FILE).write_text('{"format": "other"}')
    with pytest.raises(ValueError, match="not a medretrieve lexical index"):
        LexicalIndex.load(tmp_path)


def test_empty_index_searches_to_nothing():
    idx = LexicalIndex()
    ids, scores = idx.search("anything", k=3)
    assert ids.size == 0 and scores.size == 0


def test_codes_match_with_and_without_hyphens():
    assert "cpx351" in tokenize("CPX-351 is liposomal") and "cpx-351" in tokenize("CPX-351 is liposomal")
    assert "il6" in tokenize("IL-6") and "covid19" in tokenize("COVID-19")
    assert "antiinflammatory" not in tokenize("anti-inflammatory")  # only codes with digits are joined
    idx = LexicalIndex()
    idx.add(["CPX-351 was approved for AML", "daunorubicin and cytarabine"], [0, 1])
    ids, _ = idx.search("What is CPX351?", k=2)
    assert ids.tolist() == [0]


def test_idf_matches_the_bm25_formula_and_follows_deletions():
    idx = LexicalIndex(stem=False, remove_stopwords=False)
    idx.add(["aa bb", "aa cc", "aa bb dd", "ee"], [10, 11, 12, 13])
    n = 4
    expect = [np.log1p((n - df + 0.5) / (df + 0.5)) for df in (3, 2, 0)]
    np.testing.assert_allclose(idx.idf(["aa", "bb", "zz"]), expect)
    idx.delete([12])
    n = 3
    np.testing.assert_allclose(idx.idf(["aa", "bb"]), [np.log1p((n - df + 0.5) / (df + 0.5)) for df in (2, 1)])
    idx.add(["bb bb"], [14])  # a re-fit recomputes the frequencies
    np.testing.assert_allclose(idx.idf(["bb"]), [np.log1p((4 - 2 + 0.5) / (2 + 0.5))])


def test_scores_for_picks_the_rows_of_the_given_ids():
    idx = LexicalIndex()
    idx.add(["aspirin inhibits platelets", "metformin lowers glucose", "aspirin for pain"], [7, 3, 5])
    full = dict(zip(*[a.tolist() for a in idx.search("aspirin platelets", k=3)]))
    got = idx.scores_for("aspirin platelets", [5, 7, 3, 99, -1])
    np.testing.assert_allclose(got[:2], [full[5], full[7]], rtol=1e-6)
    assert got[2] == 0.0 and got[3] == 0.0 and got[4] == 0.0  # no match, unknown ids
    vec = idx.scores("aspirin platelets")  # one scoring pass serves top-k and lookups
    np.testing.assert_array_equal(idx.scores_for(vec, [5, 7, 3, 99, -1]), got)
    for a, b in zip(idx.top(vec, k=2, allowed=np.array([0, 0, 0, 0, 0, 1, 0, 1], bool)),
                    idx.search("aspirin platelets", k=2, allowed=np.array([0, 0, 0, 0, 0, 1, 0, 1], bool))):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="one value per row"):
        idx.top(vec[:2], k=2)
    idx.delete([7])
    assert idx.scores_for("aspirin platelets", [7])[0] == 0.0
    assert LexicalIndex().scores_for("x", [1, 2]).tolist() == [0.0, 0.0]


def test_parts_of_compounds_with_digits_match():
    # "anti-CCR4" must answer a question about CCR4; "MIC-1/GDF15" one about GDF15
    toks = tokenize("Mogamulizumab (anti-CCR4) and MIC-1/GDF15, IL-17A")
    assert {"ccr4", "gdf15", "17a", "anti-ccr4", "mic-1/gdf15"} <= set(toks)
    assert "il" not in toks and "1" not in toks  # short parts stay out
    idx = LexicalIndex()
    idx.add(["Mogamulizumab (Anti-CCR4) in HTLV-1-associated myelopathy", "CCR5 antagonists in HIV"], [0, 1])
    ids, _ = idx.search("Name one CCR4 targeted drug", k=2)
    assert ids.tolist() == [0]



def test_tokens_of_returns_the_stored_tokens_of_live_rows():
    idx = LexicalIndex()
    idx.add(["Mogamulizumab (anti-CCR4)", "metformin for diabetes"], [7, 3])
    assert idx.tokens_of(7) == tokenize("Mogamulizumab (anti-CCR4)")
    assert idx.tokens_of(3) == tokenize("metformin for diabetes")
    assert idx.tokens_of(5) is None and idx.tokens_of(99) is None and LexicalIndex().tokens_of(0) is None
    idx.delete([7])
    assert idx.tokens_of(7) is None


def test_extra_tokens_up_weight_query_terms():
    idx = LexicalIndex()
    idx.add(["mechanism of action of losigamone", "motolimod is a TLR8 agonist", "motolimod trial"], [0, 1, 2])
    plain = idx.scores("mechanism of action of motolimod")
    boosted = idx.scores("mechanism of action of motolimod", extra_tokens=["motolimod"])
    np.testing.assert_array_equal(boosted[0], plain[0])  # no subject word in row 0: unchanged
    assert (boosted[1:] > plain[1:]).all()
    np.testing.assert_array_equal(idx.scores("motolimod", extra_tokens=["unknown-token"]), idx.scores("motolimod"))


def test_numpy_scoring_equals_bm25s_scoring():
    """Answering reads the fitted matrix with numpy alone; the scores are bm25s's own (repeated tokens too)."""
    import random

    import bm25s

    from medretrieve.corpus.lexical import BM25Matrix

    rng = random.Random(0)
    words = [f"w{i}" for i in range(300)]
    docs = [[rng.choice(words) for _ in range(rng.randint(1, 40))] for _ in range(500)]
    matrix = BM25Matrix.fit(docs, 1.2, 0.6)
    ref = bm25s.BM25(k1=1.2, b=0.6)
    ref.index(docs, show_progress=False)
    for q in (["w1", "w2", "w2", "unseen"], ["w7"], ["w3", "w4", "w5", "w3"]):
        np.testing.assert_allclose(matrix.scores(q), ref.get_scores([t for t in q if t in ref.vocab_dict]),
                                   rtol=1e-6, atol=1e-7)
    assert not matrix.scores(["unseen"]).any()


def test_numpy_fit_writes_bm25s_weights_block_by_block(tmp_path):
    """fit_ids (blocks of rows, optionally straight into memory-mapped files) gives each term bm25s's postings and
    weights, bit for bit; rows without tokens are counted in the average length as bm25s counts them."""
    import random

    import bm25s

    from medretrieve.corpus.lexical import BM25Matrix, TokenStore

    rng = random.Random(3)
    words = [f"t{i}" for i in range(200)]
    docs = [[rng.choice(words[:rng.randint(1, 200)]) for _ in range(rng.randint(0, 30))] for _ in range(700)]
    docs[5] = []
    ref = bm25s.BM25(k1=1.5, b=0.75)
    ref.index(docs, show_progress=False)
    store = TokenStore()
    store.extend(docs)
    for block_rows, directory in ((64, None), (1000, tmp_path / "m")):
        m = BM25Matrix.fit_ids(store.flat, store.offsets, store.vocab, 1.5, 0.75, directory=directory,
                               block_rows=block_rows)
        assert m.num_docs == len(docs)
        for token, c in ref.vocab_dict.items():
            if not token:
                continue
            a, z = ref.scores["indptr"][c], ref.scores["indptr"][c + 1]
            mine = m.vocab[token]
            b0, b1 = m.indptr[mine], m.indptr[mine + 1]
            np.testing.assert_array_equal(m.indices[b0:b1], ref.scores["indices"][a:z])
            np.testing.assert_array_equal(m.data[b0:b1], ref.scores["data"][a:z])
    m.save(tmp_path / "m")  # the arrays are already there (memory-mapped): save adds the vocabulary only
    loaded = BM25Matrix.load(tmp_path / "m", mmap=True)
    np.testing.assert_array_equal(loaded.scores(["t1", "t2", "t2"]), m.scores(["t1", "t2", "t2"]))
    assert loaded.scores(["t1"]).any()


def test_scores_from_term_counts_and_shared_statistics_equal_one_index_over_every_row():
    """A corpus split in two indexes: each part's term counts, scored with the whole corpus's statistics
    (document frequencies and lengths summed over the parts), give the one-index scores bit for bit."""
    import random

    from medretrieve.corpus.lexical import LexicalIndex, bm25_from_counts

    rng = random.Random(5)
    words = ["metformin", "insulin", "glucose", "gout", "urate", "asthma", "il-6", "brca1", "statin", "aspirin"]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 25))) for _ in range(300)]
    whole = LexicalIndex()
    whole.add(texts, range(300))
    parts = [LexicalIndex(), LexicalIndex()]
    parts[0].add(texts[::2], range(0, 300, 2))
    parts[1].add(texts[1::2], range(1, 300, 2))
    n = sum(p.totals()[0] for p in parts)
    total = sum(p.totals()[1] for p in parts)
    assert (n, total) == whole.totals()
    for query in (["metformin", "glucos", "metformin"], ["il-6", "unknown"], ["urat"]):
        distinct = list(dict.fromkeys(query))
        times = [query.count(t) for t in distinct]
        df = sum(p.document_frequencies(distinct) for p in parts)
        np.testing.assert_array_equal(df, whole.document_frequencies(distinct))
        for part, ids in zip(parts, (range(0, 300, 2), range(1, 300, 2))):
            tf, lengths = part.term_counts(list(ids) + [999], distinct)
            assert lengths[-1] == 0 and not tf[-1].any()  # an unknown id
            got = bm25_from_counts(times, tf[:-1], lengths[:-1], df, n, total / n, whole.k1, whole.b)
            np.testing.assert_array_equal(got, whole.scores(query)[list(ids)])
