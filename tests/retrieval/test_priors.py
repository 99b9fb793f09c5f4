"""The optional priors (issue 45 item 5), each a named search option, off by default: the evidence level orders
better-evidenced publication types first, the recency decay newer documents first, each as it claims."""
from __future__ import annotations

from pathlib import Path

import pytest

from medretrieve.corpus.collection import Collection
from medretrieve.retrieval.priors import EVIDENCE_LEVELS, OTHER, evidence_weight, prior_order, recency_weight
from medretrieve.retrieval.retriever import Retriever

MEDLINE = Path(__file__).resolve().parents[1] / "fixtures" / "medline" / "filters_sample.xml"

META = {0: {"publication_type": ["Case Reports"], "year": 2024},
        1: {"publication_type": ["Journal Article", "Randomized Controlled Trial"], "year": 2000},
        2: {"publication_type": ["Practice Guideline"], "year": 2010},
        3: {"publication_type": ["Systematic Review", "Review"]},
        4: {}}


def test_weights():
    assert evidence_weight({"publication_type": ["Review", "Meta-Analysis"]}) == EVIDENCE_LEVELS["Meta-Analysis"]
    assert evidence_weight({"publication_type": "Practice Guideline"}) == 1.0 and evidence_weight({}) == OTHER
    assert recency_weight({"year": 2014}, 10, 2024) == 0.5 and recency_weight({"year": 2030}, 10, 2024) == 1.0
    assert recency_weight({"publication_date": "2004-03"}, 10, 2024) == 0.25
    assert recency_weight({}, 10, 2024) is None


def test_each_prior_orders_as_it_claims():
    order = [0, 1, 2, 3, 4]  # close neighbours: the priors decide
    assert prior_order(order, META.get, False, None) == order  # off: untouched
    by_evidence = prior_order(order, META.get, True, None)
    levels = [evidence_weight(META[r]) for r in by_evidence]
    assert by_evidence[0] == 2 and by_evidence[-1] == 0 and levels == sorted(levels, reverse=True)
    by_age = prior_order(order, META.get, False, 1.0, this_year=2024)
    assert by_age[:3] == [0, 2, 1]  # newest first; undated ones weigh as the oldest and keep their order after
    assert by_age[3:] == [3, 4]
    # a strong lead survives a weak weight: a case report 40 places ahead stays ahead of an unknown type
    long = [0] + [100 + i for i in range(40)] + [5]
    meta = {**{100 + i: {"publication_type": ["Case Reports"]} for i in range(40)}, 0: META[0], 5: {}}
    assert prior_order(long, meta.get, True, None).index(0) < prior_order(long, meta.get, True, None).index(5)


@pytest.fixture(scope="module")
def retriever(tmp_path_factory):
    return Retriever(Collection.build(str(MEDLINE), tmp_path_factory.mktemp("c") / "col", "default",
                                      progress=False))


def test_priors_on_every_search_door_option(retriever):
    q = "metformin type 2 diabetes"
    plain = retriever.search(q, k=10, include_retracted=True, per_document=1)
    assert "priors" not in [s.name for s in plain.stages]  # off by default
    ev = retriever.search(q, k=10, include_retracted=True, per_document=1, evidence_prior=True)
    levels = [evidence_weight(h.metadata) for h in ev.hits]
    assert ev.stage("priors").ran and "evidence" in ev.stage("priors").reason
    assert ev.hits[0].metadata["publication_type"] == ["Practice Guideline"]
    assert sorted(h.document_id for h in ev.hits) == sorted(h.document_id for h in plain.hits)
    assert levels.index(min(levels)) > levels.index(max(levels))
    new = retriever.search(q, k=10, include_retracted=True, per_document=1, recency_half_life=0.5)
    years = [h.metadata["year"] for h in new.hits]
    assert years == sorted(years, reverse=True)  # a half-life this short makes age decide
    with pytest.raises(ValueError, match="recency_half_life"):
        retriever.search(q, recency_half_life=0)
    with pytest.raises(TypeError, match="evidence_prior"):
        retriever.search(q, evidence_prior="yes")
