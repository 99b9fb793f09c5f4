"""Each framework's own filter syntax mapped onto ``where`` (issue 45 item 2): Haystack filter dicts, LlamaIndex
MetadataFilters and LangChain's vector-store ``filter=`` give the searches ``where`` gives, every hit passing."""
from __future__ import annotations

from pathlib import Path

import pytest

from medretrieve.corpus.collection import Collection
from medretrieve.filters import FilterError, parse_filter
from medretrieve.integrations.filter_syntax import from_haystack, from_llamaindex, from_mongo
from medretrieve.retrieval.retriever import Retriever

MEDLINE = Path(__file__).resolve().parents[1] / "fixtures" / "medline" / "filters_sample.xml"
WHERE = "year >= 2015 and publication_type in (Review, 'Practice Guideline')"
QUESTION = "first-line drug for type 2 diabetes"


@pytest.fixture(scope="module")
def retriever(tmp_path_factory):
    return Retriever(Collection.build(str(MEDLINE), tmp_path_factory.mktemp("c") / "col", "default",
                                      progress=False))


def test_the_syntaxes_map_to_the_same_filter():
    want = parse_filter(WHERE)
    mongo = {"year": {"$gte": 2015}, "publication_type": {"$in": ["Review", "Practice Guideline"]}}
    assert parse_filter(from_mongo(mongo)) == want
    assert parse_filter(from_haystack({"operator": "AND", "conditions": [
        {"field": "meta.year", "operator": ">=", "value": 2015},
        {"field": "meta.publication_type", "operator": "in", "value": ["Review", "Practice Guideline"]}]})) == want
    assert parse_filter(from_mongo({"$or": [{"journal": "A"}, {"$not": {"year": {"$lt": 2000}}}]})).text() == \
        'journal == "A" or not year < 2000'
    assert parse_filter(from_haystack({"operator": "NOT", "conditions": [
        {"field": "retracted", "operator": "==", "value": True}]})).text() == "not retracted == true"
    for bad, mapper in [({"year": {"$regex": "x"}}, from_mongo), ({"$nor": []}, from_mongo), (3, from_mongo),
                        ({"field": "year", "operator": "~", "value": 1}, from_haystack),
                        ({"operator": "XOR", "conditions": []}, from_haystack)]:
        with pytest.raises(FilterError):
            mapper(bad)


def test_langchain_filter(retriever):
    pytest.importorskip("langchain_core")
    from medretrieve.integrations.langchain import LangChainRetriever

    want = [h.chunk_id for h in retriever.search(QUESTION, k=5, where=WHERE).hits]
    lc = LangChainRetriever(source=retriever, k=5, filter={"year": {"$gte": 2015},
                                                           "publication_type": {"$in": ["Review",
                                                                                        "Practice Guideline"]}})
    assert [d.id for d in lc.invoke(QUESTION)] == want
    per_call = lc.invoke(QUESTION, filter={"year": {"$lt": 2015}})  # a call's filter replaces the retriever's
    assert per_call and all(d.metadata["year"] < 2015 for d in per_call)
    with pytest.raises(ValueError, match="unknown operator"):
        LangChainRetriever(source=retriever, filter={"year": {"$regex": "2"}})


def test_llamaindex_filters(retriever):
    pytest.importorskip("llama_index.core")
    from llama_index.core.vector_stores import FilterOperator, MetadataFilter, MetadataFilters

    from medretrieve.integrations.llamaindex import LlamaIndexRetriever

    want = [h.chunk_id for h in retriever.search(QUESTION, k=5, where=WHERE).hits]
    filters = MetadataFilters(filters=[
        MetadataFilter(key="year", value=2015, operator=FilterOperator.GTE),
        MetadataFilter(key="publication_type", value=["Review", "Practice Guideline"], operator=FilterOperator.IN)])
    li = LlamaIndexRetriever(retriever, k=5, filters=filters)
    assert [n.node.node_id for n in li.retrieve(QUESTION)] == want


def test_haystack_filters(retriever):
    pytest.importorskip("haystack")
    from medretrieve.integrations.haystack import HaystackRetriever

    want = [h.chunk_id for h in retriever.search(QUESTION, k=5, where=WHERE).hits]
    filters = {"operator": "AND", "conditions": [
        {"field": "meta.year", "operator": ">=", "value": 2015},
        {"field": "meta.publication_type", "operator": "in", "value": ["Review", "Practice Guideline"]}]}
    hs = HaystackRetriever(retriever, k=5, filters=filters)
    assert [d.id for d in hs.run(QUESTION)["documents"]] == want
    old = hs.run(QUESTION, filters={"field": "meta.year", "operator": "<", "value": 2015})["documents"]
    assert old and all(d.meta["year"] < 2015 for d in old)
