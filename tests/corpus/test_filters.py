"""Document metadata and the filter language (issue 45 items 1-3): MEDLINE fields read from MEDLINE's own XML, typed
fields inferred and recorded, filters parsed (text and JSON), refused with the field named, compiled to row masks
that every hit of a search passes, retracted articles out by default, live add / delete kept consistent."""
from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from medretrieve.corpus.collection import Collection
from medretrieve.corpus.metadata import MetadataColumns, infer_fields
from medretrieve.corpus.sources import read_records
from medretrieve.filters import All, AnyOf, Compare, Flag, FilterError, Member, Not, parse_filter
from medretrieve.retrieval.filtered import COMPILE_THREAD, FilteredDense
from medretrieve.retrieval.retriever import Retriever

MEDLINE = Path(__file__).resolve().parents[1] / "fixtures" / "medline" / "filters_sample.xml"


def test_medline_records_give_their_metadata():
    recs = {r.id: r.metadata for r in read_records(MEDLINE)}
    review = recs["31000001"]
    assert review["year"] == 2020 and review["publication_date"] == "2020-07-15"
    assert review["journal"] == "Diabetes care" and review["language"] == ["eng"]
    assert review["publication_type"] == ["Journal Article", "Systematic Review", "Review"]
    assert review["mesh"] == ["Diabetes Mellitus, Type 2", "Humans", "Metformin"]
    # major by its descriptor (Metformin) or by a qualifier (Diabetes ... / drug therapy)
    assert review["mesh_major"] == ["Diabetes Mellitus, Type 2", "Metformin"]
    assert review["retracted"] is False
    assert recs["31000002"]["publication_date"] == "2009-11"  # a numeric month
    assert recs["31000003"]["year"] == 2016 and recs["31000003"]["retracted"] is True  # MedlineDate; the type
    assert recs["31000004"]["retracted"] is True  # a RetractionIn notice
    assert recs["31000004"]["language"] == ["eng", "ger"]


def test_fields_are_inferred_with_their_types():
    fields = infer_fields([r.metadata for r in read_records(MEDLINE)])
    assert fields == {"journal": "keyword", "language": "keywords", "mesh": "keywords", "mesh_major": "keywords",
                      "publication_date": "date", "publication_type": "keywords", "retracted": "boolean",
                      "year": "integer"}
    assert infer_fields([{"a": 1}, {"a": 2.5}, {"b": {"x": 1}}, {"c": "x"}, {"c": ["y"]}]) == {
        "a": "float", "c": "keywords"}


def test_the_text_and_json_forms_are_one_filter():
    text = 'year >= 2015 and publication_type in (Review, "Randomized Controlled Trial") and not retracted'
    f = parse_filter(text)
    assert f == All((Compare("year", ">=", 2015), Member("publication_type", ("Review", "Randomized Controlled Trial")),
                     Not(Flag("retracted"))))
    assert parse_filter(f.to_json()) == f and parse_filter(f.text()) == f
    # precedence: not > and > or; parentheses; 'not in'; '=' as '=='
    g = parse_filter("a = 1 or b < 2.5 and not (c not in ('x y', z))")
    assert g == AnyOf((Compare("a", "==", 1), All((Compare("b", "<", 2.5), Not(Not(Member("c", ("x y", "z"))))))))
    assert parse_filter(g.text()) == g


@pytest.mark.parametrize("bad, words", [
    ("year >=", "ends too early"), ("year >= 2015 foo", "position 14"), ("(year > 1", "ends too early"),
    ("and", "field name"), ("year in 2015", "expected '('"), ("", "empty"), ("year ~ 2", "unexpected character"),
    ({"field": "year", "op": "~", "value": 1}, "unknown operator"), ({"and": []}, "non-empty"),
    ({"field": "year"}, "condition"), (5, "filter string or object"), ("not " * 40 + "x", "nested deeper"),
    ({"field": "year", "op": "in", "value": 2015}, "list"), ("year > 1e400", "1e400 at position 8 is out of range"),
    ({"field": "year", "op": ">=", "value": float("inf")}, "finite number"),
    ({"field": "year", "op": "in", "value": [1, float("-inf")]}, "list of values")])
def test_unreadable_filters_are_refused_with_the_place(bad, words):
    with pytest.raises(FilterError, match=re.escape(words)):
        parse_filter(bad)


@settings(max_examples=60, deadline=None)
@given(st.recursive(
    st.builds(Compare, st.sampled_from(["year", "journal"]), st.sampled_from(["==", "!=", "<", ">="]),
              st.one_of(st.integers(-5, 3000), st.floats(allow_nan=False, allow_infinity=False),
                        st.text("ab ()'\"\\,", min_size=1, max_size=6))),
    lambda inner: st.one_of(st.builds(Not, inner), st.builds(lambda xs: All(tuple(xs)), st.lists(inner, min_size=2,
                                                                                                  max_size=3)),
                            st.builds(lambda xs: AnyOf(tuple(xs)), st.lists(inner, min_size=2, max_size=3))),
    max_leaves=6))
def test_any_filter_reads_back_from_its_text_and_its_json(f):
    assert parse_filter(f.text()).text() == f.text()
    assert parse_filter(f.to_json()).text() == f.text()


def _docs():
    return [{"year": 2010, "type": ["Review"], "retracted": False, "journal": "A", "date": "2010-05-01"},
            {"year": 2016, "type": ["Case Reports", "Journal Article"], "retracted": False, "journal": "B"},
            {"year": 2020, "type": ["Randomized Controlled Trial"], "retracted": True, "journal": "A",
             "date": "2020-01"},
            {"type": ["Review"], "journal": "C"}]


@pytest.mark.parametrize("where, expected", [
    ("year >= 2015", [1, 2]), ("year < 2015", [0]), ("not year >= 2015", [0, 3]), ("type == Review", [0, 3]),
    ("type in ('Case Reports', 'Randomized Controlled Trial')", [1, 2]), ("type not in (Review)", [1, 2]),
    ("retracted", [2]), ("not retracted", [0, 1, 3]), ("journal != A", [1, 3]), ("journal = A or year = 2016", [0, 1, 2]),
    ("date >= 2015", [2]), ("date < '2010-06'", [0]), ("year in (2010, 2020)", [0, 2])])
def test_filters_select_the_documents_they_say(where, expected):
    docs = _docs()
    cols = MetadataColumns(docs, infer_fields(docs))
    assert np.flatnonzero(cols.mask(where)).tolist() == expected
    assert cols.mask(where) is cols.mask(parse_filter(where).to_json())  # compiled once per distinct filter


@pytest.mark.parametrize("where, words", [
    ("yeer > 1", "unknown field 'yeer'"), ("journal > A", "journal is a keyword field: > needs"),
    ("year == x", "year is an integer field, got 'x'"), ("year", "not a boolean"), ("retracted == 3", "boolean"),
    ("date > 'soon'", "date field")])
def test_ill_typed_filters_name_the_field(where, words):
    docs = _docs()
    with pytest.raises(FilterError, match=re.escape(words)) as info:
        MetadataColumns(docs, infer_fields(docs)).mask(where)
    assert info.value.field == where.split()[0]


def test_facets_count_documents_per_value():
    docs = _docs()
    cols = MetadataColumns(docs, infer_fields(docs))
    every = np.arange(len(docs))
    assert cols.facet("type", every) == [("Review", 2), ("Case Reports", 1), ("Journal Article", 1),
                                         ("Randomized Controlled Trial", 1)]
    assert cols.facet("year", every) == [(2010, 1), (2016, 1), (2020, 1)]
    assert cols.facet("date", every) == [(2010, 1), (2020, 1)]  # dates by year
    assert cols.facet("type", np.array([0, 0, 3]), top=1) == [("Review", 2)]
    with pytest.raises(FilterError, match="unknown field"):
        cols.facet("nope", every)


@pytest.fixture(scope="module")
def medline_collection(tmp_path_factory):
    return Collection.build(str(MEDLINE), tmp_path_factory.mktemp("c") / "col", "default", progress=False)


def test_searches_keep_inside_their_filter_and_leave_retracted_articles_out(medline_collection):
    col = medline_collection
    r = Retriever(col)
    recs = {x.id: x.metadata for x in read_records(MEDLINE)}
    plain = r.search("metformin type 2 diabetes trial", k=10)
    assert {h.document_id for h in plain.hits} == {"31000001", "31000002", "31000005"}  # no retracted one
    assert any(s.name == "filter" for s in plain.stages)
    every = r.search("metformin type 2 diabetes trial", k=10, include_retracted=True)
    assert {h.document_id for h in every.hits} == set(recs)
    for where in ["year >= 2015", "publication_type in (Review, 'Practice Guideline')", "mesh == Metformin",
                  "journal != 'Diabetes care'", {"field": "year", "op": "<", "value": 2019}]:
        res = r.search("metformin type 2 diabetes", k=10, where=where, include_retracted=True)
        docs = np.flatnonzero(col.snapshot().metadata_columns().mask(where))
        passing = {col.rows.documents[int(d)] for d in docs}
        assert res.hits and {h.document_id for h in res.hits} <= passing
        # every passing document's chunks are few: all of them come back (no filter returns fewer than k
        # when k rows pass)
        assert len(res.hits) == min(10, int(col.filter_rows(where).sum()))
    res = r.search("metformin", k=5, where="retracted")
    assert {h.document_id for h in res.hits} == {"31000003", "31000004"}  # naming the field asks for them
    with pytest.raises(ValueError, match="unknown field 'yeer'"):
        r.search("metformin", where="yeer > 2000")
    with pytest.raises(ValueError, match="where"):
        r.search("metformin", where="year >")


def test_live_add_and_delete_keep_the_metadata(medline_collection, tmp_path):
    col = Collection.open(medline_collection.directory)
    col = Collection.open(Path(col.directory))
    col.save(tmp_path / "copy")
    col = Collection.open(tmp_path / "copy")
    assert (tmp_path / "copy" / "rows" / "metadata.json").exists()
    assert col.manifest["metadata"]["fields"]["publication_type"] == "keywords"
    col.add([{"id": "new1", "title": "Metformin in 2024", "text": "Metformin for type 2 diabetes, a new trial.",
              "year": 2024, "publication_type": ["Randomized Controlled Trial"], "retracted": False}])
    assert col.filter_rows("year >= 2024").sum() >= 1
    r = Retriever(col)
    assert {h.document_id for h in r.search("metformin", k=5, where="year >= 2024").hits} == {"new1"}
    col.delete(["new1", "31000005"])
    assert col.filter_rows("year >= 2021").sum() == 0
    again = Collection.open(tmp_path / "copy")
    assert again.filter_rows("year >= 2021").sum() == 0 and again.metadata_fields["year"] == "integer"
    assert Retriever(again).search("metformin", k=5, where="year >= 2021").hits == []


class _Index:
    """A graph that finds only the rows it is told to (a walk that loses the filtered rows)."""

    def __init__(self, found):
        self.found = found

    def search(self, vectors, k, ef=None, labels=None):
        ids = np.full((len(vectors), k), -1, dtype=np.int64)
        ids[:, :min(k, len(self.found))] = self.found[:k]
        return ids, np.zeros((len(vectors), k), dtype=np.float32)


class _Col:
    def __init__(self, vectors, found):
        self.v, self.dense, self.dim = vectors, _Index(found), vectors.shape[1]

    def vectors(self, rows):
        return self.v[np.asarray(rows)]

    def allowed(self, labels):
        return np.ones(len(self.v), dtype=bool)


@pytest.mark.parametrize("share", [0.5, 0.05, 0.001])
@pytest.mark.parametrize("exact_rows", [100, 4096])  # the graph's over-fetch at 50%, or an exact scan of them all
def test_the_filtered_dense_search_returns_the_exact_allowed_top_k(share, exact_rows, monkeypatch):
    import medretrieve.retrieval.filtered as filtered

    monkeypatch.setattr(filtered, "EXACT_ROWS", exact_rows)
    rng = np.random.default_rng(1)
    v = rng.normal(size=(4000, 16)).astype(np.float32)
    mask = rng.random(4000) < share
    mask[:3] = True
    q = rng.normal(size=(2, 16)).astype(np.float32)
    dense = FilteredDense(_Col(v, np.arange(40)), mask)  # the walk finds rows 0..39 only
    ids, scores = dense.search(q, k=10)
    rows = np.flatnonzero(mask)
    for i in range(2):
        want = rows[np.argsort(-(v[rows] @ q[i]), kind="stable")][:10]
        got = ids[i][ids[i] >= 0]
        assert mask[got].all() and len(got) == min(10, len(rows))
        if share < 0.1 or len(np.flatnonzero(mask[:40])) < 10:
            assert got.tolist() == want.tolist()
    none = FilteredDense(_Col(v, np.arange(40)), np.zeros(4000, dtype=bool)).search(q, k=5)[0]
    assert (none == -1).all()


def test_facets_over_the_filtered_collection_and_over_hits(medline_collection):
    from medretrieve.filters import facet_hits

    r = Retriever(medline_collection)
    got = r.facets(["year", "publication_type"], where="year >= 2010")
    assert got["documents"] == 2 and got["facets"]["year"] == [(2020, 1), (2022, 1)]
    assert r.facets(["retracted"], include_retracted=True)["facets"]["retracted"] == [(False, 3), (True, 2)]
    assert r.facets(["journal"], top=1)["facets"]["journal"] == [("Diabetes care", 2)]
    with pytest.raises(ValueError, match="unknown field 'yeer'"):
        r.facets(["yeer"])
    with pytest.raises(TypeError, match="fields"):
        r.facets("year")
    res = r.search("metformin type 2 diabetes", k=10, include_retracted=True)
    by = facet_hits(res.hits, ["year", "publication_type", "publication_date"])
    assert sum(n for _, n in by["year"]) == len({h.document_id for h in res.hits})  # a document counts once
    assert ("Randomized Controlled Trial", 2) in by["publication_type"]
    assert by["publication_date"] == facet_hits([h.to_dict() for h in res.hits], ["publication_date"])[
        "publication_date"] and all(isinstance(v, int) for v, _ in by["publication_date"])


class _NativeIndex:
    """An index that takes the bitset (``search(allowed=)``) and answers rows 0..k-1 whatever it allows."""

    def __init__(self):
        self.bitsets = []

    def search(self, vectors, k, ef=None, labels=None, allowed=None):
        self.bitsets.append(allowed)
        return np.tile(np.arange(k), (len(vectors), 1)), np.zeros((len(vectors), k), dtype=np.float32)


def test_the_native_row_filter_is_used_and_checked():
    rng = np.random.default_rng(2)
    v = rng.normal(size=(500, 8)).astype(np.float32)
    mask = np.zeros(500, dtype=bool)
    mask[:20] = True
    col = _Col(v, np.arange(10))
    col.dense = _NativeIndex()
    dense = FilteredDense(col, mask)
    dense.native = True  # as with a core that reads bitsets
    ids, _ = dense.search(v[:1], k=10)
    assert ids[0].tolist() == list(range(10)) and col.dense.bitsets[0].dtype == np.uint64
    assert dense.bitset() is col.dense.bitsets[0]  # packed once per view
    mask2 = np.zeros(500, dtype=bool)
    mask2[100:130] = True  # the index answers rows that fail: they are dropped and the allowed rows scanned
    dense2 = FilteredDense(col, mask2)
    dense2.native = True
    got = dense2.search(v[:2], k=10)[0]
    rows = np.flatnonzero(mask2)
    for i in range(2):
        assert got[i].tolist() == rows[np.argsort(-(v[rows] @ v[i]), kind="stable")][:10].tolist()


def test_a_filter_searched_again_is_compiled_by_the_hnsw_index_in_the_background():
    import time

    import medretrieve
    from medretrieve.index import CompiledFilter

    rng = np.random.default_rng(5)
    v = rng.normal(size=(12000, 16)).astype(np.float32)
    index = medretrieve.Index("ip", 16)
    index.init_index(len(v), M=12, ef_construction=80)
    index.add(v)
    col = _Col(v, np.arange(10))
    col.dense = index
    mask = rng.random(len(v)) < 0.1
    dense = FilteredDense(col, mask)
    q = rng.normal(size=(3, 16)).astype(np.float32)
    first = dense.search(q, k=10, ef=64)[0]
    assert isinstance(dense.row_filter(), np.ndarray)  # the second search starts the compile, on the bitset still
    compiling = [t for t in threading.enumerate() if t.name == COMPILE_THREAD]
    assert all(not t.daemon for t in compiling)  # an exit waits for it (a daemon one aborted in native code)
    deadline = time.monotonic() + 30
    while not isinstance(dense.row_filter(), CompiledFilter) and time.monotonic() < deadline:
        time.sleep(0.01)
    compiled = dense.row_filter()
    assert isinstance(compiled, CompiledFilter) and compiled.linked and compiled.count == int(mask.sum())
    again = dense.search(q, k=10, ef=64)[0]
    rows = np.flatnonzero(mask)
    for i in range(3):
        want = set(rows[np.argsort(-(v[rows] @ q[i]))][:10].tolist())
        assert mask[again[i]].all() and len(set(again[i].tolist()) & want) >= 9
        assert len(set(first[i].tolist()) & set(again[i].tolist())) >= 9


def test_a_process_that_exits_while_a_filter_compiles_exits_cleanly(tmp_path):
    script = tmp_path / "exit_while_compiling.py"
    script.write_text(textwrap.dedent("""
        import numpy as np, medretrieve
        from medretrieve.retrieval.filtered import FilteredDense

        class Col:
            def __init__(self, v, dense):
                self.v, self.dense, self.dim = v, dense, v.shape[1]

            def vectors(self, rows):
                return self.v[np.asarray(rows)]

        rng = np.random.default_rng(0)
        v = rng.normal(size=(60000, 16)).astype(np.float32)
        index = medretrieve.Index("ip", 16)
        index.init_index(len(v), M=16, ef_construction=40)
        index.add(v)
        dense = FilteredDense(Col(v, index), rng.random(len(v)) < 0.3)
        dense.search(v[:1], k=5)
        dense.search(v[:1], k=5)  # starts compiling 18,000 rows' links; the script ends at once
    """))
    for _ in range(3):  # with a daemon compile thread, about one exit in three aborted
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]


def test_a_collection_without_metadata_columns_refuses_where_naming_it(medline_collection):
    from medretrieve.outbound import Deadline
    from medretrieve.retrieval.results import StageLog
    from medretrieve.retrieval.scope import SearchScope
    from medretrieve.wire import SearchOptionValueError

    r = Retriever(medline_collection)

    class Bare:  # a collection view that cannot filter (as a sharded search's)
        def __init__(self, base):
            self.base = base

        def __getattr__(self, name):
            if name in ("filter_rows", "metadata_fields", "snapshot"):
                raise AttributeError(name)
            return getattr(self.base, name)

    scope = r.scope()
    bare = SearchScope(Bare(scope.collection), scope.first, scope.tokens)
    dl = Deadline(None)
    assert r._filtered_scope(bare, None, False, dl, StageLog(dl)) is bare  # nothing to leave out
    with pytest.raises(SearchOptionValueError, match="no document metadata") as info:
        r._filtered_scope(bare, "year > 1", False, dl, StageLog(dl))
    assert info.value.option == "where"


def test_declared_fields_replace_the_inferred_ones_and_last(medline_collection, tmp_path):
    medline_collection.save(tmp_path / "declared")
    col = Collection.open(tmp_path / "declared")
    with pytest.raises(ValueError, match="unknown types"):
        col.declare_metadata({"year": "number"})
    col.declare_metadata({"year": "float", "journal": "keyword", "publication_date": "date"})
    assert col.metadata_fields == {"year": "float", "journal": "keyword", "publication_date": "date"}
    assert col.filter_rows("year >= 2019.5").sum() > 0
    with pytest.raises(FilterError, match="unknown field 'publication_type'"):
        col.filter_rows("publication_type == Review")
    col.add([{"id": "x9", "title": "Later", "text": "Metformin, later.", "year": 2025, "journal": "J"}])
    again = Collection.open(tmp_path / "declared")
    assert again.manifest["metadata"] == {"fields": {"year": "float", "journal": "keyword",
                                                     "publication_date": "date"}, "declared": True}
    assert again.filter_rows("year > 2024").sum() == 1


def test_a_strict_declaration_refuses_conflicting_values_and_counts_live_documents(medline_collection, tmp_path):
    medline_collection.save(tmp_path / "strict")
    col = Collection.open(tmp_path / "strict")
    recs = [r.metadata for r in read_records(MEDLINE)]
    assert col.metadata_counts() == {name: sum(1 for m in recs if m.get(name) not in (None, []))
                                     for name in col.metadata_fields}  # an empty list holds no value
    with pytest.raises(ValueError, match=r"year \(keyword\): 5 documents hold values such as 20\d\d"):
        col.declare_metadata({"year": "keyword", "journal": "keyword"}, strict=True)
    assert not col.manifest["metadata"]["declared"]
    col.delete(["31000001"])
    col.declare_metadata({"year": "date", "journal": "keyword", "mesh": "keywords"}, strict=True)
    assert col.metadata_counts() == {"year": 4, "journal": 4,
                                     "mesh": sum(1 for m in recs[1:] if m.get("mesh"))}
    col.declare_metadata({"journal": "integer"})  # not strict: what does not fit counts as missing
    assert col.metadata_counts() == {"journal": 0}
