"""BioASQ submissions of all three phases, checked against a JSON schema written from the BioASQ format:
Phase A (documents + snippets with offsets: ``eval retrieval --submission``, also online), Phase B (answers from
the golden snippets: ``eval bioasq --phase b``) and Phase A+ (``eval bioasq COLLECTION``)."""
from __future__ import annotations

import json

import pytest

from medretrieve.cli import main
from medretrieve.generation import generate as G

jsonschema = pytest.importorskip("jsonschema")
from bioasq_golden import ABSTRACTS, SNIPPETS, URL, bioasq_llm, snip as _snip, validate, write_golden  # noqa: E402


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    return write_golden(tmp_path_factory.mktemp("golden") / "golden.json")


@pytest.fixture(scope="module")
def collection(golden, tmp_path_factory):
    """A collection built from the golden file itself: every section is a gold snippet at its gold offset."""
    from encoder_fixtures import export_tiny

    tmp = tmp_path_factory.mktemp("subcol")
    out = tmp / "col"
    assert main(["build", str(golden), str(out), "--encoder", str(export_tiny(tmp, "symmetric")), "--quiet"]) == 0
    return out


def test_phase_a_submission_points_at_the_snippet_text(golden, collection, tmp_path):
    sub = tmp_path / "phase_a.json"
    assert main(["eval", "retrieval", str(collection), "--bioasq", str(golden), "--out", str(tmp_path / "o"),
                 "--deadline-ms", "none", "--no-progress", "--submission", str(sub), "--system", "mr-test"]) == 0
    doc = json.loads(sub.read_text())
    validate(doc, "phaseA")
    assert doc["system"] == "mr-test" and [q["id"] for q in doc["questions"]] == ["g1", "g2", "g3"]
    for q in doc["questions"]:
        assert q["documents"] and q["snippets"] and len(q["snippets"]) <= 10
        for sn in q["snippets"]:
            pmid = sn["document"][len(URL):]
            assert ABSTRACTS[pmid][sn["offsetInBeginSection"]:sn["offsetInEndSection"]] == sn["text"]
    g1 = doc["questions"][0]
    assert g1["documents"][0] == URL + "501"
    assert _snip("501", SNIPPETS["501"][0]) in g1["snippets"]  # the gold snippet, with the gold offsets


def test_phase_a_submission_of_an_online_run(golden, tmp_path):
    pytest.importorskip("httpx")
    from pubmed_server import FakeEutils

    from medretrieve.corpus.pubmed import PubMedSource

    online_golden = tmp_path / "online.json"
    online_golden.write_text(json.dumps({"questions": [
        {"id": "o1", "type": "yesno", "body": "Does aspirin inhibit platelet aggregation?", "exact_answer": "yes",
         "ideal_answer": ["Yes."], "documents": [URL + "30000001"], "snippets": []}]}))
    sub = tmp_path / "online_a.json"
    with FakeEutils() as srv:
        assert main(["eval", "retrieval", "--pubmed", "--encoder", "default", "--pubmed-url", srv.base_url,
                     "--pubmed-cache", str(tmp_path / "cache"), "--bioasq", str(online_golden), "--out",
                     str(tmp_path / "o"), "--deadline-ms", "none", "--no-progress", "--submission", str(sub)]) == 0
        records = {r.id: r for r in PubMedSource(srv.base_url, cache_dir=tmp_path / "cache").fetch(
            ["30000001", "30000002", "30000003", "30000006"])}
    doc = json.loads(sub.read_text())
    validate(doc, "phaseA")
    (q,) = doc["questions"]
    assert q["documents"][0] == URL + "30000001" and q["snippets"]
    for sn in q["snippets"]:
        rec = records[sn["document"][len(URL):]]
        section = " ".join(s.text for s in rec.sections) if sn["beginSection"] == "abstract" else rec.title
        assert section[sn["offsetInBeginSection"]:sn["offsetInEndSection"]] == sn["text"]
    results = json.loads((tmp_path / "o" / "results.json").read_text())
    assert results["pubmed"] is True and results["document"]["map"] == 1.0


def test_phase_b_answers_from_the_gold_snippets(golden, tmp_path):
    from llm_server import FakeLLMServer

    out = tmp_path / "b"
    with FakeLLMServer(bioasq_llm) as srv:
        assert main(["eval", "bioasq", "--phase", "b", "--bioasq", str(golden), "--llm", srv.base_url, "--model",
                     "fake-model", "--out", str(out), "--no-progress"]) == 0
        prompts = [r["json"]["messages"][-1]["content"] for r in srv.requests]
    doc = json.loads((out / "submission.json").read_text())
    validate(doc, "phaseB")
    g1, g2, g3 = doc["questions"]
    assert g1 == {"id": "g1", "ideal_answer": "Yes, aspirin inhibits it.", "exact_answer": "yes"}
    assert g2["exact_answer"][0] == ["metformin"] and "exact_answer" not in g3
    assert all("selected by biomedical experts" in p for p in prompts)
    assert any(SNIPPETS["501"][1] in p for p in prompts)  # the gold snippets are the evidence
    data = json.loads((out / "results.json").read_text())
    assert data["phase"] == "B" and data["exact"]["yesno"]["accuracy"] == 1.0
    with FakeLLMServer(bioasq_llm) as srv:
        assert main(["eval", "bioasq", "somewhere", "--phase", "b", "--bioasq", str(golden), "--llm", srv.base_url,
                     "--model", "m", "--out", str(out)]) == 2


def test_phase_a_plus_carries_answers_and_evidence(golden, collection, tmp_path):
    from llm_server import FakeLLMServer

    out = tmp_path / "aplus"
    with FakeLLMServer(bioasq_llm) as srv:
        assert main(["eval", "bioasq", str(collection), "--bioasq", str(golden), "--llm", srv.base_url, "--model",
                     "fake-model", "--out", str(out), "--no-progress", "--deadline-ms", "none"]) == 0
    doc = json.loads((out / "submission.json").read_text())
    validate(doc, "phaseAplus")
    g1 = doc["questions"][0]
    assert g1["exact_answer"] == "yes" and g1["documents"][0] == URL + "501"
    assert all(ABSTRACTS[s["document"][len(URL):]][s["offsetInBeginSection"]:s["offsetInEndSection"]] == s["text"]
               for s in g1["snippets"])
    with FakeLLMServer(bioasq_llm) as srv:  # Phase A+ needs somewhere to retrieve from
        assert main(["eval", "bioasq", "--bioasq", str(golden), "--llm", srv.base_url, "--model", "m", "--out",
                     str(out)]) == 2


@pytest.mark.parametrize("snippet,match", [
    ({"document": URL + "1", "text": "x", "beginSection": "abstract", "endSection": "abstract",
      "offsetInBeginSection": 0}, "offsetInEndSection"),
    ({"document": URL + "1", "text": "", "beginSection": "abstract", "endSection": "abstract",
      "offsetInBeginSection": 0, "offsetInEndSection": 1}, "text"),
    ({"document": URL + "1", "text": "x", "beginSection": "abstract", "endSection": "abstract",
      "offsetInBeginSection": 5, "offsetInEndSection": 2}, "ends"),
])
def test_writer_rejects_a_bad_snippet(tmp_path, snippet, match):
    with pytest.raises(ValueError, match=match):
        G.write_bioasq_submission([{"id": "q", "documents": [], "snippets": [snippet]}], tmp_path / "s.json",
                                  phase="A")
    with pytest.raises(ValueError, match="phase"):
        G.write_bioasq_submission([], tmp_path / "s.json", phase="C")


def test_schema_catches_what_the_writer_never_writes():
    good = {"questions": [{"id": "q", "documents": [URL + "1"], "snippets": [_snip("501", SNIPPETS["501"][0])]}]}
    validate(good, "phaseA")
    for bad in ({"questions": [{"id": "q", "documents": ["pmid 1"], "snippets": []}]},
                {"questions": [{"id": "q", "documents": [], "snippets": [{"text": "x"}]}]},
                {"questions": [{"id": "q", "documents": [URL + str(i) for i in range(11)], "snippets": []}]}):
        with pytest.raises(jsonschema.ValidationError):
            validate(bad, "phaseA")
    with pytest.raises(jsonschema.ValidationError):
        validate({"questions": [{"id": "q", "ideal_answer": "x", "exact_answer": "maybe"}]}, "phaseB")


def test_snippet_text_is_the_article_text_at_its_offsets_with_other_whitespace(tmp_path):
    """A chunk's text is whitespace-normalised; a snippet quotes its section's own characters (here a
    non-breaking space, two spaces and a line break), so ``article[begin:end] == text`` as BioASQ checks."""
    from encoder_fixtures import export_tiny

    abstract = "Background first. Aspirin\u00a0irreversibly inhibits  platelet\ncyclooxygenase. Low dose aspirin helps."
    gold = "Aspirin\u00a0irreversibly inhibits  platelet\ncyclooxygenase."
    begin = abstract.index(gold)
    golden = tmp_path / "golden.json"
    golden.write_text(json.dumps({"questions": [{
        "id": "w1", "type": "yesno", "body": "Does aspirin inhibit platelet cyclooxygenase?", "exact_answer": "yes",
        "ideal_answer": ["Yes."], "documents": [URL + "601"],
        "snippets": [{"document": URL + "601", "text": gold, "offsetInBeginSection": begin,
                      "offsetInEndSection": begin + len(gold), "beginSection": "abstract",
                      "endSection": "abstract"}]}]}))
    col = tmp_path / "col"
    assert main(["build", str(golden), str(col), "--encoder", str(export_tiny(tmp_path, "symmetric")), "--quiet"]) == 0
    sub = tmp_path / "phase_a.json"
    assert main(["eval", "retrieval", str(col), "--bioasq", str(golden), "--out", str(tmp_path / "o"),
                 "--deadline-ms", "none", "--no-progress", "--submission", str(sub)]) == 0
    doc = json.loads(sub.read_text())
    validate(doc, "phaseA")
    (sn,) = doc["questions"][0]["snippets"]
    assert sn["text"] == gold == abstract[sn["offsetInBeginSection"]:sn["offsetInEndSection"]]
    from medretrieve.corpus.collection import Collection
    from medretrieve.retrieval.retriever import Retriever

    (hit,) = Retriever(Collection.open(col), ranker=None).search("aspirin platelet", k=1, deadline_ms=None).hits
    assert hit.text == "Aspirin irreversibly inhibits platelet cyclooxygenase."  # what the prompt reads
    assert hit.span is not None and hit.span["text"] == gold
