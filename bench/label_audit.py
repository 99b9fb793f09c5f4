"""Audit of BioASQ's gold documents where the full pipeline disagrees with them.

    python bench/retrieval.py quality --dump /tmp/full_rankings.jsonl
    python bench/label_audit.py sample  --rankings /tmp/full_rankings.jsonl [--n 40] [--seed 0]
    python bench/label_audit.py summary --rankings /tmp/full_rankings.jsonl [--audit bench/judgments/bioasq7b_audit.tsv]

Why: in the closed BioASQ 7b corpus every document is gold for some question,
and a question's gold list is what its annotator found, not every relevant
document. When the pipeline ranks a non-gold document above a gold one, the
document may still answer the question (another question's gold document on the
same drug or gene), which MAP@10 against the gold list counts as an error.

``sample`` draws ``--n`` questions (seeded) among those whose top 10 is not
perfect, takes the highest-ranked non-gold document of each, and prints the
question, its ideal answer and that document's snippets for a reader to judge.
The judgments are kept in ``--audit`` (TSV: question id, document id,
judgment ``relevant`` / ``partial`` / ``not``, reason in the judge's words; no
BioASQ text is stored in the project). ``summary`` reports the share judged
relevant (Wilson 95% interval) and, on the audited questions, MAP@10 against
the gold list and against the gold list plus the documents judged relevant.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import random
from pathlib import Path
from typing import Dict, List

from retrieval import DATA

ROOT = Path(__file__).resolve().parents[1]
AUDIT = ROOT / "bench" / "judgments" / "bioasq7b_audit.tsv"
JUDGMENTS = ("relevant", "partial", "not")


def _read_rankings(path: str) -> List[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _first_wrong(r: dict) -> int:
    """Rank (0-based) of the first non-gold document that sits above a gold one or in place of a missed one."""
    gold = set(r["gold"])
    ranked = r["ranked"][:10]
    found = sum(d in gold for d in ranked)
    if found == min(len(gold), 10) and all(d in gold for d in ranked[:found]):
        return -1  # perfect top: nothing to audit
    return next(i for i, d in enumerate(ranked) if d not in gold)


def _corpus_snippets() -> Dict[str, List[str]]:
    from medretrieve.corpus.sources import pmid_from_url

    out: Dict[str, List[str]] = {}
    for f in sorted(DATA.glob("7B*_golden.json")):
        for q in json.loads(f.read_text())["questions"]:
            for s in q.get("snippets") or []:
                texts = out.setdefault(pmid_from_url(s["document"]), [])
                if s["text"] not in texts:
                    texts.append(s["text"])
    return out


def _ideal_answers() -> Dict[str, str]:
    out = {}
    for f in sorted(DATA.glob("7B*_golden.json")):
        for q in json.loads(f.read_text())["questions"]:
            ideal = q.get("ideal_answer") or ""
            out[q["id"]] = ideal[0] if isinstance(ideal, list) and ideal else str(ideal)
    return out


def sample(args) -> None:
    rankings = [r for r in _read_rankings(args.rankings) if r["gold"] and _first_wrong(r) >= 0]
    picked = random.Random(args.seed).sample(rankings, min(args.n, len(rankings)))
    snippets, ideal = _corpus_snippets(), _ideal_answers()
    for r in picked:
        i = _first_wrong(r)
        doc = r["ranked"][i]
        print(f"## {r['id']}\t{doc}\t(rank {i + 1}, {r['type']})\nQ: {r['question']}\nIDEAL: {ideal.get(r['id'], '')}")
        for t in snippets.get(doc, []):
            print(f"  - {t}")
        print()


def _read_audit(path: Path) -> List[dict]:
    with open(path, encoding="utf-8", newline="") as fh:
        rows = [row for row in csv.DictReader((line for line in fh if not line.startswith("#")), delimiter="\t")]
    for row in rows:
        if row["judgment"] not in JUDGMENTS:
            raise ValueError(f"{path}: judgment {row['judgment']!r} for {row['question_id']} is not one of {JUDGMENTS}")
    return rows


def _wilson(k: int, n: int, z: float = 1.96) -> tuple:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def summary(args) -> None:
    from medretrieve.evaluation.metrics import average_precision_at_k

    audit = _read_audit(Path(args.audit))
    by_id = {r["id"]: r for r in _read_rankings(args.rankings)}
    n = len(audit)
    print(f"{n} audited questions (highest-ranked non-gold document of each)\n")
    print("| judgment | documents | share | 95% interval |\n|---|---|---|---|")
    for j in JUDGMENTS:
        k = sum(row["judgment"] == j for row in audit)
        lo, hi = _wilson(k, n)
        print(f"| {j} | {k} | {k / n:.2f} | {lo:.2f}-{hi:.2f} |")
    extra: Dict[str, set] = {}
    for row in audit:
        if row["judgment"] == "relevant":
            extra.setdefault(row["question_id"], set()).add(row["document_id"])
    ids = [row["question_id"] for row in audit if row["question_id"] in by_id]
    gold_ap = [average_precision_at_k(by_id[q]["ranked"], set(by_id[q]["gold"]), 10) for q in ids]
    plus_ap = [average_precision_at_k(by_id[q]["ranked"], set(by_id[q]["gold"]) | extra.get(q, set()), 10)
               for q in ids]
    print(f"\nMAP@10 of the full pipeline on these {len(ids)} questions: gold list {sum(gold_ap) / len(ids):.4f}, "
          f"gold + documents judged relevant {sum(plus_ap) / len(ids):.4f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=("sample", "summary"))
    p.add_argument("--rankings", required=True, help="JSON lines from bench/retrieval.py quality --dump")
    p.add_argument("--audit", default=str(AUDIT))
    p.add_argument("--n", type=int, default=40)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    {"sample": sample, "summary": summary}[args.what](args)


if __name__ == "__main__":
    main()
