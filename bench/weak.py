"""The weak-question check as a classifier, and what recovery costs and earns (issue 44).

    python bench/weak.py [--limit N] [--work DIR] [--tune-on 7B] [--max-false-alarms 0.05]

Sets, each searched with the retriever's defaults (the shipped ranker, ``deadline_ms=None``, k=30):

- ``<year> answerable``: the year's BioASQ questions against its own closed corpus (bench/bioasq_corpus.py's
  collection: every distinct snippet a chunk), those whose gold documents are in the corpus. A question whose gold
  is in the top 10 documents (without recovery) is one the check must not flag: a flag there is a false alarm.
- ``<year> unanswerable``: the other year's questions against this corpus, those with none of their gold documents
  in it (their ids: bench/judgments/weak_bioasq_absent.json, written by this script). The corpus cannot answer
  them from their gold; a flag there is a hit, no flag a miss (an upper bound: another year's corpus may hold an
  answer under other PMIDs).
- ``demo answerable`` / ``demo unanswerable``: bench/judgments/weak_demo.json against the demo corpus.

Per question it records the evidence the check reads (term share and subject share of the first 10 hits of the
question's own search, :meth:`medretrieve.retrieval.recovery.Recovery.evidence`) and the document MAP@10 without
recovery. The thresholds (``weak_depth``, ``weak_threshold``, ``subject_threshold``) are tuned on ``--tune-on``
(the lowest miss rate with false alarms at most ``--max-false-alarms``) and reported on every set. Then each
question the shipped settings flag is searched again with recovery on: its cost (the recovery stage's ms, p50 /
p99) and the change in document MAP@10 over all answerable questions. The records are cached in ``--work``
(delete the folder to measure again). ``--limit``: the first N questions of each BioASQ set (the sample).
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bioasq_corpus as R  # noqa: E402  (the BioASQ closed corpora, questions and document metrics)

from medretrieve.retrieval.recovery import Recovery  # noqa: E402
from medretrieve.retrieval.settings import Settings  # noqa: E402

JUDGMENTS = Path(__file__).resolve().parent / "judgments"
DEPTH = 10  # hits of the question's own search whose evidence is recorded
YEARS = ("7B", "12B")


class RecordingRecovery(Recovery):
    """The retriever's Recovery, also keeping the evidence of the last weak check (over ``DEPTH`` hits)."""

    last: List[Tuple[float, float]] = []

    def weak_reasons(self, scope, query, top, k):  # type: ignore[override]
        tokens = scope.tokens
        from medretrieve.retrieval.matching import subject_share

        self.last = [(tokens.lexical_relevance(query, r),
                      subject_share(query.subject, tokens.of_row(r)) if query.subject else 1.0)
                     for r in top[:DEPTH]]
        return super().weak_reasons(scope, query, top, k)


def recording_retriever(col):
    from medretrieve.retrieval.retriever import Retriever

    ret = Retriever(col)
    ret.recovery = RecordingRecovery(ret.settings, ret.costs)
    return ret


def absent_sets(cols: Dict[str, Any]) -> Dict[str, List[str]]:
    """Per collection year: the other year's question ids with no gold document in it (written once)."""
    path = JUDGMENTS / "weak_bioasq_absent.json"
    if path.is_file():
        return json.loads(path.read_text())["absent"]
    out = {}
    for year, other in (("7B", "12B"), ("12B", "7B")):
        docs = {r.document_id for r in cols[year].rows}
        out[year] = [q["id"] for q in R.load_questions(other) if q["docs"] and not q["docs"] & docs]
    path.write_text(json.dumps({"about": "BioASQ questions none of whose gold documents is in the other year's "
                                         "closed corpus (bench/weak.py): key = the corpus searched, values = the "
                                         "other year's question ids", "absent": out}, indent=1) + "\n")
    return out


def run_set(ret, items: Sequence[dict]) -> List[dict]:
    """Each item (``body``, ``gold``: the relevant document ids, empty for an unanswerable question) searched
    without recovery; the flagged ones again with it."""
    out = []
    for q in items:
        res = ret.search(q["body"], k=30, deadline_ms=None, recovery=False)
        rec = {"id": q["id"], "evidence": ret.recovery.last, "weak": res.weak, "reasons": res.weak_reasons,
               "total_ms": res.timings_ms.get("total", 0.0)}
        docs = R.doc_ranking(res.hits)
        if q["gold"]:
            rec["gold_top10"] = bool(set(docs[:10]) & q["gold"])
            rec["map"] = R.doc_metrics(docs, q["gold"])["MAP@10"]
        if res.weak:
            again = ret.search(q["body"], k=30, deadline_ms=None, recovery=True)
            stage = again.stage("recovery")
            rec["recovery_ms"] = stage.elapsed_ms if stage is not None and stage.ran else 0.0
            rec["replaced"] = again.recovery.get("replaced", 0)
            if q["gold"]:
                rec["map_recovered"] = R.doc_metrics(R.doc_ranking(again.hits), q["gold"])["MAP@10"]
        out.append(rec)
    return out


def bioasq_items(year: str, ids: Sequence[str], in_corpus: set, limit: int) -> Tuple[List[dict], List[dict]]:
    own = [q for q in R.load_questions(year) if q["docs"] & in_corpus]
    answerable = [{"id": q["id"], "body": q["body"], "gold": q["docs"] & in_corpus} for q in own]
    other = "12B" if year == "7B" else "7B"
    wanted = set(ids)
    unanswerable = [{"id": q["id"], "body": q["body"], "gold": set()} for q in R.load_questions(other)
                    if q["id"] in wanted]
    return answerable[: limit or None], unanswerable[: limit or None]


def demo_items() -> Tuple[List[dict], List[dict]]:
    data = json.loads((JUDGMENTS / "weak_demo.json").read_text())
    answerable = [{"id": f"demo-a{i}", "body": q["question"], "gold": set(q["docs"])}
                  for i, q in enumerate(data["answerable"])]
    unanswerable = [{"id": f"demo-u{i}", "body": q["question"], "gold": set()}
                    for i, q in enumerate(data["unanswerable"])]
    return answerable, unanswerable


def collect(args) -> Dict[str, List[dict]]:
    cache = Path(args.work) / f"weak-records-{args.limit or 'all'}.json"
    if cache.is_file():
        return json.loads(cache.read_text())
    from medretrieve.cli.demo import demo_collection

    work = Path(args.work)
    cols = {y: R.build_bioasq_collection("default", work, y) for y in YEARS}
    absent = absent_sets(cols)
    records: Dict[str, List[dict]] = {}
    for year in YEARS:
        in_corpus = {r.document_id for r in cols[year].rows}
        answerable, unanswerable = bioasq_items(year, absent[year], in_corpus, args.limit)
        ret = recording_retriever(cols[year])
        for name, items in ((f"{year} answerable", answerable), (f"{year} unanswerable", unanswerable)):
            t0 = time.perf_counter()
            records[name] = run_set(ret, items)
            print(f"{name}: {len(items)} questions in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    ret = recording_retriever(demo_collection())
    answerable, unanswerable = demo_items()
    records["demo answerable"] = run_set(ret, answerable)
    records["demo unanswerable"] = run_set(ret, unanswerable)
    cache.write_text(json.dumps(records))
    return records


def fires(evidence: Sequence[Sequence[float]], depth: int, terms: float, subject: float) -> bool:
    """The check of ``Recovery.weak_reasons`` on recorded evidence."""
    head = evidence[:depth]
    return not head or max(t for t, _ in head) < terms or max(s for _, s in head) < subject


def fires_before(evidence: Sequence[Sequence[float]]) -> bool:
    """The lexical part of the check before issue 44: the mean term share of the top 5 below 0.35 (it also fired
    on few articles and on redundant hits, which the records do not hold: its false alarms were at least these)."""
    head = evidence[:5]
    return not head or float(np.mean([t for t, _ in head])) < 0.35


def rates(records: Dict[str, List[dict]], prefix: str, depth: int, terms: float, subject: float) -> Dict[str, Any]:
    """False alarms (flagged, gold in the top 10) and misses (not flagged, unanswerable) of one year / demo."""
    strong = [r for r in records[f"{prefix} answerable"] if r["gold_top10"]]
    absent = records[f"{prefix} unanswerable"]
    check = (lambda ev: fires(ev, depth, terms, subject)) if depth else fires_before
    fa = sum(check(r["evidence"]) for r in strong)
    caught = sum(check(r["evidence"]) for r in absent)
    return {"strong": len(strong), "false_alarms": fa / max(1, len(strong)), "absent": len(absent),
            "misses": 1 - caught / max(1, len(absent))}


def tune(records: Dict[str, List[dict]], prefix: str, max_fa: float) -> Tuple[int, float, float]:
    # (depth 0 stands for the check before issue 44 in rates(), so the grid starts at 1)
    grid = itertools.product((1, 2, 3, 5, 10), np.round(np.arange(0.2, 0.85, 0.05), 2),
                             (0.0, 0.25, 0.34, 0.5, 0.67, 0.75, 1.0))
    best, best_key = (3, 0.35, 0.5), (2.0, 2.0)
    for depth, terms, subject in grid:
        r = rates(records, prefix, depth, float(terms), subject)
        key = (r["misses"] if r["false_alarms"] <= max_fa else 1.0 + r["false_alarms"], r["false_alarms"])
        if key < best_key:
            best, best_key = (depth, float(terms), subject), key
    return best


def recovery_table(records: Dict[str, List[dict]], prefix: str) -> Dict[str, Any]:
    """Recovery on the questions the shipped check flags: how often it runs, its cost, its MAP effect."""
    answerable = records[f"{prefix} answerable"]
    flagged = [r for r in answerable if r["weak"]]
    ms = [r["recovery_ms"] for r in flagged + [r for r in records[f"{prefix} unanswerable"] if r["weak"]]]
    before = float(np.mean([r["map"] for r in answerable]))
    after = float(np.mean([r.get("map_recovered", r["map"]) for r in answerable]))
    changed = sum(r.get("map_recovered", r["map"]) != r["map"] for r in answerable)
    totals = [r["total_ms"] for r in answerable]
    return {"flagged": len(flagged), "n": len(answerable), "p50": float(np.percentile(ms, 50)) if ms else 0.0,
            "p99": float(np.percentile(ms, 99)) if ms else 0.0, "map_before": before, "map_after": after,
            "changed": changed, "search_p50": float(np.percentile(totals, 50))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--limit", type=int, default=0, help="first N questions of each BioASQ set (0: all)")
    p.add_argument("--work", default="/tmp/medretrieve-bench-retrieval")
    p.add_argument("--tune-on", default="7B", choices=YEARS)
    p.add_argument("--max-false-alarms", type=float, default=0.05)
    args = p.parse_args()
    Path(args.work).mkdir(parents=True, exist_ok=True)
    records = collect(args)
    s = Settings()
    shipped = (s.weak_depth, s.weak_threshold, s.subject_threshold)
    tuned = tune(records, args.tune_on, args.max_false_alarms)
    print(f"tuned on {args.tune_on} (false alarms <= {args.max_false_alarms:.0%}): weak_depth={tuned[0]} "
          f"weak_threshold={tuned[1]} subject_threshold={tuned[2]}; shipped: {shipped}")
    print("\n| set | settings | gold in top 10 | false alarms | unanswerable | misses |\n|---|---|---:|---:|---:|---:|")
    for prefix in YEARS + ("demo",):
        for name, values in (("before (mean of the top 5)", (0, 0.0, 0.0)), ("shipped", shipped),
                             (f"tuned on {args.tune_on}", tuned)):
            r = rates(records, prefix, *values)
            print(f"| {prefix} | {name} | {r['strong']} | {r['false_alarms']:.1%} | {r['absent']} | "
                  f"{r['misses']:.1%} |")
    print("\n| set | flagged (answerable) | recovery p50 / p99 ms | search p50 ms | doc MAP@10 without / with "
          "recovery | questions changed |\n|---|---:|---:|---:|---:|---:|")
    for prefix in YEARS + ("demo",):
        t = recovery_table(records, prefix)
        print(f"| {prefix} | {t['flagged']} of {t['n']} | {t['p50']:.1f} / {t['p99']:.1f} | {t['search_p50']:.1f} | "
              f"{t['map_before']:.4f} / {t['map_after']:.4f} | {t['changed']} |")


if __name__ == "__main__":
    main()
