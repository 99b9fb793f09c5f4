"""The BioASQ submission writer, abstention and the Answerer end to end
(fake LLM server + fake retriever, and once over a real collection)."""
from __future__ import annotations

import json

import pytest
from llm_server import FakeLLMServer, chat_reply, error_reply, scripted

from medretrieve.generation import generate as G
from medretrieve.generation.llm import OpenAIBackend
from medretrieve.retrieval.results import Hit, SearchResult

SOURCES = [
    "Baloxavir marboxil was approved by the FDA in 2018 for acute uncomplicated influenza in patients aged 12 "
    "years and older.",
    {"title": "Mechanism", "text": "Baloxavir inhibits the cap-dependent endonuclease of the influenza polymerase."},
    "Oseltamivir is a neuraminidase inhibitor used for influenza treatment and prophylaxis.",
]


# ---------------------------------------------------------------------------
# BioASQ submission

def test_write_bioasq_submission_shapes(tmp_path):
    answers = [
        {"id": "q1", "type": "yesno", "exact_answer": "Yes", "ideal_answer": "Yes, it is."},
        {"id": "q2", "type": "factoid", "exact_answer": ["a", "b", "c", "d", "e", "f"], "ideal_answer": ["A."]},
        {"id": "q3", "type": "list", "exact_answer": [["x", "x synonym"], "y"], "ideal_answer": "X and Y.",
         "documents": [f"http://www.ncbi.nlm.nih.gov/pubmed/{i}" for i in range(12)]},
        {"id": "q4", "type": "summary", "exact_answer": None, "ideal_answer": "A summary."},
        {"id": "q5", "type": "yesno", "exact_answer": None, "ideal_answer": "insufficient information"},
    ]
    path = tmp_path / "submission.json"
    G.write_bioasq_submission(answers, path, system="medretrieve")
    doc = json.loads(path.read_text())
    assert doc["system"] == "medretrieve"
    q1, q2, q3, q4, q5 = doc["questions"]
    assert q5 == {"id": "q5", "ideal_answer": "insufficient information"}
    assert q1 == {"id": "q1", "ideal_answer": "Yes, it is.", "exact_answer": "yes"}
    assert q2["exact_answer"] == [["a"], ["b"], ["c"], ["d"], ["e"]] and q2["ideal_answer"] == "A."
    assert q3["exact_answer"] == [["x", "x synonym"], ["y"]] and len(q3["documents"]) == 10
    assert "exact_answer" not in q4
    assert [p.name for p in tmp_path.iterdir()] == ["submission.json"]  # no temp file left


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"id": "q", "type": "yesno", "exact_answer": "maybe"}, "yes' or 'no"),
        ({"id": "q", "type": "boolean", "exact_answer": "yes"}, "type"),
        ({"type": "summary", "ideal_answer": "x"}, "id"),
        ({"id": "q", "type": "list", "exact_answer": [1, 2]}, "entity"),
    ],
)
def test_write_bioasq_submission_rejects_bad_answers(tmp_path, bad, match):
    path = tmp_path / "s.json"
    with pytest.raises(ValueError, match=match):
        G.write_bioasq_submission([bad], path)
    assert not path.exists() and list(tmp_path.iterdir()) == []


def test_write_bioasq_submission_duplicate_ids(tmp_path):
    a = {"id": "q", "type": "summary", "ideal_answer": "x"}
    with pytest.raises(ValueError, match="twice"):
        G.write_bioasq_submission([a, a], tmp_path / "s.json")


# ---------------------------------------------------------------------------
# Abstention policy

def _hit(i: int, text: str, score: float, **scores: float) -> Hit:
    return Hit(chunk_id=f"c{i}", document_id=f"d{i}", text=text, title=f"Title {i}", section="abstract",
               score=score, scores=dict(scores), metadata={}, parent_id=None)


def _result(hits, weak=False, recovered=False, query_type="general", reasons=None) -> SearchResult:
    return SearchResult(question="q", hits=hits, query_type=query_type, weak=weak,
                        weak_reasons=list(reasons or (["low lexical relevance 0.20 < 0.35",
                                                       "no matching evidence: the best hit holds 0.25"] if weak else [])),
                        recovered=recovered, stages=[], timings_ms={"total": 1.0})


def test_abstention_policy():
    hits = [_hit(0, "x", 0.8, rerank=2.0), _hit(1, "y", 0.3, rerank=-1.0)]
    policy = G.AbstentionPolicy()
    assert policy.check(_result(hits)) is None
    assert "weak" in policy.check(_result(hits, weak=True)) and "no matching" in policy.check(_result(hits, weak=True))
    # evidence that matches poorly on average, comes from few articles or repeats itself makes the retriever
    # recover but is no reason to abstain
    assert policy.check(_result(hits, weak=True, reasons=["low lexical relevance 0.3 < 0.35", "few articles: 2 < 3",
                                                         "redundant: mean Jaccard 0.7"])) is None
    assert G.AbstentionPolicy(abstain_on=("few articles",)).check(_result(hits, weak=True,
                                                                          reasons=["few articles: 2 < 3"]))
    # by default a weak question abstains whether or not recovery (which a deadline may skip) changed the hits
    assert policy.check(_result(hits, weak=True, recovered=True))
    assert G.AbstentionPolicy(trust_recovery=True).check(_result(hits, weak=True, recovered=True)) is None
    assert G.AbstentionPolicy(weak=False).check(_result(hits, weak=True)) is None
    assert "0 evidence" in policy.check(_result([]))
    assert "need 3" in G.AbstentionPolicy(min_hits=3).check(_result(hits))
    assert G.AbstentionPolicy(min_top_score=0.5).check(_result(hits)) is None
    assert "below the threshold 0.9" in G.AbstentionPolicy(min_top_score=0.9).check(_result(hits))
    assert G.AbstentionPolicy(min_top_score=1.5, score_key="rerank").check(_result(hits)) is None
    assert "rerank score" in G.AbstentionPolicy(min_top_score=2.5, score_key="rerank").check(_result(hits))
    assert "no evidence has a 'mmr' score" in G.AbstentionPolicy(min_top_score=0, score_key="mmr").check(_result(hits))


# ---------------------------------------------------------------------------
# Answerer end to end

EVIDENCE = [
    _hit(0, SOURCES[0], 0.9, dense=0.8),
    _hit(1, SOURCES[1]["text"], 0.7, dense=0.6),
    _hit(2, SOURCES[2], 0.5, dense=0.4),
]


class FakeRetriever:
    def __init__(self, result: SearchResult):
        self.result = result
        self.calls: list = []

    def search(self, question, k=10, deadline_ms=300, **kw):
        self.calls.append({"question": question, "k": k, "deadline_ms": deadline_ms, **kw})
        return self.result


CITED = ("Baloxavir was approved by the FDA in 2018 for uncomplicated influenza [1]. "
         "It inhibits the cap-dependent endonuclease [2], whereas oseltamivir is a neuraminidase inhibitor [3]. "
         "Baloxavir cures cancer [1].\nEXACT: yes")


def test_answerer_cite_mode_end_to_end():
    retriever = FakeRetriever(_result(EVIDENCE, query_type="yesno"))
    with FakeLLMServer(scripted([CITED])) as srv, OpenAIBackend(srv.base_url, "fake-model") as backend:
        ans = G.Answerer(retriever, backend, k=3).answer("Is baloxavir approved for influenza?", deadline_ms=5000)
    assert ans.error is None and not ans.abstained
    assert ans.qtype == "yesno" and ans.exact_answer == "yes"
    assert "EXACT" not in ans.text and ans.text.startswith("Baloxavir was approved")
    assert [c.supported for c in ans.citations] == [True, True, False]
    assert ans.unsupported[0].sentence == "Baloxavir cures cancer [1]."
    assert ans.evidence == EVIDENCE and ans.sources_used == 3 and ans.notes == []
    assert set(ans.timings) == {"retrieve", "generate", "verify", "total"}
    assert ans.timings["total"] >= ans.timings["generate"]
    assert retriever.calls[0]["k"] == 3 and 0 < retriever.calls[0]["deadline_ms"] <= 300
    prompt = srv.requests[0]["json"]["messages"][1]["content"]
    assert "[1] Title 0" in prompt and "[3] Title 2" in prompt and "EXACT: yes" in prompt
    back = G.Answer.from_dict(json.loads(json.dumps(ans.to_dict())))  # JSON-ready, and read back as it was
    assert back == ans and isinstance(back.citations[0], G.Citation)
    entry = ans.submission_entry("q1")
    assert entry["type"] == "yesno" and entry["documents"] == ["d0", "d1", "d2"]


def test_answerer_abstains_without_calling_llm():
    retriever = FakeRetriever(_result(EVIDENCE, weak=True, reasons=["no matching evidence: no entity of the question"]))
    with FakeLLMServer() as srv, OpenAIBackend(srv.base_url, "fake-model") as backend:
        ans = G.Answerer(retriever, backend).answer("What is the flurbo index?")
        assert srv.requests == []
    assert ans.abstained and ans.text == G.INSUFFICIENT
    assert "weak" in ans.abstain_reason and "no entity" in ans.abstain_reason
    assert ans.citations == [] and ans.error is None and "generate" not in ans.timings


def test_answerer_score_threshold_policy():
    retriever = FakeRetriever(_result(EVIDENCE))
    with FakeLLMServer() as srv, OpenAIBackend(srv.base_url, "fake-model") as backend:
        ans = G.Answerer(retriever, backend, policy=G.AbstentionPolicy(min_top_score=0.95)).answer("q?")
        assert srv.requests == []
    assert ans.abstained and "0.900 is below the threshold 0.95" in ans.abstain_reason


def test_answerer_model_says_insufficient():
    retriever = FakeRetriever(_result(EVIDENCE))
    reply = "Insufficient information: the sources do not describe pediatric dosing."
    with FakeLLMServer(scripted([reply])) as srv, OpenAIBackend(srv.base_url, "fake-model") as backend:
        ans = G.Answerer(retriever, backend).answer("What is the pediatric dose of baloxavir?")
    assert ans.abstained and "model" in ans.abstain_reason and ans.text == reply


def test_answerer_reports_llm_failure_instead_of_raising():
    retriever = FakeRetriever(_result(EVIDENCE))
    with FakeLLMServer(scripted([(500, error_reply("CUDA out of memory", "server_error"), 0.0)])) as srv:
        with OpenAIBackend(srv.base_url, "fake-model", max_retries=1, backoff_s=0.01) as backend:
            ans = G.Answerer(retriever, backend).answer("q?")
    assert ans.error.startswith("LLMUnavailable") and "CUDA out of memory" in ans.error
    assert ans.text == "" and not ans.abstained and ans.evidence == EVIDENCE


def test_answerer_shrinks_sources_when_context_overflows():
    many = EVIDENCE + [_hit(i, f"Filler passage number {i} about statins.", 0.1) for i in range(3, 8)]
    retriever = FakeRetriever(_result(many))
    overflow = (400, error_reply("This model's maximum context length is 2048 tokens", code="context_length_exceeded"), 0.0)

    def handler(req):  # fits only with at most 2 sources
        return overflow if "[3]" in req["messages"][1]["content"] else "Baloxavir was approved in 2018 [1]."

    with FakeLLMServer(handler) as srv, OpenAIBackend(srv.base_url, "m") as backend:
        ans = G.Answerer(retriever, backend).answer("Is baloxavir approved?")
        assert len(srv.requests) == 3  # 8 -> 4 -> 2 sources
        strict = G.Answerer(retriever, backend, shrink_on_overflow=False).answer("Is baloxavir approved?")
    assert ans.error is None and ans.sources_used == 2 and len(ans.evidence) == 8
    assert len(ans.notes) == 2 and "8 sources overflowed" in ans.notes[0]
    assert ans.citations[0].supported
    assert strict.error.startswith("LLMContextTooLong") and strict.sources_used == 8


def test_answerer_deadline_reaches_backend():
    retriever = FakeRetriever(_result(EVIDENCE))
    with FakeLLMServer(scripted([(200, chat_reply("late [1]."), 5.0)])) as srv:
        with OpenAIBackend(srv.base_url, "fake-model") as backend:
            ans = G.Answerer(retriever, backend).answer("q?", deadline_ms=400)
    assert ans.error.startswith("LLMTimeout")
    assert ans.timings["total"] < 2500


def test_answerer_bioasq_and_answer_only_modes():
    retriever = FakeRetriever(_result(EVIDENCE, query_type="factoid"))
    reply = "EXACT: baloxavir | oseltamivir\nIDEAL: Baloxavir is a single-dose cap inhibitor."
    with FakeLLMServer(scripted([reply, "Baloxavir."])) as srv, OpenAIBackend(srv.base_url, "m") as backend:
        bio = G.Answerer(retriever, backend, mode="bioasq").answer("Which drug is a cap inhibitor?")
        plain = G.Answerer(retriever, backend, mode="answer_only").answer("Which drug is a cap inhibitor?",
                                                                           qtype="summary")
        first, second = (r["json"]["messages"][1]["content"] for r in srv.requests)
    assert bio.exact_answer == ["baloxavir", "oseltamivir"] and bio.text.startswith("Baloxavir is")
    assert bio.citations == [] and "up to 5" in first
    assert plain.text == "Baloxavir." and plain.citations == [] and plain.exact_answer is None
    assert "without citations" in second


def test_answerer_bioasq_exact_answer_wins_over_hedging():
    retriever = FakeRetriever(_result(EVIDENCE))
    reply = "EXACT: no\nIDEAL: There is insufficient information to say it is approved."
    with FakeLLMServer(scripted([reply, "Insufficient information."])) as srv, OpenAIBackend(srv.base_url, "m") as b:
        answerer = G.Answerer(retriever, b, mode="bioasq")
        first = answerer.answer("Is it approved?", qtype="yesno")
        second = answerer.answer("Is it approved?", qtype="yesno")
    assert first.exact_answer == "no" and not first.abstained
    assert second.abstained and second.exact_answer is None and second.error is None


def test_answerer_unreadable_bioasq_reply_is_reported():
    retriever = FakeRetriever(_result(EVIDENCE))
    with FakeLLMServer(scripted(["I am not sure."])) as srv, OpenAIBackend(srv.base_url, "m") as backend:
        ans = G.Answerer(retriever, backend, mode="bioasq").answer("Is it?", qtype="yesno")
    assert ans.error.startswith("unreadable BioASQ answer") and ans.text == "I am not sure."


def test_answerer_argument_errors():
    class NoSearch:
        pass

    retriever = FakeRetriever(_result(EVIDENCE))
    backend = OpenAIBackend("http://127.0.0.1:9/v1", "m")
    with pytest.raises(TypeError, match="retriever"):
        G.Answerer(NoSearch(), backend)
    with pytest.raises(TypeError, match="backend"):
        G.Answerer(retriever, object())
    with pytest.raises(ValueError, match="mode"):
        G.Answerer(retriever, backend, mode="chat")
    answerer = G.Answerer(retriever, backend)
    with pytest.raises(ValueError, match="question"):
        answerer.answer("  ")
    with pytest.raises(ValueError, match="qtype"):
        answerer.answer("q?", qtype="boolean")


# ---------------------------------------------------------------------------
# CLI

def test_cli_answer(monkeypatch, tmp_path, capsys):
    import sys
    import types

    from medretrieve import cli

    result = _result(EVIDENCE, query_type="yesno")

    class FakeCollection:
        opened: list = []

        @classmethod
        def open(cls, directory, **kw):
            cls.opened.append(directory)
            return cls()

    class CliRetriever(FakeRetriever):
        def __init__(self, collection, **kw):
            super().__init__(result)

    monkeypatch.setitem(sys.modules, "medretrieve.corpus.collection", types.SimpleNamespace(Collection=FakeCollection))
    monkeypatch.setitem(sys.modules, "medretrieve.retrieval.retriever", types.SimpleNamespace(Retriever=CliRetriever))
    with FakeLLMServer(scripted([CITED])) as srv:
        rc = cli.main(["answer", str(tmp_path), "Is baloxavir approved?", "--llm", srv.base_url,
                       "--model", "fake-model", "--json", "--k", "3"])
        out = json.loads(capsys.readouterr().out)
        assert rc == 0 and out["exact_answer"] == "yes" and len(out["citations"]) == 3
        assert out["evidence"][0]["document_id"] == "d0" and FakeCollection.opened == [str(tmp_path)]
        rc = cli.main(["answer", str(tmp_path), "Is baloxavir approved?", "--llm", srv.base_url,
                       "--model", "fake-model"])
        text = capsys.readouterr().out
        assert rc == 0 and "Unsupported sentences:" in text and "[1] d0 Title 0" in text
    with FakeLLMServer(scripted([(500, error_reply("down"), 0.0)])) as srv:
        rc = cli.main(["answer", str(tmp_path), "q?", "--llm", srv.base_url, "--model", "m"])
        assert rc == 1 and "LLMUnavailable" in capsys.readouterr().err


def test_answerer_over_a_real_collection(tmp_path):
    """The Answerer on the real retrieval stack (collection + hybrid Retriever) with the fake LLM."""
    import re

    retrieve = pytest.importorskip("medretrieve.retrieval.retriever")
    from medretrieve.corpus.collection import Collection
    from medretrieve.models.encoders import default_model_dir

    records = [
        {"id": "1", "title": "Baloxavir approval", "text": SOURCES[0]},
        {"id": "2", "title": "Mechanism", "text": SOURCES[1]["text"]},
        {"id": "3", "title": "Oseltamivir", "text": SOURCES[2]},
        {"id": "4", "title": "Statins", "text": "Statins lower LDL cholesterol by inhibiting HMG-CoA reductase."},
    ]
    Collection.build(records, tmp_path / "col", encoder=default_model_dir(), progress=False)

    def reply(request):
        prompt = request["messages"][1]["content"]
        n = re.search(r"\[(\d+)\] Baloxavir approval", prompt).group(1)  # cite wherever retrieval put it
        return f"Baloxavir was approved by the FDA in 2018 for influenza [{n}].\nEXACT: yes"

    retriever = retrieve.Retriever(Collection.open(tmp_path / "col"))
    with FakeLLMServer(reply) as srv, OpenAIBackend(srv.base_url, "fake-model") as backend:
        ans = G.Answerer(retriever, backend, k=3).answer("Is baloxavir approved for influenza?", qtype="yesno",
                                                          deadline_ms=30_000)
    assert ans.error is None and not ans.abstained, (ans.error, ans.abstain_reason)
    assert ans.exact_answer == "yes"
    assert "1" in [h.document_id for h in ans.evidence]
    assert len(ans.citations) == 1 and ans.citations[0].supported


def test_answers_show_the_cited_sources_and_those_above_the_floor():
    """Issue 44: an answer lists what it cites plus any source scoring at least ``source_floor``; the rest stay in
    ``evidence``; a source a stage placed without ranking it is shown only when cited."""
    hits = [_hit(0, SOURCES[0], 0.95, rerank=0.95), _hit(1, SOURCES[1]["text"], 0.80, rerank=0.8),
            _hit(2, SOURCES[2], 0.30, rerank=0.3), _hit(3, "Unrelated hypertension text.", 0.92, recovery=0.6)]
    hits[3].placed_by = "recovery"
    retriever = FakeRetriever(_result(hits))
    reply = "Oseltamivir is a neuraminidase inhibitor used for influenza [3]."
    with FakeLLMServer(scripted([reply, reply])) as srv, OpenAIBackend(srv.base_url, "fake-model") as backend:
        ans = G.Answerer(retriever, backend, k=4).answer("What is oseltamivir?")
        assert ans.shown_sources == [1, 3]  # 1: uncited at 0.95 >= 0.9; 2: 0.80 < 0.9; 3: cited; 4: placed, uncited
        strict = G.Answerer(retriever, backend, k=4, source_floor=1.0).answer("What is oseltamivir?")
        assert strict.shown_sources == [3]
    assert len(ans.evidence) == 4 and G.Answer.from_dict(ans.to_dict()).shown_sources == [1, 3]
    with pytest.raises(ValueError, match="source_floor"):
        G.Answerer(retriever, None, source_floor=float("nan"))
    assert G.shown_sources(hits, [G.Citation("s [9] [2]", [9, 2], True, 1.0, "", invalid_sources=[9])]) == [1, 2]
