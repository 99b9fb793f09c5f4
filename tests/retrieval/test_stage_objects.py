"""A search builds no stage object and fuses no list set twice: the stage objects (candidates, reranker, recovery)
are built once per retriever, a search passes them the scope it reads (the snapshot's, or an online search's
pool's), and the question's own RRF is derived once per search (locally and online)."""
from __future__ import annotations

import json
from collections import Counter
from typing import List

import numpy as np
import pytest

from medretrieve.retrieval import candidates as candidates_module
from medretrieve.retrieval import recovery as recovery_module
from medretrieve.retrieval.candidates import CandidateGenerator
from medretrieve.retrieval.recovery import Recovery
from medretrieve.retrieval.rerank import Reranker
from medretrieve.retrieval.retriever import Retriever

QUESTION = "Does aspirin inhibit platelet aggregation?"  # what the fake E-utilities server answers


def demo_docs():
    """The first documents of the demo corpus: a few dozen chunks, quick to embed."""
    from medretrieve.cli.demo import DEMO_CORPUS

    return [json.loads(line) for line in DEMO_CORPUS.read_text().splitlines()[:12]]


@pytest.fixture(scope="module")
def collection(tmp_path_factory):
    from medretrieve.corpus.collection import Collection
    from medretrieve.models.encoders import default_model_dir

    return Collection.build(demo_docs(), tmp_path_factory.mktemp("stages") / "col", encoder=default_model_dir(),
                            progress=False)


@pytest.fixture
def built(monkeypatch):
    """Counts of stage objects constructed, by class name."""
    counts: Counter = Counter()
    for cls in (CandidateGenerator, Reranker, Recovery):
        init = cls.__init__

        def counting(self, *args, _init=init, _name=cls.__name__, **kwargs):
            counts[_name] += 1
            _init(self, *args, **kwargs)

        monkeypatch.setattr(cls, "__init__", counting)
    return counts


class FusionSpy:
    """Every RRF call of the candidate and recovery stages: the lists and weights it fused (no weights: 1 each)."""

    def __init__(self, monkeypatch) -> None:
        self.calls: List[tuple] = []
        for module in (candidates_module, recovery_module):
            real = module.rrf

            def spy(lists, k=60, weights=None, top_n=None, _real=real, **kw):
                self.calls.append((tuple(tuple(np.asarray(x).tolist()) for x in lists),
                                   tuple(1.0 for _ in lists) if weights is None else tuple(weights)))
                return _real(lists, k=k, weights=weights, top_n=top_n, **kw)

            monkeypatch.setattr(module, "rrf", spy)

    def take(self) -> List[tuple]:
        out, self.calls = self.calls, []
        return out


def test_searches_build_no_stage_object(collection, built):
    ret = Retriever(collection)
    assert built == {"CandidateGenerator": 1, "Reranker": 1, "Recovery": 1}
    scope = ret.scope()
    for q in (QUESTION, "Which vaccines prevent influenza?"):
        ret.search(q, k=3, deadline_ms=None, feedback=True)
    assert built == {"CandidateGenerator": 1, "Reranker": 1, "Recovery": 1}
    assert ret.scope() is scope  # the snapshot did not change: nor did what a search reads


def test_an_update_builds_a_new_scope_not_new_stage_objects(tmp_path, built):
    from medretrieve.corpus.collection import Collection
    from medretrieve.models.encoders import default_model_dir

    col = Collection.build(demo_docs(), tmp_path / "col", encoder=default_model_dir(), progress=False)
    ret = Retriever(col)
    before = ret.scope()
    col.add([{"id": "N1", "title": "Aspirin", "text": "Aspirin irreversibly inhibits platelet cyclooxygenase."}])
    res = ret.search(QUESTION, k=5, deadline_ms=None)
    assert ret.scope() is not before and "N1" in {h.document_id for h in res.hits}
    assert built == {"CandidateGenerator": 1, "Reranker": 1, "Recovery": 1}


@pytest.mark.parametrize("settings", [{}, {"ef_min": 10, "ef_max": 10}])  # a wider ef after the floor's, or none
@pytest.mark.parametrize("feedback,expected", [
    # only the question's own lists (no variant; a wider ef finds the same rows in this small collection): their
    # fusion is every list's, derived once
    (False, 1),
    # feedback's top rows come from the question's own fusion, not from a second RRF of the same lists; then every
    # list's, the feedback list with them
    (True, 2),
])
def test_each_fusion_runs_once_per_search(collection, monkeypatch, settings, feedback, expected):
    ret = Retriever(collection, **settings)
    spy = FusionSpy(monkeypatch)
    res = ret.search(QUESTION, k=3, deadline_ms=None, feedback=feedback, recovery=False)
    calls = spy.take()
    assert len(calls) == expected, calls
    assert len(set(calls)) == len(calls)  # no two calls fused the same lists
    if feedback:
        assert res.stage("feedback").ran


def test_an_online_search_fuses_the_question_once(collection, tmp_path, monkeypatch, built):
    pytest.importorskip("httpx")
    from pubmed_server import FakeEutils

    from medretrieve.corpus.pubmed import PubMedSource

    with FakeEutils() as srv, PubMedSource(srv.base_url, cache_dir=tmp_path) as src:
        ret = Retriever(collection, online=src)
        spy = FusionSpy(monkeypatch)
        for _ in range(2):
            res = ret.search(QUESTION, k=5, deadline_ms=None, recovery=False)
            assert res.stage("pool").ran and res.hits
            calls = spy.take()
            # the local candidates (they only seed the pool: no question's own fusion there), then over the pool
            # the question's own fusion, which is every list's (no variant)
            assert len(calls) == 2, calls
            assert len(set(calls)) == len(calls)
    assert built == {"CandidateGenerator": 1, "Reranker": 1, "Recovery": 1}


def test_a_variant_list_makes_a_second_fusion_not_a_repeat(collection, monkeypatch):
    ret = Retriever(collection, llm_terms=lambda question, ms_left: ["thromboxane"])
    spy = FusionSpy(monkeypatch)
    res = ret.search(QUESTION, k=3, deadline_ms=None, recovery=False)
    assert "llm" in res.expansions
    calls = spy.take()
    # the question's own lists (for the weak flag), then every list, the variant's with its weight
    assert len(calls) == 2 and len(set(calls)) == 2
    assert calls[0][1] == (1.0, 1.0) and 0.5 in calls[1][1]
