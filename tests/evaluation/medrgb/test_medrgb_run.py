"""MedRGB: context composition (exact proportions, no leakage, seeding) and full scripted runs."""
from __future__ import annotations

import json
from collections import Counter

import pytest

from medrgb_fakes import GOLD, fake_search, smart_llm

from medretrieve.evaluation.datasets import MCQuestion
from medretrieve.evaluation.medrgb import (
    N_VALUES,
    P_VALUES,
    ContextDoc,
    JsonlCache,
    MedRGBRunner,
    compose_context,
    compose_robustness_context,
    make_settings,
    n_signal,
)


def _docs(qid: str, count: int) -> list[ContextDoc]:
    return [ContextDoc(f"{qid}-c{i}", f"text {qid} {i}", source_id=f"{qid}-d{i}", question_id=qid) for i in range(count)]


OWN = _docs("q0", 25)
OTHERS = [d for q in ("q1", "q2", "q3") for d in _docs(q, 25)]
# A chunk of another question that comes from one of q0's own source documents: never noise for q0.
SHARED_SOURCE = ContextDoc("q1-extra", "shared", source_id="q0-d3", question_id="q1")
POOL = OWN + OTHERS + [SHARED_SOURCE]


@pytest.mark.parametrize("n", N_VALUES)
@pytest.mark.parametrize("p", P_VALUES)
def test_compose_context_exact_proportions_and_no_leakage(n, p):
    ctx = compose_context(OWN, POOL, n, p, seed=7, question_id="q0")
    k = round(n * p / 100)
    assert len(ctx) == n
    signal = [d for d in ctx if d.is_signal]
    noise = [d for d in ctx if not d.is_signal]
    assert len(signal) == k and len(noise) == n - k
    assert {d.doc_id for d in signal} == {d.doc_id for d in OWN[:k]}  # the top-ranked signal documents
    own_ids = {d.doc_id for d in OWN} | {d.source_id for d in OWN}
    assert all(d.question_id != "q0" and d.doc_id not in own_ids and d.source_id not in own_ids for d in noise)
    assert len({d.doc_id for d in ctx}) == n  # no duplicates


def test_compose_context_is_seeded_and_shuffled():
    a = compose_context(OWN, POOL, 20, 40, seed="s", question_id="q0")
    b = compose_context(OWN, list(reversed(POOL)), 20, 40, seed="s", question_id="q0")
    assert a == b  # same seed, same content (pool order does not matter)
    c = compose_context(OWN, POOL, 20, 40, seed="other", question_id="q0")
    assert [d.doc_id for d in a] != [d.doc_id for d in c]
    assert [d.is_signal for d in a] != [True] * 8 + [False] * 12  # signal is not simply first


def test_compose_context_errors():
    with pytest.raises(ValueError, match="signal documents"):
        compose_context(OWN[:2], POOL, 10, 40, seed=0, question_id="q0")
    with pytest.raises(ValueError, match="noise documents"):
        compose_context(OWN, OWN + _docs("q1", 2), 5, 0, seed=0, question_id="q0")
    with pytest.raises(ValueError, match="p must be"):
        compose_context(OWN, POOL, 5, 120, seed=0)
    with pytest.raises(ValueError, match="n must be"):
        compose_context(OWN, POOL, 0, 20, seed=0)
    # exclude_ids removes more candidates
    with pytest.raises(ValueError, match="noise documents"):
        compose_context(OWN, _docs("q1", 3), 5, 40, seed=0, exclude_ids={"q1-c0"})


def test_n_signal_rounding():
    assert [n_signal(5, p) for p in P_VALUES] == [0, 1, 2, 3, 4, 5]
    assert [n_signal(10, p) for p in P_VALUES] == [0, 2, 4, 6, 8, 10]
    assert [n_signal(20, p) for p in P_VALUES] == [0, 4, 8, 12, 16, 20]


@pytest.mark.parametrize("n", N_VALUES)
@pytest.mark.parametrize("p", P_VALUES)
def test_robustness_context(n, p):
    cfs = {d.doc_id: ContextDoc(d.doc_id, "FAKE " + d.text, question_id="q0") for d in OWN}
    ctx = compose_robustness_context(OWN, cfs, n, p, seed=3)
    assert len(ctx) == n and {d.doc_id for d in ctx} == {d.doc_id for d in OWN[:n]}
    fake = [d for d in ctx if d.counterfactual]
    assert len(fake) == n - round(n * p / 100)
    assert all(d.text.startswith("FAKE") for d in fake) and not any(d.text.startswith("FAKE") for d in ctx if not d.counterfactual)
    assert ctx == compose_robustness_context(OWN, cfs, n, p, seed=3)


def test_robustness_context_errors():
    with pytest.raises(ValueError, match="need 5 signal"):
        compose_robustness_context(OWN[:3], {}, 5, 40, seed=0)
    with pytest.raises(ValueError, match="no counterfactual"):
        compose_robustness_context(OWN, {}, 5, 40, seed=0)


def test_make_settings():
    settings = make_settings()
    assert len(settings) == 3 + 3 * len(N_VALUES) * len(P_VALUES)
    keys = [s.key for s in settings]
    assert "standard-n0" in keys and "standard-n5" in keys and "standard-n20" in keys  # n=0: no retrieval
    assert "robustness-n10-p60" in keys
    assert len(set(keys)) == len(keys)
    with pytest.raises(ValueError, match="unknown MedRGB scenario"):
        make_settings(["fast"])


def test_jsonl_cache_survives_a_torn_last_line(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"k": "a", "v": 1}\n{"k": "b", "v"')
    cache = JsonlCache(path, lambda r: r["k"])
    assert "a" in cache and "b" not in cache
    cache.add({"k": "b", "v": 2})
    again = JsonlCache(path, lambda r: r["k"])
    assert again.get("b") == {"k": "b", "v": 2}
    path.write_text('{"k": "a"\n{"k": "b"}\n')
    with pytest.raises(ValueError, match="line 1"):
        JsonlCache(path, lambda r: r["k"])


# --------------------------------------------------------------------------- scripted full run

QUESTIONS = [
    MCQuestion(qid, f"Question {qid}: which option is right?", {"A": "a", "B": "b", "C": "c", "D": "d"}, ans, "test")
    for qid, ans in GOLD.items()
]


@pytest.fixture()
def backend_factory():
    from medretrieve.generation.llm import OpenAIBackend

    made = []

    def make(url):
        b = OpenAIBackend(url, "fake-model", timeout_s=10, max_retries=0)
        made.append(b)
        return b

    yield make
    for b in made:
        b.close()


SETTINGS = make_settings(n_values=[5], p_values=[40, 100], standard_n=[5])


def _runner(backend, out, **kw):
    return MedRGBRunner(backend, fake_search, out, dataset="test", model="fake-model", seed=1,
                        max_workers=4, n_sub_questions=2, progress=False, **kw)


def test_full_run_scores_a_perfect_model(tmp_path, backend_factory):
    from llm_server import FakeLLMServer

    with FakeLLMServer(smart_llm) as srv:
        run = _runner(backend_factory(srv.base_url), tmp_path / "run").run(QUESTIONS, SETTINGS)
        n_requests = len(srv.requests)
        formats = [r["json"].get("response_format") for r in srv.requests]
    m = run.metrics
    assert run.errors == []
    # every answer is asked for under its scenario's schema: the answer an enum of the letters
    schemas = [f["json_schema"]["schema"] for f in formats if f and f["type"] == "json_schema"]
    assert len(schemas) == 21
    assert {tuple(s["properties"]["answer_choice"]["enum"]) for s in schemas} == {
        ("A", "B", "C", "D"), ("A", "B", "C", "D", "insufficient information")}
    assert len(run.items) == 3 * len(SETTINGS) == 21
    assert m["standard-n5"]["accuracy"] == 1.0
    # p=40: 2 signal + 3 noise; the perfect model picks out its own documents
    assert m["sufficiency-n5-p40"]["accuracy"] == 1.0 and m["sufficiency-n5-p40"]["noise_detection_accuracy"] == 1.0
    assert m["sufficiency-n5-p40"]["insufficient_share"] == 0.0
    assert m["integration-n5-p40"]["sub_answer_em"] == 1.0 and m["integration-n5-p40"]["judge_score"] == 1.0
    # robustness p=40: 3 of 5 documents rewritten, all flagged, no false alarm
    assert m["robustness-n5-p40"]["fact_detection_rate"] == 1.0 and m["robustness-n5-p40"]["false_alarm_rate"] == 0.0
    assert m["robustness-n5-p100"]["fact_detection_rate"] is None  # nothing to detect
    # robustness sub-questions are scored as in integration (exact match and judge)
    assert m["robustness-n5-p40"]["sub_answer_em"] == 1.0 and m["robustness-n5-p40"]["judge_score"] == 1.0
    for item in run.items:
        kinds = Counter(item.doc_kinds)
        if item.scenario in ("sufficiency", "integration"):
            assert kinds["signal"] == round(5 * item.p / 100) and kinds["noise"] == 5 - kinds["signal"]
        if item.scenario == "robustness":
            assert kinds["counterfactual"] == 5 - round(5 * item.p / 100)
    # 3 topic lists + 3 sub-QA + 3x3 counterfactuals (p=40 swaps 3 of 5; p=100 none) + 21 answers
    # + 12 integration / robustness items x 2 judge calls
    assert n_requests == 3 + 3 + 9 + 21 + 24
    assert run.judge == {"model": "fake-model", "separate": False, "used": True}
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["settings"]["sufficiency-n5-p40"]["n"] == 5 and results["settings"]["sufficiency-n5-p40"]["p"] == 40


def test_p0_makes_a_perfect_model_abstain(tmp_path, backend_factory):
    from llm_server import FakeLLMServer

    with FakeLLMServer(smart_llm) as srv:
        run = _runner(backend_factory(srv.base_url), tmp_path).run(
            QUESTIONS, make_settings(["sufficiency"], n_values=[5], p_values=[0]))
    m = run.metrics["sufficiency-n5-p0"]
    assert m["accuracy"] == 0.0 and m["insufficient_share"] == 1.0 and m["noise_detection_accuracy"] == 1.0


def test_rerun_is_resumed_from_the_cache(tmp_path, backend_factory):
    from llm_server import FakeLLMServer

    out = tmp_path / "run"
    with FakeLLMServer(smart_llm) as srv:
        first = _runner(backend_factory(srv.base_url), out).run(QUESTIONS, SETTINGS)
        before = len(srv.requests)
        again = _runner(backend_factory(srv.base_url), out).run(QUESTIONS, SETTINGS)
        assert len(srv.requests) == before  # nothing asked twice
        assert again.metrics == first.metrics
        # drop two answered items: only those two are asked again
        items = out / "items.jsonl"
        lines = items.read_text().splitlines()
        items.write_text("\n".join(lines[:-2]) + "\n")
        _runner(backend_factory(srv.base_url), out).run(QUESTIONS, SETTINGS)
        asked = srv.requests[before:]
        assert 2 <= len(asked) <= 2 + 2 * 2  # the two answers (+ judge calls if integration items)
    with pytest.raises(ValueError, match="other options"):
        MedRGBRunner(None, fake_search, out, dataset="test", model="fake-model", seed=2, progress=False).run(QUESTIONS, SETTINGS)


def test_server_errors_are_counted_not_cached(tmp_path, backend_factory):
    from llm_server import FakeLLMServer, error_reply

    def flaky(request):
        user = request["messages"][-1]["content"]
        if "answer_choice" in user and "Question q2" in user:
            return 503, error_reply("overloaded", "server_error"), 0.0
        return smart_llm(request)

    out = tmp_path / "run"
    settings = make_settings(["standard", "sufficiency"], n_values=[5], p_values=[40], standard_n=[5])
    with FakeLLMServer(flaky) as srv:
        run = _runner(backend_factory(srv.base_url), out).run(QUESTIONS, settings)
    assert len(run.errors) == 2 and all(e["question_id"] == "q2" and e["stage"] == "answer" for e in run.errors)
    assert run.metrics["standard-n5"]["count"] == 2 and run.metrics["standard-n5"]["errors"] == 1
    with FakeLLMServer(smart_llm) as srv:
        run = _runner(backend_factory(srv.base_url), out).run(QUESTIONS, settings)
        assert len(srv.requests) == 2  # only q2's two answers
    assert run.errors == [] and run.metrics["standard-n5"]["count"] == 3


def test_unreadable_reply_counts_as_wrong(tmp_path, backend_factory):
    from llm_server import FakeLLMServer

    def vague(request):
        if "answer_choice" in request["messages"][-1]["content"]:
            return "I am not sure."
        return smart_llm(request)

    with FakeLLMServer(vague) as srv:
        run = _runner(backend_factory(srv.base_url), tmp_path).run(QUESTIONS, make_settings(["standard"], standard_n=[5]))
    m = run.metrics["standard-n5"]
    assert m["count"] == 3 and m["accuracy"] == 0.0 and m["unreadable"] == 3
    assert all(i.parse_error and i.raw == "I am not sure." for i in run.items)


def test_dead_backend_stops_the_run(tmp_path, backend_factory):
    from llm_server import refused_base_url

    runner = _runner(backend_factory(refused_base_url()), tmp_path, max_errors=2)
    with pytest.raises(RuntimeError, match="LLM errors"):
        runner.run(QUESTIONS * 1, SETTINGS)


def test_jsonl_cache_terminates_a_complete_last_line(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"k": "a"}')
    JsonlCache(path, lambda r: r["k"]).add({"k": "b"})
    assert set(JsonlCache(path, lambda r: r["k"]).data) == {"a", "b"}


def test_unreadable_topics_fall_back_to_the_question_and_failed_rewrites_are_reported(tmp_path, backend_factory):
    from llm_server import FakeLLMServer

    def odd(request):
        system = request["messages"][0]["content"]
        if "medical librarian" in system:
            return "   "  # no topics: the question itself is searched
        if "robustness test" in system:
            return "{}"  # JSON without a document: no counterfactual
        return smart_llm(request)

    out = tmp_path / "run"
    settings = make_settings(["standard", "robustness"], n_values=[5], p_values=[60, 100], standard_n=[5])
    with FakeLLMServer(odd) as srv:
        run = _runner(backend_factory(srv.base_url), out).run(QUESTIONS, settings)
    signal = [json.loads(line) for line in (out / "signal.jsonl").read_text().splitlines()]
    assert all(s["topics"] == [] and s["topics_error"] for s in signal)
    assert all(len(s["docs"]) == 5 for s in signal)  # topped up by the question search
    assert run.metrics["standard-n5"]["accuracy"] == 1.0
    # p=100 needs no rewrite; p=60 needs two per question and has none: reported, not scored
    assert run.metrics["robustness-n5-p100"]["count"] == 3
    assert run.metrics["robustness-n5-p60"]["count"] == 0 and run.metrics["robustness-n5-p60"]["errors"] == 3
    assert {e["stage"] for e in run.errors} == {"compose"}
    assert "no counterfactual version" in run.errors[0]["error"]


def test_unreadable_integration_reply_scores_zero_sub_answers(tmp_path, backend_factory):
    from llm_server import FakeLLMServer

    def vague(request):
        if "sub_answers" in request["messages"][-1]["content"]:
            return "no idea"
        return smart_llm(request)

    with FakeLLMServer(vague) as srv:
        run = _runner(backend_factory(srv.base_url), tmp_path).run(
            QUESTIONS, make_settings(["integration"], n_values=[5], p_values=[100]))
        assert not any("strict grader" in r["json"]["messages"][0]["content"] for r in srv.requests)
    m = run.metrics["integration-n5-p100"]
    assert m["accuracy"] == 0.0 and m["sub_answer_em"] == 0.0 and m["judge_score"] == 0.0


def test_larger_contexts_on_rerun_fetch_more_signal(tmp_path, backend_factory):
    from llm_server import FakeLLMServer

    out = tmp_path / "run"
    with FakeLLMServer(smart_llm) as srv:
        _runner(backend_factory(srv.base_url), out).run(QUESTIONS, make_settings(["standard"], standard_n=[5]))
        run = _runner(backend_factory(srv.base_url), out).run(QUESTIONS, make_settings(["standard"], standard_n=[5, 10]))
    assert run.errors == [] and run.metrics["standard-n10"]["count"] == 3


def test_rejected_request_is_scored_not_retried(tmp_path, backend_factory):
    from llm_server import FakeLLMServer, error_reply

    def too_long(request):
        if "answer_choice" in request["messages"][-1]["content"]:
            return 400, error_reply("This model's maximum context length is 8 tokens", code="context_length_exceeded"), 0.0
        return smart_llm(request)

    with FakeLLMServer(too_long) as srv:
        run = _runner(backend_factory(srv.base_url), tmp_path).run(QUESTIONS, make_settings(["standard"], standard_n=[5]))
    m = run.metrics["standard-n5"]
    assert run.errors == [] and m["count"] == 3 and m["unreadable"] == 3
    assert all("LLM" in i.parse_error for i in run.items)


# --------------------------------------------------------------------------- the full protocol


def test_no_retrieval_baseline_answers_without_documents(tmp_path, backend_factory):
    from llm_server import FakeLLMServer

    searched = []

    def counting_search(query, k):
        searched.append(query)
        return fake_search(query, k)

    with FakeLLMServer(smart_llm) as srv:
        runner = MedRGBRunner(backend_factory(srv.base_url), counting_search, tmp_path, dataset="test", seed=1,
                              progress=False)
        run = runner.run(QUESTIONS, make_settings(["standard"], standard_n=[0]))
        prompts = [r["json"]["messages"] for r in srv.requests]
    assert searched == []  # nothing retrieved, no topics asked
    assert len(prompts) == 3 and all("own medical knowledge" in m[0]["content"] for m in prompts)
    assert all("Document [" not in m[1]["content"] for m in prompts)
    assert run.metrics["standard-n0"]["accuracy"] == 1.0 and all(i.doc_ids == [] for i in run.items)


def test_a_separate_judge_grades_the_sub_answers(tmp_path, backend_factory):
    from llm_server import FakeLLMServer

    from medretrieve.evaluation.report import medrgb_markdown

    settings = make_settings(["integration", "robustness"], n_values=[5], p_values=[40])
    with FakeLLMServer(smart_llm) as model, FakeLLMServer(smart_llm) as judge:
        run = _runner(backend_factory(model.base_url), tmp_path / "run",
                      judge_backend=backend_factory(judge.base_url), judge_model="judge-7b").run(QUESTIONS, settings)
        graded_by_model = [r for r in model.requests if "strict grader" in r["json"]["messages"][0]["content"]]
        graded_by_judge = [r for r in judge.requests if "strict grader" in r["json"]["messages"][0]["content"]]
    assert graded_by_model == [] and len(graded_by_judge) == 6 * 2 == len(judge.requests)
    assert run.judge == {"model": "judge-7b", "separate": True, "used": True}
    assert run.metrics["integration-n5-p40"]["judge_score"] == 1.0
    md = medrgb_markdown([{"label": "x", **run.to_dict()}])
    assert "judge-7b (separate from the model under test)" in md
    same = medrgb_markdown([{"label": "y", "dataset": "test", "model": "m", "errors": [], "settings": {},
                             "judge": {"model": "m", "separate": False, "used": True}}])
    assert "m (the model under test: no separate judge was given)" in same
    # a folder judged by one model is not resumed with another
    with pytest.raises(ValueError, match="judge_model"):
        _runner(None, tmp_path / "run").run(QUESTIONS, settings)


def test_robustness_sub_answers_and_fact_detection_per_setting(tmp_path, backend_factory):
    from llm_server import FakeLLMServer

    def fooled(request):  # believes every document: flags nothing, answers sub-questions from counterfactuals
        user = request["messages"][-1]["content"]
        if "document_analysis" in user:
            return json.dumps({"document_analysis": [], "answer_choice": "D",
                               "sub_answers": [{"answer": "gamma"}, {"answer": "gamma"}]})
        return smart_llm(request)

    settings = make_settings(["robustness"], n_values=[5], p_values=[0, 60])
    with FakeLLMServer(fooled) as srv:
        run = _runner(backend_factory(srv.base_url), tmp_path).run(QUESTIONS, settings)
    for key in ("robustness-n5-p0", "robustness-n5-p60"):
        m = run.metrics[key]
        assert m["fact_detection_rate"] == 0.0
        assert m["false_alarm_rate"] == (None if key.endswith("p0") else 0.0)  # p=0: every document is rewritten
        assert m["sub_answer_em"] == 0.0 and m["judge_score"] == 0.0 and m["accuracy"] == 0.0
    assert all(i.sub_questions and i.sub_golds == ["alpha", "beta"] for i in run.items)


def test_only_the_swapped_documents_are_rewritten(tmp_path, backend_factory):
    """A counterfactual costs an LLM call: only documents some robustness setting swaps are rewritten."""
    from llm_server import FakeLLMServer
    from medretrieve.evaluation.medrgb import robustness_swaps

    settings = make_settings(["robustness"], n_values=[5], p_values=[60, 80])
    with FakeLLMServer(smart_llm) as srv:
        run = _runner(backend_factory(srv.base_url), tmp_path, judge=False).run(QUESTIONS, settings)
        rewritten = [r for r in srv.requests if "robustness test" in r["json"]["messages"][0]["content"]]
    for q in QUESTIONS:
        want = robustness_swaps(5, 60, f"1|{q.id}|5|60") | robustness_swaps(5, 80, f"1|{q.id}|5|80")
        asked = [r for r in rewritten if f"MARK-{q.id}" in r["json"]["messages"][-1]["content"]]
        assert len(asked) == len(want) and 1 <= len(want) <= 3
    assert all(Counter(i.doc_kinds)["counterfactual"] == 5 - round(5 * i.p / 100) for i in run.items)
    assert run.metrics["robustness-n5-p60"]["fact_detection_rate"] == 1.0 and run.errors == []
