"""BatchRun (a BioASQ test batch to a submission) without an index: a scripted search, a scripted LLM; resuming,
failures that do not stop the batch, pruning, extractive answers, scoring against a golden file, and a cache
damaged field by field (answered again, the submission unchanged), killed runs' temporary files, the folder's lock."""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from medretrieve.evaluation.bioasq.golden import BioASQQuestion, Snippet, load_bioasq
from medretrieve.evaluation.bioasq.run_cache import SEAL_KEY, entry_problem, seal
from medretrieve.evaluation.bioasq.submissions import BatchRun, score_submission, strip_batch
from medretrieve.generation.generate import write_bioasq_submission
from medretrieve.retrieval.results import Hit

URL = "http://www.ncbi.nlm.nih.gov/pubmed/"
ARTICLE = {"11": "Metformin is the first line drug for type 2 diabetes. Metformin lowers hepatic glucose output.",
           "12": "Insulin is added when metformin fails to control glucose.",
           "13": "Exercise improves insulin sensitivity in type 2 diabetes."}


def _hit(pmid: str, sentence: int) -> Hit:
    text = ARTICLE[pmid].split(". ")[sentence].rstrip(".") + "."
    begin = ARTICLE[pmid].index(text)
    return Hit(f"{pmid}-{sentence}", pmid, text, "", "abstract", 1.0, {}, {}, None,
               {"beginSection": "abstract", "endSection": "abstract", "offsetInBeginSection": begin,
                "offsetInEndSection": begin + len(text)})


HITS = [_hit("11", 0), _hit("11", 1), _hit("12", 0), _hit("13", 0)]


def question(qid: str, qtype: str = "factoid", body: str = "What is the first line drug for type 2 diabetes?"
             ) -> BioASQQuestion:
    return BioASQQuestion(qid, body, qtype, [], [], None, [])


class Search:
    """Scripted search: HITS for every question; ``fail`` names questions whose search raises."""

    def __init__(self, fail: tuple = ()) -> None:
        self.fail = set(fail)
        self.asked: list[str] = []

    def __call__(self, body: str, k: int) -> list:
        self.asked.append(body)
        if body in self.fail:
            raise RuntimeError("search backend down")
        return HITS[:k]


def test_phase_a_entries_are_documents_and_spans(tmp_path):
    result = BatchRun(tmp_path / "run", "A", Search(), progress=False).run([question("q1")])
    (entry,) = result.entries
    assert entry["documents"] == [URL + "11", URL + "12", URL + "13"]  # distinct, rank order
    assert [s["text"] for s in entry["snippets"]] == [h.text for h in HITS]
    for s in entry["snippets"]:
        assert ARTICLE[s["document"][len(URL):]][s["offsetInBeginSection"]:s["offsetInEndSection"]] == s["text"]
    assert "exact_answer" not in entry and result.answered == 1 and not result.failures


def test_prune_cuts_the_snippets_per_question_and_per_document(tmp_path):
    run = BatchRun(tmp_path / "run", "A", Search(), prune=2, prune_per_document=1, progress=False)
    (entry,) = run.run([question("q1")]).entries
    assert [s["document"] for s in entry["snippets"]] == [URL + "11", URL + "12"]  # one per article, two in all
    assert len(entry["documents"]) == 3  # the documents still come from every hit
    with pytest.raises(ValueError, match="prune_per_document goes with prune"):
        BatchRun(tmp_path / "x", "A", Search(), prune_per_document=1)


def test_a_failed_question_is_logged_and_retried_on_resume(tmp_path):
    qs = [question("q1"), question("q2", body="Which drug is added when metformin fails?"), question("q3")]
    out = tmp_path / "run"
    first = BatchRun(out, "A", Search(fail=(qs[1].body,)), progress=False).run(qs)
    assert [e["id"] for e in first.entries] == ["q1", "q3"] and first.failures[0]["id"] == "q2"
    assert "search backend down" in first.failures[0]["error"]
    search = Search()
    second = BatchRun(out, "A", search, progress=False).run(qs)
    assert search.asked == [qs[1].body]  # the others came from the cache
    assert [e["id"] for e in second.entries] == ["q1", "q2", "q3"] and (second.answered, second.cached) == (1, 2)
    lines = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
    assert [(x["id"], x["status"]) for x in lines] == [("q1", "ok"), ("q2", "failed"), ("q3", "ok"),
                                                       ("q1", "cached"), ("q2", "ok"), ("q3", "cached")]
    assert all(x["ms"] >= 0 for x in lines) and "search backend down" in lines[1]["error"]


def test_a_run_with_other_options_is_refused_in_the_same_folder(tmp_path):
    BatchRun(tmp_path / "run", "A", Search(), progress=False).run([question("q1")])
    with pytest.raises(ValueError, match="other options.*prune"):
        BatchRun(tmp_path / "run", "A", Search(), prune=3, progress=False).run([question("q1")])


def test_ids_that_are_no_file_names_are_cached_safely(tmp_path):
    out = tmp_path / "run"
    BatchRun(out, "A", Search(), progress=False).run([question("../../evil id")])
    assert [p.parent for p in (out / "questions").iterdir()] == [out / "questions"]
    assert not (tmp_path / "evil id.json").exists()


def test_extractive_answers_without_an_llm(tmp_path):
    qs = [question("f1"), question("y1", "yesno", "Is metformin the first line drug for type 2 diabetes?"),
          question("s1", "summary", "What lowers hepatic glucose output?")]
    entries = BatchRun(tmp_path / "run", "A+", Search(), progress=False).run(qs).entries
    f1, y1, s1 = entries
    assert ["Metformin"] in f1["exact_answer"] and f1["ideal_answer"].startswith("Metformin is the first line")
    assert y1["exact_answer"] == "yes" and "[1]" not in y1["ideal_answer"]
    assert s1["exact_answer"] is None and "hepatic glucose" in s1["ideal_answer"]


class Scripted:
    """A backend that answers every prompt the same way and records the prompts."""

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.prompts: list[str] = []

    def generate(self, messages, **kw) -> str:
        self.prompts.append(messages[-1]["content"])
        return self.reply


def test_phase_b_answers_from_the_batch_snippets(tmp_path):
    q = BioASQQuestion("b1", "What is the first line drug for type 2 diabetes?", "factoid", ["11"],
                       [Snippet("11", "Metformin is the first line drug.")], None, [])
    llm = Scripted("EXACT: metformin\nIDEAL: Metformin.")
    (entry,) = BatchRun(tmp_path / "run", "B", None, llm, progress=False).run([q]).entries
    assert entry["exact_answer"] == [["metformin"]] and entry["ideal_answer"] == "Metformin."
    assert "Metformin is the first line drug." in llm.prompts[0] and "documents" not in entry
    with pytest.raises(ValueError, match="give no collection"):
        BatchRun(tmp_path / "x", "B", Search(), llm)
    with pytest.raises(ValueError, match="Phase A writes|answer"):
        BatchRun(tmp_path / "x", "A", Search(), llm)


def test_an_unreadable_reply_is_the_models_answer(tmp_path):
    q = question("y1", "yesno", "Is metformin the first line drug?")
    (entry,) = BatchRun(tmp_path / "run", "A+", Search(), Scripted("I cannot tell."), progress=False).run([q]).entries
    assert entry["ideal_answer"] == "I cannot tell." and entry["parse_error"]
    # no exact answer in the reply: one read from the snippets (BioASQ scores a missing one as wrong)
    assert entry["exact_answer"] == "yes" and entry["exact_answer_from"] == "snippets"


def test_score_submission_and_strip(tmp_path):
    golden = {"questions": [
        {"id": "q1", "type": "factoid", "body": "What is the first line drug for type 2 diabetes?",
         "exact_answer": [["metformin"]], "ideal_answer": ["Metformin."], "documents": [URL + "11"],
         "snippets": [{"document": URL + "11", "text": HITS[0].text, "beginSection": "abstract",
                       "endSection": "abstract", "offsetInBeginSection": 0, "offsetInEndSection": len(HITS[0].text)}]},
        {"id": "q2", "type": "yesno", "body": "Is insulin added?", "exact_answer": "yes", "ideal_answer": ["Yes."],
         "documents": [URL + "12"], "snippets": []}]}
    path = tmp_path / "golden.json"
    path.write_text(json.dumps(golden))
    batch = strip_batch(golden, "A")
    assert batch["questions"][0] == {"id": "q1", "type": "factoid", "body": golden["questions"][0]["body"]}
    assert "snippets" in strip_batch(golden, "B")["questions"][0]
    (tmp_path / "batch.json").write_text(json.dumps(batch))
    qs = load_bioasq(tmp_path / "batch.json", golden=False)
    with pytest.raises(ValueError, match="golden=False"):
        load_bioasq(tmp_path / "batch.json")
    entries = BatchRun(tmp_path / "run", "A+", Search(), Scripted("EXACT: metformin\nIDEAL: Metformin."),
                       progress=False).run(qs[:1]).entries
    scores = score_submission(entries, load_bioasq(path))
    assert scores["count"] == 1 and scores["missing"] == ["q2"]
    assert scores["retrieval"]["document"]["map"] == 1.0 and scores["retrieval"]["snippet"]["map"] == 1.0
    assert scores["answers"]["exact"]["factoid"]["strict"] == 1.0
    with pytest.raises(ValueError, match="none of the submission"):
        score_submission([{"id": "zz"}], load_bioasq(path))


def test_a_prompt_over_the_context_is_retried_with_half_the_evidence(tmp_path):
    from medretrieve.generation.llm import LLMContextTooLong

    class Small(Scripted):
        def generate(self, messages, **kw):
            if messages[-1]["content"].count("Metformin") + messages[-1]["content"].count("Insulin") > 2:
                raise LLMContextTooLong("Requested tokens (3000) exceed context window of 2048")
            return super().generate(messages, **kw)

    llm = Small("EXACT: metformin\nIDEAL: Metformin.")
    (entry,) = BatchRun(tmp_path / "run", "A+", Search(), llm, progress=False).run([question("q1")]).entries
    assert entry["exact_answer"] == [["metformin"]] and "answered from the first 2" in entry["note"]
    never = Small("x")
    never.generate = lambda messages, **kw: (_ for _ in ()).throw(LLMContextTooLong("too long"))
    result = BatchRun(tmp_path / "run2", "A+", Search(), never, progress=False).run([question("q1")])
    assert result.failures and "LLMContextTooLong" in result.failures[0]["error"]


# ----------------------------------------------------------------------------- exact answers per type (fake server)

TYPED = [BioASQQuestion("y", "Does aspirin inhibit platelet cyclooxygenase?", "yesno", ["501"],
                        [Snippet("501", "Aspirin irreversibly inhibits platelet cyclooxygenase.")], None, []),
         BioASQQuestion("f", "What is the first line drug for type 2 diabetes?", "factoid", ["502"],
                        [Snippet("502", "Metformin is the first line drug for type 2 diabetes.")], None, []),
         BioASQQuestion("l", "Which organs does cystic fibrosis affect?", "list", ["503"],
                        [Snippet("503", "The disease affects the lung and pancreas.")], None, []),
         BioASQQuestion("s", "What causes cystic fibrosis?", "summary", ["503"],
                        [Snippet("503", "Cystic fibrosis is caused by mutations in the CFTR gene.")], None, [])]


def _run_b(tmp_path, handler) -> tuple[list, list]:
    from llm_server import FakeLLMServer

    from medretrieve.generation.llm import OpenAIBackend

    with FakeLLMServer(handler) as srv:
        entries = BatchRun(tmp_path / "run", "B", None, OpenAIBackend(srv.base_url, "fake-model"), max_tokens=128,
                           progress=False).run(TYPED).entries
        return entries, [r["json"] for r in srv.requests]


def test_each_type_gets_its_exact_answer_in_the_bioasq_shape(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    from bioasq_golden import bioasq_llm, validate

    from medretrieve.generation.generate import write_bioasq_submission

    entries, requests = _run_b(tmp_path, bioasq_llm)
    y, f, lst, s = entries
    assert y["exact_answer"] == "yes" and f["exact_answer"] == [["metformin"], ["insulin"]]
    assert lst["exact_answer"] == [["lung"], ["pancreas"]] and s["exact_answer"] is None and s["ideal_answer"]
    assert not any("exact_answer_from" in e or "parse_error" in e for e in entries)  # all from the model
    for request, q in zip(requests, TYPED):  # each asked under its type's schema, which the reply fits
        schema = request["response_format"]["json_schema"]["schema"]
        assert request["response_format"]["json_schema"]["name"] == f"bioasq_{q.type}"
        jsonschema.validate(json.loads(bioasq_llm(request)[1]["choices"][0]["message"]["content"]), schema)
    doc = write_bioasq_submission(entries, tmp_path / "submission.json", phase="B")
    validate(doc, "phaseB")
    assert doc["questions"][1]["exact_answer"] == [["metformin"], ["insulin"]] and "exact_answer" not in \
        doc["questions"][3]


def test_a_reply_without_an_exact_answer_gets_one_from_the_snippets(tmp_path):
    """SmolLM2-135M wrote numbered prose and no exact answer to factoid and list prompts: the entry then takes
    the exact answer from the snippets it was shown and says so; the model's prose stays its ideal answer."""
    pytest.importorskip("jsonschema")
    from bioasq_golden import validate

    from medretrieve.generation.generate import write_bioasq_submission

    def prose(request):
        return "1. The snippets say so.\n2. The snippets say so."

    entries, _ = _run_b(tmp_path, prose)
    y, f, lst, s = entries
    assert y["exact_answer"] == "yes" and f["exact_answer"][0] == ["Metformin"]
    assert ["pancreas"] in lst["exact_answer"]
    assert [e.get("exact_answer_from") for e in entries] == ["snippets", "snippets", "snippets", None]
    assert all(e["parse_error"] for e in (f, lst)) and f["ideal_answer"].startswith("1. The snippets say so.")
    assert s["exact_answer"] is None and s["ideal_answer"]
    validate(write_bioasq_submission(entries, tmp_path / "submission.json", phase="B"), "phaseB")

    def sentences(request):  # an empty list, or names that are sentences, are no answer either
        return json.dumps({"ideal_answer": "It is known.", "exact_answer": [] if "(list)" in str(request) else
                           ["The first line drug for type 2 diabetes is"]})

    entries, _ = _run_b(tmp_path / "again", sentences)
    assert entries[1]["exact_answer_from"] == entries[2]["exact_answer_from"] == "snippets"
    assert entries[1]["ideal_answer"] == "It is known."  # the reply's ideal answer, not its JSON
    assert entries[1]["exact_answer"][0] == ["Metformin"] and ["pancreas"] in entries[2]["exact_answer"]


@pytest.mark.parametrize("damage", [
    '{"id": "q2", "ty',  # cut short: stopped the whole batch with a ValueError before
    "[1, 2]",  # not an entry: the submission failed at the end, naming no file
    '{"id": "q1", "type": "factoid", "documents": ["x"]}',  # another question's entry: "q1 appears twice"
    '{"id": "q2", "type": "yesno"}',  # this id with another type
])
def test_a_damaged_cache_entry_is_answered_again_and_rewritten(tmp_path, damage, caplog):
    qs = [question("q1"), question("q2", body="Which drug is added when metformin fails?")]
    out = tmp_path / "run"
    BatchRun(out, "A", Search(), progress=False).run(qs)
    intact = (out / "questions" / "q2.json").read_text()
    (out / "questions" / "q2.json").write_text(damage)
    search = Search()
    again = BatchRun(out, "A", search, progress=False).run(qs)
    assert search.asked == [qs[1].body] and (again.answered, again.cached) == (1, 1)
    assert [e["id"] for e in again.entries] == ["q1", "q2"]
    assert json.loads((out / "questions" / "q2.json").read_text())["documents"] == json.loads(intact)["documents"]
    assert "q2.json" in caplog.text and "answered again" in caplog.text


# ----------------------------------------------------------------------------- the cache, damaged (issue 43, item 7)

CACHE_QS = [question("f1"), question("y1", "yesno", "Is metformin the first line drug for type 2 diabetes?")]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """An A+ run's folder (extractive answers) and the submission it makes."""
    out = tmp_path_factory.mktemp("pristine") / "run"
    entries = BatchRun(out, "A+", Search(), progress=False).run(CACHE_QS).entries
    return out, write_bioasq_submission(entries, out / "submission.json", phase="A+")


def _rerun(folder: Path) -> tuple[dict, Search]:
    search = Search()
    result = BatchRun(folder, "A+", search, progress=False).run(CACHE_QS)
    assert not result.failures
    return write_bioasq_submission(result.entries, folder / "submission.json", phase="A+"), search


def _paths(value, at=()):
    """Every place in a JSON value: ``(path, value)``, the value itself first."""
    yield at, value
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, inner in items:
        yield from _paths(inner, at + (key,))


JSON = st.recursive(st.none() | st.booleans() | st.integers(-5, 10**12) | st.floats(allow_nan=False)
                    | st.text(max_size=8) | st.sampled_from(["", "yes", "no", URL + "12", URL + "1x2", "12"]),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                    max_leaves=6)


def _mutate(entry: dict, data) -> dict:
    """``entry`` with one place changed: removed, replaced by another JSON value, or (a string) edited."""
    damaged = json.loads(json.dumps(entry))
    places = [p for p, _ in _paths(damaged) if p and p[-1] != SEAL_KEY]
    path = data.draw(st.sampled_from(places))
    parent = damaged
    for key in path[:-1]:
        parent = parent[key]
    action = data.draw(st.sampled_from(["remove", "replace", "edit"]))
    if action == "remove":
        del parent[path[-1]]
    elif action == "edit" and isinstance(parent[path[-1]], str):
        text = parent[path[-1]]
        at = data.draw(st.integers(0, len(text)))
        parent[path[-1]] = text[:at] + data.draw(st.sampled_from(["x", "7", " ", ""])) + text[at + 1:]
    else:
        parent[path[-1]] = data.draw(JSON)
    return damaged


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), which=st.sampled_from(["f1", "y1"]), forge=st.booleans())
def test_a_mutated_cache_entry_is_answered_again_and_the_submission_is_unchanged(pristine, data, which, forge):
    """Each field of a real cached entry mutated (removed, replaced by any JSON value, a character edited). With
    its seal the edit is always seen; with the seal forged (recomputed over the damage) only the field checks see
    it. Either way the rerun never fails, and the submission equals the undamaged run's unless the forged entry is
    one a submission can hold (then that entry is what is submitted)."""
    source, submission = pristine
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "run"
        shutil.copytree(source, folder)
        path = folder / "questions" / f"{which}.json"
        entry = json.loads(path.read_text())
        damaged = _mutate(entry, data)
        if forge:
            damaged = seal(damaged)
        path.write_text(json.dumps(damaged))
        unchanged = damaged == entry
        q = next(q for q in CACHE_QS if q.id == which)
        taken = entry_problem(damaged, q.id, q.type, "A+", 10) is None
        again, search = _rerun(folder)
        assert search.asked == ([] if taken else [q.body])
        if unchanged or not taken:
            assert again == submission
        else:  # a forged seal over values a submission takes: that entry is submitted (written: no exit 2)
            assert forge and json.loads(path.read_text()) == damaged
            mine = write_bioasq_submission([damaged], folder / "mine.json", phase="A+")["questions"][0]
            assert [e for e in again["questions"] if e["id"] == which] == [mine]
        if not taken:  # rewritten whole: the next run takes it from the cache
            assert entry_problem(json.loads(path.read_text()), q.id, q.type, "A+", 10) is None


@pytest.mark.parametrize("edit, reason", [
    (lambda e: e.update(documents=URL + "11"), "documents is a str"),  # the campaign's: exit 2 on every rerun
    (lambda e: e["snippets"][0].pop("offsetInBeginSection"), "offsetInBeginSection"),
    (lambda e: e["snippets"][0].pop("text"), "snippet 'text'"),
    (lambda e: e.update(exact_answer={"name": "metformin"}), "not a list"),
    (lambda e: e.pop("documents"), "documents missing"),  # submitted silently, exit 0, before
    (lambda e: e["documents"].__setitem__(0, URL + "1a1"), "not a PubMed URL"),
    (lambda e: e.update(ideal_answer=["Metformin."]), "ideal_answer is a list"),
    (lambda e: e["exact_answer"].append("metformin"), "not a list of non-empty names"),
    (lambda e: e.update(documents=[URL + "11"] * 11), "more than 10"),
])
def test_each_damage_the_campaign_found_is_seen_by_the_field_checks(pristine, tmp_path, edit, reason, caplog):
    source, submission = pristine
    folder = tmp_path / "run"
    shutil.copytree(source, folder)
    path = folder / "questions" / "f1.json"
    entry = json.loads(path.read_text())
    edit(entry)
    path.write_text(json.dumps(seal(entry)))  # a valid seal: only the field checks can tell
    again, search = _rerun(folder)
    assert search.asked == [CACHE_QS[0].body] and again == submission
    assert reason in caplog.text and "f1.json" in caplog.text and "answered again" in caplog.text


def test_an_entry_written_before_the_seal_is_taken_when_its_fields_check(pristine, tmp_path):
    source, submission = pristine
    folder = tmp_path / "run"
    shutil.copytree(source, folder)
    for q in CACHE_QS:
        path = folder / "questions" / f"{q.id}.json"
        entry = json.loads(path.read_text())
        assert entry.pop(SEAL_KEY)
        path.write_text(json.dumps(entry))
    again, search = _rerun(folder)
    assert search.asked == [] and again == submission


def test_killed_runs_temporary_files_are_removed_and_only_those(pristine, tmp_path):
    source, _ = pristine
    folder = tmp_path / "run"
    shutil.copytree(source, folder)
    left = [folder / "questions" / ".f1.json.tmp-4242", folder / ".run.json.tmp-17", folder / ".submission-ab_9x.json",
            folder / ".results.md.tmp-3", folder / ".results.json.tmp-3"]
    kept = [folder / "questions" / "notes.json.tmp-1", folder / ".f1.json.tmp-x", folder / "questions" / ".hidden",
            folder / "mine.json"]
    for p in left + kept:
        p.write_text("{}")
    _rerun(folder)
    assert [p.name for p in left if p.exists()] == [] and all(p.exists() for p in kept)


def test_a_second_run_of_the_same_folder_is_refused_while_one_runs(pristine, tmp_path):
    source, _ = pristine
    folder = tmp_path / "run"
    shutil.copytree(source, folder)
    first = BatchRun(folder, "A+", Search(), progress=False)
    with first.holding():
        with pytest.raises(ValueError, match="another run is writing"):
            BatchRun(folder, "A+", Search(), progress=False).run(CACHE_QS)
        assert len(first.run(CACHE_QS).entries) == 2  # the holder itself goes on (reentrant)
    assert len(BatchRun(folder, "A+", Search(), progress=False).run(CACHE_QS).entries) == 2
