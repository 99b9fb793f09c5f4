"""``medretrieve bioasq run | strip | score`` as a participant runs them: a golden file stripped to a test batch,
Phase A over a collection built from the golden file (checked against the BioASQ submission schema, scored with
--golden, the same document MAP@10 as ``eval retrieval``), resumed from its cache, Phases A+ and B with a fake
LLM server, LLM expansion, and the 12b golden file when the shared data is there."""
from __future__ import annotations

import json

import pytest

from medretrieve.cli import main

pytest.importorskip("jsonschema")
from bioasq_golden import URL, SNIPPETS, bioasq_llm, offsets_index_the_text, validate, write_golden  # noqa: E402


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    return write_golden(tmp_path_factory.mktemp("golden") / "golden.json")


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    from encoder_fixtures import export_tiny

    return export_tiny(tmp_path_factory.mktemp("enc"), "symmetric")


@pytest.fixture(scope="module")
def collection(golden, encoder, tmp_path_factory):
    out = tmp_path_factory.mktemp("col") / "col"
    assert main(["build", str(golden), str(out), "--encoder", str(encoder), "--quiet"]) == 0
    return out


def strip(golden, out, phase="A"):
    assert main(["bioasq", "strip", str(golden), str(out), "--phase", phase]) == 0
    return out


def test_phase_a_submission_from_a_test_batch(golden, collection, tmp_path, capsys):
    batch = strip(golden, tmp_path / "batch.json")
    assert all(set(q) == {"id", "body", "type"} for q in json.loads(batch.read_text())["questions"])
    out = tmp_path / "run"
    args = ["bioasq", "run", str(batch), "--phase", "A", "--collection", str(collection), "--out", str(out),
            "--golden", str(golden), "--no-progress", "--system", "mr-test"]
    assert main(args) == 0
    doc = json.loads((out / "submission.json").read_text())
    validate(doc, "phaseA")
    assert doc["system"] == "mr-test" and [q["id"] for q in doc["questions"]] == ["g1", "g2", "g3"]
    assert offsets_index_the_text(doc)
    assert all(len(q["documents"]) <= 10 and len(q["snippets"]) <= 10 for q in doc["questions"])
    assert doc["questions"][1]["documents"][0] == URL + "502"
    scored = json.loads((out / "results.json").read_text())
    # the same documents as eval retrieval ranks for the same questions (same collection, ranker, no deadline)
    assert main(["eval", "retrieval", str(collection), "--bioasq", str(golden), "--out", str(tmp_path / "ev"),
                 "--deadline-ms", "none", "--no-progress"]) == 0
    evaluated = json.loads((tmp_path / "ev" / "results.json").read_text())
    assert scored["retrieval"]["document"]["map"] == pytest.approx(evaluated["document"]["map"])
    assert [r["retrieved_documents"] for r in scored["retrieval"]["rows"]] == \
        [r["retrieved_documents"] for r in evaluated["rows"]]
    assert scored["retrieval"]["snippet"]["count"] == 3 and "Retrieval" in capsys.readouterr().out

    # resumed: every question comes from the cache and the submission is the same
    assert main(args) == 0
    assert json.loads((out / "submission.json").read_text()) == doc
    statuses = [json.loads(line)["status"] for line in (out / "log.jsonl").read_text().splitlines()]
    assert statuses == ["ok"] * 3 + ["cached"] * 3
    # the same folder with another stage setting is refused, not mixed
    assert main(args + ["--prune", "2"]) == 2
    # and any submission file can be scored
    assert main(["bioasq", "score", str(out / "submission.json"), "--golden", str(golden), "--out",
                 str(tmp_path / "sc")]) == 0
    assert json.loads((tmp_path / "sc" / "results.json").read_text())["retrieval"]["document"] == \
        scored["retrieval"]["document"]


def test_phase_a_plus_and_b_with_an_llm_server(golden, collection, tmp_path):
    from llm_server import FakeLLMServer

    batch = strip(golden, tmp_path / "batch.json")
    with FakeLLMServer(bioasq_llm) as srv:
        assert main(["bioasq", "run", str(batch), "--phase", "A+", "--collection", str(collection), "--out",
                     str(tmp_path / "aplus"), "--llm", srv.base_url, "--model", "fake-model", "--golden",
                     str(golden), "--no-progress", "--prune", "3", "--prune-per-document", "1"]) == 0
        aplus_prompts = [r["json"]["messages"][-1]["content"] for r in srv.requests]
        batch_b = strip(golden, tmp_path / "batch_b.json", "B")
        assert main(["bioasq", "run", str(batch_b), "--phase", "B", "--out", str(tmp_path / "b"), "--llm",
                     srv.base_url, "--model", "fake-model", "--golden", str(golden), "--no-progress"]) == 0
        b_prompts = [r["json"]["messages"][-1]["content"] for r in srv.requests[len(aplus_prompts):]]
    aplus = json.loads((tmp_path / "aplus" / "submission.json").read_text())
    validate(aplus, "phaseAplus")
    g1, g2, g3 = aplus["questions"]
    assert g1["exact_answer"] == "yes" and g2["exact_answer"][0] == ["metformin"] and "exact_answer" not in g3
    assert offsets_index_the_text(aplus) and len(g1["snippets"]) <= 3
    assert len({s["document"] for s in g1["snippets"]}) == len(g1["snippets"])  # pruned to one per article
    assert len(aplus_prompts) == 3 and all("retrieved from PubMed" in p for p in aplus_prompts)
    b = json.loads((tmp_path / "b" / "submission.json").read_text())
    validate(b, "phaseB")
    assert b["questions"][0] == {"id": "g1", "ideal_answer": "Yes, aspirin inhibits it.", "exact_answer": "yes"}
    assert any(SNIPPETS["501"][1] in p for p in b_prompts) and all("biomedical experts" in p for p in b_prompts)
    scores = json.loads((tmp_path / "b" / "results.json").read_text())["answers"]
    assert scores["exact"]["yesno"]["accuracy"] == 1.0 and scores["exact"]["factoid"]["strict"] == 1.0


def test_phase_a_plus_without_an_llm_is_extractive(golden, collection, tmp_path):
    batch = strip(golden, tmp_path / "batch.json")
    assert main(["bioasq", "run", str(batch), "--phase", "A+", "--collection", str(collection), "--out",
                 str(tmp_path / "x"), "--no-progress"]) == 0
    doc = json.loads((tmp_path / "x" / "submission.json").read_text())
    validate(doc, "phaseAplus")
    assert doc["questions"][0]["exact_answer"] in ("yes", "no") and doc["questions"][1]["ideal_answer"]


def test_llm_expansion_asks_the_llm_for_terms(golden, collection, tmp_path):
    from llm_server import FakeLLMServer

    batch = strip(golden, tmp_path / "batch.json")
    with FakeLLMServer(lambda req: "glucophage, biguanide") as srv:
        assert main(["bioasq", "run", str(batch), "--phase", "A", "--collection", str(collection), "--out",
                     str(tmp_path / "x"), "--llm", srv.base_url, "--model", "m", "--llm-expansion", "synonyms",
                     "--no-progress"]) == 0
        asked = [r["json"]["messages"][-1]["content"] for r in srv.requests]
    # one expansion request per question (and one more per weak question, for its recovery queries)
    assert len(asked) >= 3 and all("JSON array of strings" in a for a in asked)
    assert {b for b in ("aspirin", "diabetes", "cystic fibrosis") if any(b in a for a in asked)} == \
        {"aspirin", "diabetes", "cystic fibrosis"}
    run = json.loads((tmp_path / "x" / "run.json").read_text())
    assert run["llm_expansion"] == "synonyms" and run["answers"] == "extractive"


def test_phase_a_over_pubmed_online(tmp_path):
    pytest.importorskip("httpx")
    from pubmed_server import FakeEutils

    batch = tmp_path / "batch.json"
    batch.write_text(json.dumps({"questions": [
        {"id": "o1", "type": "yesno", "body": "Does aspirin inhibit platelet aggregation?"}]}))
    golden = tmp_path / "golden.json"
    golden.write_text(json.dumps({"questions": [
        {"id": "o1", "type": "yesno", "body": "Does aspirin inhibit platelet aggregation?", "exact_answer": "yes",
         "ideal_answer": ["Yes."], "documents": [URL + "30000001"], "snippets": []}]}))
    with FakeEutils() as srv:
        assert main(["bioasq", "run", str(batch), "--phase", "A", "--pubmed", "--encoder", "default",
                     "--pubmed-url", srv.base_url, "--pubmed-cache", str(tmp_path / "cache"), "--out",
                     str(tmp_path / "run"), "--golden", str(golden), "--no-progress"]) == 0
    doc = json.loads((tmp_path / "run" / "submission.json").read_text())
    validate(doc, "phaseA")
    (q,) = doc["questions"]
    assert q["documents"][0] == URL + "30000001" and q["snippets"]
    assert json.loads((tmp_path / "run" / "results.json").read_text())["retrieval"]["document"]["map"] == 1.0


@pytest.mark.parametrize("extra,message", [
    (["--phase", "B", "--collection", "COL"], "Phase B answers from the batch's snippets"),
    (["--phase", "A"], "retrieves its evidence"),
    (["--phase", "A", "--collection", "COL", "--llm", "http://127.0.0.1:9/v1", "--model", "m"],
     "Phase A writes no answers"),
    (["--phase", "A", "--collection", "COL", "--llm-expansion", "synonyms"], "--llm-expansion asks an LLM"),
    (["--phase", "A+", "--collection", "COL", "--backend", "llamacpp"], "needs a model path"),
    (["--phase", "A", "--collection", "COL", "--limit", "0"], "--limit"),
])
def test_bad_options_are_refused_with_a_message(golden, collection, tmp_path, capsys, extra, message):
    batch = strip(golden, tmp_path / "batch.json")
    args = ["bioasq", "run", str(batch), "--out", str(tmp_path / "x"), "--no-progress"]
    rc = main(args + [str(collection) if a == "COL" else a for a in extra])
    assert rc == 2 and message in capsys.readouterr().err


def test_golden_file_lacking_answers_is_named(tmp_path, capsys):
    (tmp_path / "batch.json").write_text(json.dumps({"questions": [{"id": "q", "type": "yesno", "body": "b?"}]}))
    assert main(["eval", "bioasq", "--phase", "b", "--bioasq", str(tmp_path / "batch.json"), "--llm",
                 "http://127.0.0.1:9/v1", "--model", "m", "--out", str(tmp_path / "o")]) == 2
    assert "medretrieve bioasq run" in capsys.readouterr().err
    assert main(["bioasq", "strip", str(tmp_path / "batch.json"), str(tmp_path / "batch.json")]) == 2  # exists


def test_12b_golden_file_stripped_runs_phase_a(shared_data, encoder, tmp_path):
    """The issue's check on real data: 12B1 without answers, documents and snippets, through phase A on a
    collection built from the 12B1 golden file (the tiny encoder keeps it quick); the documents score as in
    eval retrieval."""
    golden = shared_data / "bioasq" / "12B1_golden.json"
    if not golden.is_file():
        pytest.skip("no 12B1 golden file")
    col = tmp_path / "col12b"
    assert main(["build", str(golden), str(col), "--encoder", str(encoder), "--quiet"]) == 0
    batch = strip(golden, tmp_path / "batch.json")
    out = tmp_path / "run"
    assert main(["bioasq", "run", str(batch), "--phase", "A", "--collection", str(col), "--out", str(out),
                 "--golden", str(golden), "--limit", "20", "--no-progress"]) == 0
    doc = json.loads((out / "submission.json").read_text())
    validate(doc, "phaseA")
    assert len(doc["questions"]) == 20
    assert all(len(q["documents"]) <= 10 and len(q["snippets"]) <= 10 and q["snippets"] for q in doc["questions"])
    # the collection holds each gold snippet at its gold offset: a submitted span must cut its text out of one
    gold: dict = {}
    for q in json.loads(golden.read_text())["questions"]:
        for g in q.get("snippets") or []:
            gold.setdefault((g["document"].rsplit("/", 1)[-1], g["beginSection"]), []).append(g)

    def in_article(s: dict) -> bool:
        for g in gold.get((s["document"][len(URL):], s["beginSection"]), []):
            cut = g["text"][s["offsetInBeginSection"] - g["offsetInBeginSection"]:
                            s["offsetInEndSection"] - g["offsetInBeginSection"]]
            if s["offsetInBeginSection"] >= g["offsetInBeginSection"] and cut.split() == s["text"].split():
                return True
        return False

    assert all(in_article(s) for q in doc["questions"] for s in q["snippets"])
    assert main(["eval", "retrieval", str(col), "--bioasq", str(golden), "--limit", "20", "--deadline-ms", "none",
                 "--out", str(tmp_path / "ev"), "--no-progress"]) == 0
    scored = json.loads((out / "results.json").read_text())["retrieval"]["document"]["map"]
    assert scored == pytest.approx(json.loads((tmp_path / "ev" / "results.json").read_text())["document"]["map"])


@pytest.mark.parametrize("questions,message", [
    ([{"id": "", "type": "yesno", "body": "Is x y?"}], "lacks a 'id' string"),  # stripped to a batch before
    (["not a question"], "question #0"),  # became {} in the batch
    ([{"id": "a", "type": "yesno", "body": "Is x y?"}, {"id": "a", "type": "list", "body": "Which z?"}],
     "repeats the id 'a'"),  # both kept, and the run then lost one
])
def test_strip_refuses_a_golden_file_it_would_turn_into_a_broken_batch(tmp_path, capsys, questions, message):
    (tmp_path / "golden.json").write_text(json.dumps({"questions": questions}))
    assert main(["bioasq", "strip", str(tmp_path / "golden.json"), str(tmp_path / "batch.json")]) == 2
    assert message in capsys.readouterr().err and not (tmp_path / "batch.json").exists()


@pytest.mark.parametrize("edit", [
    lambda e: e.update(documents=e["documents"][0]),  # exit 2 on every rerun before (issue 43)
    lambda e: e["snippets"][0].pop("beginSection"),
    lambda e: e.pop("documents"),  # submitted silently with exit 0 before
    lambda e: e["documents"].__setitem__(0, e["documents"][0] + "x"),
])
def test_a_damaged_cache_entry_is_answered_again_by_the_cli(golden, collection, tmp_path, edit):
    batch = strip(golden, tmp_path / "batch.json")
    out = tmp_path / "run"
    args = ["bioasq", "run", str(batch), "--phase", "A", "--collection", str(collection), "--out", str(out),
            "--no-progress", "--quiet"]
    assert main(args) == 0
    intact = (out / "submission.json").read_text()
    path = out / "questions" / "g2.json"
    entry = json.loads(path.read_text())
    edit(entry)
    path.write_text(json.dumps(entry))
    (out / "questions" / ".g2.json.tmp-999999").write_text("{")  # a killed run's temporary file
    assert main(args) == 0
    assert (out / "submission.json").read_text() == intact
    assert sorted(p.name for p in (out / "questions").iterdir()) == ["g1.json", "g2.json", "g3.json"]


@pytest.mark.parametrize("flag, asked", [([], None), (["--recovery"], True), (["--no-recovery"], False)])
def test_recovery_is_the_retrievers_setting_unless_forced(golden, collection, tmp_path, monkeypatch, flag, asked):
    # issue 44: recovery changed nothing on BioASQ, so a run leaves it to the retriever (off over a local
    # collection); --recovery / --no-recovery still force it
    from medretrieve.retrieval.retriever import Retriever

    seen = []
    search = Retriever.search

    def spy(self, question, **kwargs):
        result = search(self, question, **kwargs)
        seen.append((kwargs.get("recovery", "absent"), result.stage("recovery")))
        return result

    monkeypatch.setattr(Retriever, "search", spy)
    out = tmp_path / "run"
    assert main(["bioasq", "run", str(strip(golden, tmp_path / "batch.json")), "--phase", "A", "--collection",
                 str(collection), "--out", str(out), "--no-progress", *flag]) == 0
    assert len(seen) == 3 and all(kw == asked for kw, _ in seen)
    if asked is None:  # the stage log says why it did not run: the collection's setting, not the command
        assert all(not st.ran and st.reason in ("question not weak", "off over a local collection (Settings.recovery)")
                   for _, st in seen if st is not None)
    assert json.loads((out / "run.json").read_text())["recovery"] == asked
