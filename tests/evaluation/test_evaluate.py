"""Evaluation runs: retrieval and BioASQ answers with plain callables, the `eval` CLI, reports."""
from __future__ import annotations

import dataclasses

import json
from pathlib import Path

import pytest

from medretrieve.evaluation import evaluate as E
from medretrieve.evaluation.bioasq import answers as A
from medretrieve.evaluation.bioasq.golden import load_bioasq

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "eval"
BIOASQ = FIX / "bioasq_tiny.json"

HITS = {
    "Is aspirin an antiplatelet drug?": [
        {"document_id": "111", "text": "Aspirin irreversibly inhibits platelet cyclooxygenase."},
        {"document_id": "999", "text": "noise"},
        {"document_id": "111", "text": "other words entirely unrelated here"},
        {"document_id": "222", "text": "Low-dose aspirin is used as antiplatelet therapy."},
    ],
    "Which gene is mutated in cystic fibrosis?": [],
    "List symptoms of influenza.": [{"document_id": "444", "text": "x"}],
    "What is hemolacria?": [{"document_id": "1", "text": "y"}],
}


def plain_search(question: str, k: int):
    return HITS[question][:k]


def test_evaluate_retrieval_hand_computed():
    res = E.evaluate_retrieval(plain_search, load_bioasq(BIOASQ), k=10)
    rows = {r["id"]: r for r in res.rows}
    # q-yes documents [111, 999, 222]: hits at 1 and 3 of 2 gold -> (1 + 2/3) / 2
    assert rows["q-yes"]["retrieved_documents"] == ["111", "999", "222"]
    assert rows["q-yes"]["document"]["ap"] == pytest.approx((1 + 2 / 3) / 2)
    # snippets: hit 1 matches gold snippet 0 (text), hit 4 gold snippet 1 -> (1 + 2/4) / 2
    assert rows["q-yes"]["snippet"]["ap"] == pytest.approx(0.75)
    assert rows["q-fact"]["document"]["ap"] == 0.0 and rows["q-fact"]["snippet"]["recall"] == 0.0
    assert rows["q-list"]["document"]["ap"] == 1.0 and rows["q-list"]["snippet"] is None  # no gold snippets
    assert rows["q-sum"]["document"] is None  # no gold documents: left out
    assert res.document["count"] == 3 and res.document["map"] == pytest.approx(((1 + 2 / 3) / 2 + 0 + 1) / 3)
    assert res.snippet["count"] == 2 and res.snippet["map"] == pytest.approx(0.375)
    assert res.by_type["yesno"]["document"]["map"] == pytest.approx((1 + 2 / 3) / 2)
    assert set(res.latency_ms) == {"mean", "p50", "p95"}
    json.dumps(res.to_dict())  # JSON-ready


def test_evaluate_retrieval_asks_for_fetch_k_and_cuts_at_k():
    asked = []

    def search(question, k):
        asked.append(k)
        return [{"document_id": str(i), "text": f"t{i}"} for i in range(k)]

    qs = load_bioasq(BIOASQ)[:1]
    res = E.evaluate_retrieval(search, qs, k=2)
    assert asked == [6]  # 3 * k by default
    assert res.rows[0]["retrieved_documents"] == ["0", "1"]
    with pytest.raises(ValueError, match="fetch_k"):
        E.evaluate_retrieval(search, qs, k=5, fetch_k=2)
    with pytest.raises(ValueError, match="no questions"):
        E.evaluate_retrieval(search, [], k=5)


def test_hit_snippet_uses_bioasq_offsets_only():
    class Hit:
        document_id = "111"
        text = "zzz"
        section = "abstract"
        metadata = {"offsetInBeginSection": 50, "offsetInEndSection": 80}

    s = E.hit_snippet(Hit())
    assert (s.offset_begin, s.offset_end, s.section) == (50, 80, "abstract")
    Hit.metadata = {"start": 3}
    assert E.hit_snippet(Hit()).offset_begin is None


def _answers(q):
    if q.type == "summary":
        raise RuntimeError("backend down")
    return {
        "yesno": A.BioASQAnswer("yes", "Yes, aspirin inhibits platelet aggregation."),
        "factoid": A.BioASQAnswer(["cftr", "tnf"], "CFTR is mutated in cystic fibrosis."),
        "list": A.BioASQAnswer(["Fever", "cough"], ""),
    }[q.type]


def test_evaluate_bioasq_answers_hand_computed():
    res = A.evaluate_bioasq_answers(_answers, load_bioasq(BIOASQ), max_workers=2)
    assert res["count"] == 3 and res["errors"] == [{"id": "q-sum", "error": "RuntimeError: backend down"}]
    assert res["exact"]["yesno"] == {"count": 1, "accuracy": 1.0, "macro_f1": 0.5}  # the 'no' class has F1 0
    assert res["exact"]["factoid"]["strict"] == 1.0
    # list: 2 correct of 2 predicted, 2 of 3 gold found -> F1 = 0.8
    assert res["exact"]["list"] == pytest.approx({"count": 1, "precision": 1.0, "recall": 2 / 3, "f1": 0.8})
    # ideal: two exact copies of the reference, one empty answer
    assert res["ideal"]["count"] == 3 and res["ideal"]["rouge2_f"] == pytest.approx(2 / 3)


def test_bioasq_answer_fn_through_the_fake_llm():
    from llm_server import FakeLLMServer

    from medretrieve.generation.llm import OpenAIBackend

    def reply(request):
        user = request["messages"][-1]["content"]
        assert "Aspirin irreversibly inhibits" in user  # the retrieved snippets are in the prompt
        return "EXACT: yes\nIDEAL: Yes, aspirin inhibits platelet aggregation."

    (q,) = [q for q in load_bioasq(BIOASQ) if q.type == "yesno"]
    with FakeLLMServer(reply) as srv, OpenAIBackend(srv.base_url, "m", max_retries=0) as backend:
        fn = A.make_bioasq_answer_fn(plain_search, backend, k=3)
        ans = fn(q)
    assert ans.exact == "yes" and ans.ideal.startswith("Yes, aspirin")
    res = A.evaluate_bioasq_answers(lambda _q: ans, [q])
    assert res["ideal"]["rouge2_f"] == 1.0


def test_bioasq_answer_without_exact_line_keeps_its_prose_as_ideal():
    from llm_server import FakeLLMServer

    from medretrieve.generation.llm import OpenAIBackend

    (q,) = [q for q in load_bioasq(BIOASQ) if q.type == "yesno"]
    q = dataclasses.replace(q, type="factoid")
    with FakeLLMServer(lambda _r: "```\nAspirin inhibits platelet aggregation.\n```") as srv, \
            OpenAIBackend(srv.base_url, "m", max_retries=0) as backend:
        ans = A.make_bioasq_answer_fn(plain_search, backend, k=3)(q)
    assert ans.exact is None and "EXACT" in ans.error
    assert ans.ideal == "Aspirin inhibits platelet aggregation."


# --------------------------------------------------------------------------- CLI


def test_cli_eval_retrieval_writes_results(tmp_path, monkeypatch, capsys):
    from medretrieve.cli import main

    monkeypatch.setattr(E, "open_search_fn", lambda collection, deadline_ms=None, options=None, ranker=None: plain_search)
    out = tmp_path / "out"
    rc = main(["eval", "retrieval", str(tmp_path / "coll"), "--bioasq", str(BIOASQ), "--out", str(out), "--no-progress"])
    assert rc == 0
    data = json.loads((out / "results.json").read_text())
    assert data["k"] == 10 and data["document"]["map"] == pytest.approx(((1 + 2 / 3) / 2 + 1) / 3)
    assert set(data["snippet"]) >= {"map", "recall", "ndcg", "count"} and len(data["rows"]) == 4
    md = (out / "results.md").read_text()
    assert "| document | 3 |" in md and "MAP@10" in md
    assert "MAP@10" in capsys.readouterr().out


def test_cli_eval_reports_bad_input(tmp_path, capsys):
    from medretrieve.cli import main

    rc = main(["eval", "retrieval", str(tmp_path), "--bioasq", str(tmp_path / "missing.json"), "--out", str(tmp_path)])
    assert rc == 2 and "missing.json: no such file" in capsys.readouterr().err


def test_cli_eval_medrgb_tables_and_plots(tmp_path, monkeypatch):
    from llm_server import FakeLLMServer
    from medrgb_fakes import fake_search, smart_llm

    from medretrieve.cli import main

    monkeypatch.setattr(E, "open_search_fn", lambda collection, deadline_ms=None, options=None, ranker=None: fake_search)
    # three questions whose text carries the q1..q3 markers fake_search and smart_llm read
    medqa = tmp_path / "medqa.jsonl"
    medqa.write_text("".join(
        json.dumps({"question": f"Question {qid}: which option is right?", "options": {"A": "a", "B": "b", "C": "c", "D": "d"},
                    "answer_idx": ans}) + "\n" for qid, ans in (("q1", "A"), ("q2", "B"), ("q3", "C"))))
    out = tmp_path / "out"
    with FakeLLMServer(smart_llm) as srv:
        rc = main(["eval", "medrgb", "--dataset", f"medqa:{medqa}", "--collection", str(tmp_path / "coll"),
                   "--llm", srv.base_url, "--model", "fake-model", "--out", str(out), "--p", "0", "100",
                   "--n", "5", "--standard-n", "5", "--scenarios", "standard", "sufficiency", "robustness",
                   "--no-progress", "--label", "perfect"])
    assert rc == 0
    data = json.loads((out / "results.json").read_text())
    (run,) = data["runs"]
    assert run["label"] == "perfect" and run["dataset"] == "medqa"
    assert run["settings"]["sufficiency-n5-p100"]["accuracy"] == 1.0
    assert run["settings"]["sufficiency-n5-p0"]["insufficient_share"] == 1.0
    md = (out / "results.md").read_text()
    assert "### sufficiency: accuracy" in md and "MedQA-US n=5 p=0" in md and "| perfect |" in md
    for name in ("medrgb_sufficiency.png", "medrgb_robustness.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    assert (out / "medqa" / "items.jsonl").is_file()  # the resumable cache
    # a second pipeline's run, merged with the first into one table: rows are the runs
    other = json.loads((out / "results.json").read_text())
    other["runs"][0]["label"] = "other"
    (tmp_path / "other.json").write_text(json.dumps(other))
    assert main(["eval", "report", str(out / "results.json"), str(tmp_path / "other.json"), "--out", str(tmp_path / "both")]) == 0
    merged = (tmp_path / "both" / "results.md").read_text()
    assert "| perfect |" in merged and "| other |" in merged
    assert (tmp_path / "both" / "medrgb_sufficiency.png").is_file()
    assert main(["eval", "report", str(medqa), "--out", str(tmp_path / "bad")]) == 2


def test_medrgb_markdown_layout_rows_are_runs():
    from medretrieve.evaluation.report import medrgb_markdown

    def run(label, ds, acc):
        return {"label": label, "dataset": ds, "errors": [], "settings": {
            "standard-n5": {"scenario": "standard", "n": 5, "p": 100, "count": 2, "accuracy": acc}}}

    md = medrgb_markdown([run("gpt", "mmlu_med", 0.5), run("gpt", "pubmedqa", 0.25), run("llama", "mmlu_med", 1.0)])
    table = md.split("### standard: accuracy")[1].split("###")[0]
    assert "| model / pipeline | MMLU-Med n=5 | PubMedQA* n=5 |" in table
    assert "| gpt | 0.500 | 0.250 |" in table and "| llama | 1.000 | – |" in table


def test_cli_eval_retrieval_on_a_built_collection(tmp_path, capsys):
    """End to end: build a tiny collection from the BioASQ fixture, evaluate it through the CLI."""
    from encoder_fixtures import export_tiny

    from medretrieve.cli import main
    from medretrieve.corpus.collection import Collection

    encoder = export_tiny(tmp_path, "symmetric")
    Collection.build(BIOASQ, tmp_path / "coll", encoder=encoder, progress=False)
    out = tmp_path / "out"
    rc = main(["eval", "retrieval", str(tmp_path / "coll"), "--bioasq", str(BIOASQ), "--out", str(out),
               "--deadline-ms", "none", "--no-progress"])
    assert rc == 0, capsys.readouterr().err
    data = json.loads((out / "results.json").read_text())
    rows = {r["id"]: r for r in data["rows"]}
    # the corpus holds the documents that have gold snippets: 111, 222 and 333
    assert set(rows["q-yes"]["retrieved_documents"]) == {"111", "222", "333"}
    assert rows["q-yes"]["document"]["recall"] == 1.0 and rows["q-fact"]["document"]["recall"] == 1.0
    assert rows["q-list"]["document"]["recall"] == 0.0  # 444 has no text, so it is not in the corpus
    assert data["document"]["count"] == 3 and data["snippet"]["count"] == 2
    assert 0.0 < data["snippet"]["map"] <= 1.0


def test_parse_search_options():
    from medretrieve.cli.evaluate import parse_search_options

    assert parse_search_options(["lexical=false", "per-document=2", "x=0.5", "y=none", "z=abc"]) == {
        "lexical": False, "per_document": 2, "x": 0.5, "y": None, "z": "abc"}
    with pytest.raises(ValueError, match="NAME=VALUE"):
        parse_search_options(["lexical"])
    with pytest.raises(ValueError, match="--k"):
        parse_search_options(["k=3"])


def test_retriever_search_fn_passes_options_and_deadline():
    calls = []

    class FakeRetriever:
        def search(self, question, **kwargs):
            calls.append(kwargs)

            class R:
                hits = ["h"]

            return R()

    assert E.retriever_search_fn(FakeRetriever(), options={"lexical": False})("q", 4) == ["h"]
    E.retriever_search_fn(FakeRetriever(), None)("q", 2)
    assert calls == [{"lexical": False, "k": 4}, {"k": 2, "deadline_ms": None}]


def test_cli_eval_bioasq_through_the_fake_llm(tmp_path, monkeypatch):
    from llm_server import FakeLLMServer

    from medretrieve.cli import main

    monkeypatch.setattr(E, "open_search_fn", lambda collection, deadline_ms=None, options=None, ranker=None: plain_search)

    def reply(request):
        user = request["messages"][-1]["content"]
        if "aspirin" in user:
            return "EXACT: yes\nIDEAL: Yes, aspirin inhibits platelet aggregation."
        if "cystic fibrosis" in user:
            return "EXACT: CFTR | TNF\nIDEAL: CFTR is mutated in cystic fibrosis."
        if "influenza" in user:
            return "EXACT: fever | cough\nIDEAL: Fever, cough and myalgia."
        return "IDEAL: Hemolacria is the presence of blood in tears."

    out = tmp_path / "out"
    with FakeLLMServer(reply) as srv:
        rc = main(["eval", "bioasq", str(tmp_path / "coll"), "--bioasq", str(BIOASQ), "--llm", srv.base_url,
                   "--model", "fake-model", "--out", str(out), "--no-progress", "--workers", "2"])
    assert rc == 0
    data = json.loads((out / "results.json").read_text())
    assert data["exact"]["yesno"]["accuracy"] == 1.0 and data["exact"]["factoid"]["strict"] == 1.0
    assert data["exact"]["list"]["f1"] == pytest.approx(0.8)
    assert data["ideal"]["count"] == 4 and data["ideal"]["rouge2_f"] == 1.0
    md = (out / "results.md").read_text()
    assert "| factoid | 1 | strict | 1.000 |" in md and "ROUGE-SU4 F1" in md
    # evidence documents: q-yes [111, 999, 222] -> AP (1 + 2/3)/2; q-list [444] -> 1; q-fact none retrieved
    assert data["retrieval"]["count"] == 2 and data["retrieval"]["map"] == pytest.approx(((1 + 2 / 3) / 2 + 1) / 2)
    sub = json.loads((out / "submission.json").read_text())
    entries = {e["id"]: e for e in sub["questions"]}
    assert entries["q-yes"]["exact_answer"] == "yes" and entries["q-fact"]["exact_answer"] == [["CFTR"], ["TNF"]]
    assert entries["q-yes"]["documents"][0] == "http://www.ncbi.nlm.nih.gov/pubmed/111"
    assert "exact_answer" not in entries["q-sum"] and sub["system"] == "fake-model"


def test_cli_eval_medrgb_grid_judge_and_resume(tmp_path, monkeypatch):
    """``--grid``: every setting of the protocol, tables and plots (accuracy, noise and fact detection vs p),
    a separate judge named in the report, and a rerun answered from the caches."""
    from llm_server import FakeLLMServer
    from medrgb_fakes import fake_search, smart_llm

    from medretrieve.cli import main

    monkeypatch.setattr(E, "open_search_fn", lambda collection, deadline_ms=None, options=None, ranker=None: fake_search)
    medqa = tmp_path / "medqa.jsonl"
    medqa.write_text("".join(
        json.dumps({"question": f"Question {qid}: which option is right?", "options": {"A": "a", "B": "b", "C": "c", "D": "d"},
                    "answer_idx": ans}) + "\n" for qid, ans in (("q1", "A"), ("q2", "B"))))
    out = tmp_path / "out"
    with FakeLLMServer(smart_llm) as srv, FakeLLMServer(smart_llm) as judge:
        args = ["eval", "medrgb", "--dataset", f"medqa:{medqa}", "--collection", str(tmp_path / "coll"), "--llm",
                srv.base_url, "--model", "fake-model", "--judge-llm", judge.base_url, "--judge-model", "judge-m",
                "--out", str(out), "--no-progress", "--grid", "--workers", "8"]
        assert main(args) == 0
        asked = len(srv.requests) + len(judge.requests)
        assert main(args) == 0  # resumed: every answer comes from the caches
        assert len(srv.requests) + len(judge.requests) == asked
        assert main(args + ["--n", "5"]) == 2  # --grid decides the settings
    (run,) = json.loads((out / "results.json").read_text())["runs"]
    assert len(run["settings"]) == 4 + 3 * 3 * 6 and run["errors"] == []
    assert run["settings"]["standard-n0"]["accuracy"] == 1.0 and run["settings"]["standard-n10"]["count"] == 2
    assert run["settings"]["sufficiency-n20-p0"]["noise_detection_accuracy"] == 1.0
    assert run["settings"]["robustness-n20-p40"]["fact_detection_rate"] == 1.0
    md = (out / "results.md").read_text()
    assert "MedQA-US n=0 (no retrieval)" in md and "judge-m (separate from the model under test)" in md
    assert "### robustness: sub-answer exact match" in md and "### sufficiency: noise-detection accuracy" in md
    for name in ("medrgb_sufficiency.png", "medrgb_integration.png", "medrgb_robustness.png",
                 "medrgb_sufficiency_noise_detection_accuracy.png", "medrgb_robustness_fact_detection_rate.png"):
        assert (out / name).stat().st_size > 1000


def _medqa_two(tmp_path):
    medqa = tmp_path / "medqa.jsonl"
    medqa.write_text("".join(
        json.dumps({"question": f"Question {qid}: which option is right?", "options": {"A": "a", "B": "b", "C": "c",
                                                                                      "D": "d"},
                    "answer_idx": ans}) + "\n" for qid, ans in (("q1", "A"), ("q2", "B"))))
    return medqa


@pytest.mark.parametrize("kind", ["llamacpp", "transformers"])
def test_cli_eval_medrgb_with_a_local_backend(tmp_path, monkeypatch, kind):
    """``--backend llamacpp|transformers --model-path``: the run goes through the in-process model (a stand-in
    here, answering as a perfect model), one request at a time, named by its file in the tables."""
    import threading

    from fake_llama_cpp import gguf, install
    from medrgb_fakes import fake_search, smart_llm

    from medretrieve.cli import main
    from medretrieve.generation import llamacpp

    monkeypatch.setattr(E, "open_search_fn", lambda collection, deadline_ms=None, options=None, ranker=None: fake_search)
    at_once = {"now": 0, "most": 0}
    lock = threading.Lock()

    def answer(request):
        with lock:
            at_once["now"] += 1
            at_once["most"] = max(at_once["most"], at_once["now"])
        try:
            return smart_llm(request)
        finally:
            with lock:
                at_once["now"] -= 1

    if kind == "llamacpp":
        install(monkeypatch, answer)
        model = gguf(tmp_path / "smol.gguf")
    else:
        class Local:  # TransformersBackend's interface, answering as the stand-in does
            max_concurrency = 1

            def __init__(self, path):
                self.path = path

            def generate(self, messages, **kw):
                return answer({"messages": messages, **kw})

        monkeypatch.setattr(llamacpp, "TransformersBackend", Local)
        model = tmp_path / "smol-hf"
        model.mkdir()
    out = tmp_path / "out"
    rc = main(["eval", "medrgb", "--dataset", f"medqa:{_medqa_two(tmp_path)}", "--collection", str(tmp_path / "c"),
               "--backend", kind, "--model-path", str(model), "--out", str(out), "--p", "0", "100", "--n", "5",
               "--standard-n", "0", "5", "--scenarios", "standard", "sufficiency", "integration", "robustness",
               "--no-progress", "--workers", "4"])
    assert rc == 0
    (run,) = json.loads((out / "results.json").read_text())["runs"]
    assert run["label"] == model.name and run["errors"] == []
    assert run["settings"]["sufficiency-n5-p100"]["accuracy"] == 1.0
    assert run["settings"]["robustness-n5-p0"]["fact_detection_rate"] == 1.0
    assert at_once["most"] == 1  # a local model answers one request at a time
    md = (out / "results.md").read_text()
    assert f"| {model.name} |" in md and "the model under test" in md
    # a local backend with a server URL, or without its model, is refused
    assert main(["eval", "medrgb", "--dataset", f"medqa:{_medqa_two(tmp_path)}", "--collection", "c", "--backend",
                 kind, "--out", str(out)]) == 2
