"""Answers from filtered evidence (issue 45): ``Answerer.answer`` takes the search's filter options (``where``,
``include_retracted``, ``evidence_prior``, ``recency_half_life``), passes the ones given to the evidence's search
and refuses a bad one as ``Retriever.search`` does; each source carries its document's year and publication types
(``records.source_facts``) where the collection records them."""
from __future__ import annotations

from pathlib import Path

import pytest

from medretrieve.corpus.collection import Collection
from medretrieve.generation.generate import Answerer
from medretrieve.records import Answer, SearchResult, source_facts
from medretrieve.retrieval.retriever import Retriever
from medretrieve.wire import FILTER_OPTIONS, SearchOptionTypeError, SearchOptionValueError

MEDLINE = Path(__file__).resolve().parents[1] / "fixtures" / "medline" / "filters_sample.xml"
QUESTION = "Is metformin the first-line drug for type 2 diabetes?"


@pytest.fixture(scope="module")
def retriever():
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        yield Retriever(Collection.build(str(MEDLINE), Path(folder) / "col", "default", progress=False))


def _answer(retriever, **options):
    return Answerer(retriever, None, k=10, retrieve_deadline_ms=None).answer(QUESTION, **options)


def test_every_evidence_hit_of_a_filtered_answer_passes_its_filter(retriever):
    everything = _answer(retriever, include_retracted=True)
    assert any(h.metadata.get("year", 0) < 2021 for h in everything.evidence)  # the filter below drops some
    recent = _answer(retriever, where="year >= 2021")
    assert recent.evidence and all(h.metadata["year"] >= 2021 for h in recent.evidence)
    assert recent.citations and not recent.abstained  # answered from the filtered evidence alone
    reviews = _answer(retriever, where={"field": "publication_type", "op": "in", "value": ["Review"]})
    assert reviews.evidence and all("Review" in h.metadata["publication_type"] for h in reviews.evidence)
    # the same evidence as the search with the same options finds
    searched = retriever.search(QUESTION, k=10, deadline_ms=None, where="year >= 2021")
    assert [h.chunk_id for h in recent.evidence] == [h.chunk_id for h in searched.hits]


def test_retracted_evidence_only_when_asked_for(retriever):
    assert not any(h.metadata["retracted"] for h in _answer(retriever).evidence)
    kept = _answer(retriever, include_retracted=True)
    assert any(h.metadata["retracted"] for h in kept.evidence)
    only = _answer(retriever, where="retracted")
    assert only.evidence and all(h.metadata["retracted"] for h in only.evidence)


def test_the_priors_reach_the_evidence_search(retriever):
    for prior in ({"evidence_prior": True}, {"recency_half_life": 2.0}):
        ans = _answer(retriever, include_retracted=True, **prior)
        searched = retriever.search(QUESTION, k=10, deadline_ms=None, include_retracted=True, **prior)
        assert searched.stage("priors").ran
        assert [h.chunk_id for h in ans.evidence] == [h.chunk_id for h in searched.hits]
    ordered = _answer(retriever, include_retracted=True, evidence_prior=True)
    assert ordered.evidence[0].metadata["publication_type"] == ["Practice Guideline"]


class _Recording:
    """A retriever that records the options of each search and finds nothing."""

    def __init__(self):
        self.calls = []

    def search(self, question, **options):
        self.calls.append(options)
        return SearchResult(question, [], "summary", True, ["no hits"], False, [], {})


def test_only_the_options_given_reach_the_search():
    fake = _Recording()
    answerer = Answerer(fake, None, k=3, retrieve_deadline_ms=None)
    answerer.answer(QUESTION)
    answerer.answer(QUESTION, where="year >= 2015", recency_half_life=5)
    assert fake.calls[0] == {"k": 3}  # none given: the retriever's own settings
    assert fake.calls[1] == {"k": 3, "where": "year >= 2015", "recency_half_life": 5.0}


@pytest.mark.parametrize("options, error, option", [
    ({"where": "year >"}, SearchOptionValueError, "where"),
    ({"where": 2015}, SearchOptionTypeError, "where"),
    ({"include_retracted": "yes"}, SearchOptionTypeError, "include_retracted"),
    ({"evidence_prior": 1}, SearchOptionTypeError, "evidence_prior"),
    ({"recency_half_life": 0}, SearchOptionValueError, "recency_half_life"),
    ({"recency_half_life": "5"}, SearchOptionTypeError, "recency_half_life"),
])
def test_a_bad_option_is_refused_before_anything_is_retrieved(options, error, option):
    fake = _Recording()
    with pytest.raises(error) as refused:
        Answerer(fake, None).answer(QUESTION, **options)
    assert refused.value.option == option and option in str(refused.value)
    assert fake.calls == []
    assert set(options) <= set(FILTER_OPTIONS)


def test_a_field_the_collection_lacks_is_refused_naming_where(retriever):
    with pytest.raises(SearchOptionValueError, match="unknown field 'yeer'") as refused:
        _answer(retriever, where="yeer >= 2015")
    assert refused.value.option == "where"
    with pytest.raises(SearchOptionValueError, match="journal"):
        _answer(retriever, where="journal > 3")  # a keyword field has no order


def test_each_source_carries_its_year_and_types_where_recorded(retriever):
    ans = _answer(retriever, include_retracted=True)
    cited = {n for c in ans.citations for n in c.sources}
    assert cited
    for n in cited:
        meta = ans.evidence[n - 1].metadata
        assert source_facts(meta) == {key: meta[key] for key in ("year", "publication_type") if key in meta}
        assert "publication_type" in source_facts(meta)
    # as the answer travels (HTTP, JSON): the evidence keeps its metadata
    again = Answer.from_dict(ans.to_dict(explain=False))
    assert [source_facts(h.metadata) for h in again.evidence] == [source_facts(h.metadata) for h in ans.evidence]


def test_source_facts_leave_out_what_is_not_recorded():
    assert source_facts({"year": 2019, "publication_type": "Review", "journal": "BMJ"}) == {
        "year": 2019, "publication_type": ["Review"]}
    assert source_facts({"source": "jsonl"}) == {}
    assert source_facts({"year": True, "publication_type": []}) == {}  # no year invented from a flag
    assert source_facts({"year": "2019"}) == {}  # a text year is not an integer field: not shown as one
    assert source_facts(None) == {}
