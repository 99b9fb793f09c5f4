"""Every metric against examples computed by hand (the arithmetic is in the comments)."""
from __future__ import annotations

import math

import pytest

from medretrieve.evaluation import metrics as M
from medretrieve.evaluation.bioasq.golden import Snippet

RANKED = ["a", "x", "b", "y", "c"]
GOLD = {"a", "b", "c", "d"}


def test_average_precision_bioasq_normalisation():
    # hits at ranks 1, 3, 5: P = 1/1, 2/3, 3/5; divided by min(5, |gold|=4) = 4
    assert M.average_precision_at_k(RANKED, GOLD, k=5) == pytest.approx((1 + 2 / 3 + 3 / 5) / 4)
    # k=2: only rank 1 counts, divided by min(2, 4) = 2
    assert M.average_precision_at_k(RANKED, GOLD, k=2) == pytest.approx(0.5)
    # a perfect list with more gold than k scores 1
    assert M.average_precision_at_k(["a", "b"], GOLD, k=2) == 1.0
    # repeated ids count once, at their first rank: [a, b] -> (1 + 1) / 2
    assert M.average_precision_at_k(["a", "a", "b"], {"a", "b"}) == 1.0
    assert M.average_precision_at_k(["x", "y"], {"a"}) == 0.0


def test_precision_recall_ndcg_rr():
    assert M.precision_at_k(RANKED, GOLD, k=5) == pytest.approx(3 / 5)
    assert M.precision_at_k(["a"], GOLD, k=10) == pytest.approx(1 / 10)  # divided by k, not by hits returned
    assert M.recall_at_k(RANKED, GOLD, k=5) == pytest.approx(3 / 4)
    assert M.recall_at_k(RANKED, GOLD, k=2) == pytest.approx(1 / 4)
    dcg = 1 / math.log2(2) + 1 / math.log2(4) + 1 / math.log2(6)
    idcg = sum(1 / math.log2(i + 1) for i in range(1, 5))
    assert M.ndcg_at_k(RANKED, GOLD, k=5) == pytest.approx(dcg / idcg)
    assert M.ndcg_at_k(["a", "b", "c", "d"], GOLD, k=10) == pytest.approx(1.0)
    assert M.reciprocal_rank(["x", "y", "a"], GOLD) == pytest.approx(1 / 3)
    assert M.reciprocal_rank(["x", "y", "a"], GOLD, k=2) == 0.0


def test_mean_over_runs():
    runs = [(RANKED, GOLD), (["x", "y", "a"], {"a"})]
    # AP@10: run 1 = (1 + 2/3 + 3/5) / 4; run 2 = (1/3) / 1
    assert M.mean_average_precision(runs) == pytest.approx(((1 + 2 / 3 + 3 / 5) / 4 + 1 / 3) / 2)
    assert M.mrr(runs) == pytest.approx((1 + 1 / 3) / 2)


def test_retrieval_errors():
    with pytest.raises(ValueError, match="empty"):
        M.average_precision_at_k(["a"], [])
    with pytest.raises(ValueError, match="k must be"):
        M.recall_at_k(["a"], ["a"], k=0)
    with pytest.raises(TypeError):
        M.precision_at_k("abc", ["a"])
    with pytest.raises(ValueError, match="no questions"):
        M.mean_average_precision([])


def test_retrieval_scores_bundle():
    s = M.retrieval_scores(RANKED, GOLD, k=5)
    assert s["ap"] == pytest.approx((1 + 2 / 3 + 3 / 5) / 4) and s["rr"] == 1.0 and s["recall"] == 0.75


# --------------------------------------------------------------------------- snippets

G0 = Snippet("1", "Aspirin irreversibly inhibits platelet cyclooxygenase.", "abstract", "abstract", 10, 64)
G1 = Snippet("2", "Low-dose aspirin is used as antiplatelet therapy.", "title", "title", 0, 49)


def test_snippet_overlap_rules():
    # offsets: same document and section, spans [50,80) and [10,64) overlap
    assert M.snippets_overlap(M.SnippetRef("1", "zzz", "abstract", 50, 80), G0)
    # touching spans do not overlap: [64, 90) vs [10, 64)
    assert not M.snippets_overlap(M.SnippetRef("1", "zzz", "abstract", 64, 90), G0)
    # other section, or other document: never
    assert not M.snippets_overlap(M.SnippetRef("1", "zzz", "title", 10, 20), G0)
    assert not M.snippets_overlap(M.SnippetRef("9", G0.text, "abstract", 10, 64), G0)
    # no offsets: text containment after normalisation
    assert M.snippets_overlap(M.SnippetRef("2", "... LOW-DOSE aspirin is used as antiplatelet therapy in stroke"), G1)
    # word overlap: {aspirin, inhibits} shared, over min(4, 3) words = 2/3
    a = M.SnippetRef("5", "aspirin inhibits platelets strongly")
    b = M.SnippetRef("5", "aspirin inhibits cyclooxygenase")
    assert M.snippets_overlap(a, b, min_overlap=0.5)
    assert not M.snippets_overlap(a, b, min_overlap=0.7)


def test_snippet_matching_credits_each_gold_once():
    retrieved = [
        M.SnippetRef("1", "x", "abstract", 50, 80),  # -> G0
        M.SnippetRef("1", "y", "abstract", 20, 30),  # overlaps G0 too, but G0 is taken: miss
        M.SnippetRef("2", "Low-dose aspirin is used as antiplatelet therapy."),  # -> G1 by text
        M.SnippetRef("3", "unrelated"),
    ]
    assert M.match_snippets(retrieved, [G0, G1]) == [0, None, 1, None]
    ranked, relevant = M.snippet_run(retrieved, [G0, G1])
    # relevant at ranks 1 and 3 of 2 gold: (1/1 + 2/3) / 2
    assert M.average_precision_at_k(ranked, relevant) == pytest.approx((1 + 2 / 3) / 2)
    assert M.recall_at_k(ranked, relevant) == 1.0
    assert M.precision_at_k(ranked, relevant, k=4) == 0.5


# --------------------------------------------------------------------------- BioASQ answers


def test_yesno_scores():
    s = M.yesno_scores(["yes", "Yes.", "no", None], ["yes", "no", "no", "yes"])
    # correct: 1 and 3 -> 2/4. yes: tp 1, predicted 2, actual 2 -> F 0.5;
    # no: tp 1, predicted 1, actual 2 -> P 1, R 0.5, F 2/3
    assert s["accuracy"] == pytest.approx(0.5)
    assert s["macro_f1"] == pytest.approx((0.5 + 2 / 3) / 2)
    with pytest.raises(ValueError, match="predictions"):
        M.yesno_scores(["yes"], ["yes", "no"])
    with pytest.raises(ValueError, match="'yes' or 'no'"):
        M.yesno_scores(["yes"], ["maybe"])


def test_factoid_scores():
    preds = [["cftr", "x"], ["a", "b", "Tumor  Necrosis Factor."], ["a", "b", "c", "d", "e", "tnf"]]
    golds = [[["CFTR", "cystic fibrosis transmembrane conductance regulator"]], [["tumor necrosis factor", "TNF"]], [["TNF"]]]
    s = M.factoid_scores(preds, golds)
    # q1 rank 1; q2 rank 3; q3 only at rank 6 (beyond the 5 that count)
    assert s == pytest.approx({"strict": 1 / 3, "lenient": 2 / 3, "mrr": (1 + 1 / 3) / 3})
    with pytest.raises(TypeError):
        M.factoid_scores(["cftr"], golds[:1])


def test_list_scores():
    preds = [["fever", "Coughing", "rash", "fever"], []]
    golds = [[["fever"], ["cough", "coughing"], ["myalgia"]], [["x"]]]
    s = M.list_scores(preds, golds)
    # q1: unique preds {fever, coughing, rash}: 2 correct -> P 2/3; 2 of 3 gold found -> R 2/3; F 2/3
    # q2: empty prediction -> 0, 0, 0
    assert s == pytest.approx({"precision": 1 / 3, "recall": 1 / 3, "f1": 1 / 3})


def test_rouge_scores_hand_computed():
    s = M.rouge_scores("the cat sat on the mat", "the cat sat on a mat")
    # bigrams pred: the-cat cat-sat sat-on on-the the-mat; ref: the-cat cat-sat sat-on on-a a-mat -> 3/5 both ways
    assert s["rouge2_f"] == pytest.approx(0.6)
    # SU4 of "a b c" vs "a c b": pred {ab, ac, bc, a, b, c}, ref {ac, ab, cb, a, c, b}: 5 of 6 shared
    assert M.rouge_su4_f("a b c", "a c b") == pytest.approx(5 / 6)
    assert M.rouge_scores("x y z", "x y z") == {"rouge2_f": 1.0, "rougesu4_f": 1.0}
    assert M.rouge_scores("", "x y") == {"rouge2_f": 0.0, "rougesu4_f": 0.0}
    assert M.rouge_best("the cat", ["a dog", "the cat"])["rougesu4_f"] == 1.0


def test_skip_bigram_gap_is_four_words():
    pairs = M.skip_bigrams(list("abcdefg"))
    # i=0..6 pair with at most 4 words between: 5+5+4+3+2+1+0 = 20
    assert sum(pairs.values()) == 20
    assert ("a", "f") in pairs and ("a", "g") not in pairs


# --------------------------------------------------------------------------- MedRGB


def test_medrgb_accuracy_and_insufficient():
    assert M.accuracy(["A", "b", None, "insufficient information"], ["A", "B", "C", "D"]) == 0.5
    assert M.insufficient_share(["Insufficient information.", "A"]) == 0.5


def test_noise_detection_accuracy():
    docs = [["d1", "d2", "d3", "d4"], ["e1", "e2"]]
    # q1: d1 ok, d2 wrongly noise, d3 missed noise, d4 ok -> 2/4; q2: nothing is noise, nothing said -> 1
    assert M.noise_detection_accuracy([{"d4", "d2"}, set()], [{"d3", "d4"}, set()], docs) == pytest.approx(0.75)


def test_sub_answer_exact_match():
    # cftr ok, yes != no, x ok, missing second answer -> 2/4
    assert M.sub_answer_exact_match([["CFTR", "yes"], ["x"]], [["cftr", "no"], ["x", "y"]]) == 0.5


def test_judge_score():
    assert M.judge_score([1, 0.5, 0, 1]) == pytest.approx(0.625)
    with pytest.raises(ValueError, match="0, 0.5 or 1"):
        M.judge_score([0.7])
    with pytest.raises(ValueError):
        M.judge_score([])


def test_fact_detection_and_false_alarms():
    detected = [{"d1", "d9"}, set()]
    cf = [{"d1", "d2"}, {"e1"}]
    # detected 1 of 3 planted errors
    assert M.fact_detection_rate(detected, cf) == pytest.approx(1 / 3)
    # correct docs: d8, d9, e2; d9 flagged -> 1/3
    assert M.false_alarm_rate(detected, cf, [["d1", "d2", "d9", "d8"], ["e1", "e2"]]) == pytest.approx(1 / 3)
    assert M.false_alarm_rate([set()], [{"a"}], [["a"]]) is None
    with pytest.raises(ValueError, match="no counterfactual"):
        M.fact_detection_rate([set()], [set()])
