"""Which int8 scheme keeps exact-search recall: measured on embedding-like and real MiniLM vectors.

Schemes (each: quantize the base, search exactly, recall@10 against float32 exact search):

a) per-vector symmetric: x ~= s * code, s = max|x| / 127 (no centre)
b) centred + per-vector symmetric (medretrieve): x ~= c + s * code, c = mean of the data, s = max|x - c| / 127
c) per-dimension min/max (faiss SQ8 style): x_j ~= lo_j + (hi_j - lo_j) * code_j / 255

"numpy" columns decode the base and score with the float query (as faiss SQ8 does); the "native" columns use
medretrieve.FlatIndex(dtype="int8"), whose query is quantized too (ours: exact q.c plus an int8 dot product).
Also reported: inner-product scale error |q.x_hat - q.x| / |q.x| on un-normalised MedCPT-like vectors (norm ~8,
raw scores ~60-70), where per-vector scales preserve the absolute scale.

    python bench/quant_scheme.py [--n 20000] [--nq 500] [--real]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import datagen  # noqa: E402
from datagen import recall_at as recall  # noqa: E402

import medretrieve  # noqa: E402


def q_per_vector(x: np.ndarray, centre: np.ndarray | None) -> np.ndarray:
    r = x - centre if centre is not None else x
    s = np.abs(r).max(axis=1, keepdims=True) / 127.0
    s[s == 0] = 1
    code = np.clip(np.rint(r / s), -127, 127)
    return code * s + (centre if centre is not None else 0)


def q_min_max(x: np.ndarray) -> np.ndarray:
    lo, hi = x.min(axis=0), x.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1)
    code = np.clip(np.rint((x - lo) / span * 255), 0, 255)
    return lo + code * span / 255


def native_flat(base: np.ndarray, q: np.ndarray, centred: bool) -> np.ndarray:
    f = medretrieve.FlatIndex("ip", base.shape[1], dtype="int8")
    if centred:
        f.train(base[:100_000])
    else:
        f.train(np.zeros((1, base.shape[1]), dtype=np.float32))  # centre = 0
    f.add(base)
    return f.search(q, 10)[0]


def evaluate(name: str, base: np.ndarray, q: np.ndarray) -> list[str]:
    truth = datagen.exact_knn(base, q, 10)
    centre = base[:100_000].mean(axis=0)
    rows = []
    decoded = {
        "a) per-vector": q_per_vector(base, None),
        "b) centred per-vector (ours)": q_per_vector(base, centre),
        "c) per-dim min/max (SQ8)": q_min_max(base),
    }
    exact = q @ base.T
    for scheme, xb in decoded.items():
        approx = q @ xb.T
        ids = np.argsort(-approx, axis=1)[:, :10]
        rec = recall(ids, truth)
        scale_err = float(np.median(np.abs(approx - exact) / np.maximum(np.abs(exact), 1e-6)))
        native = ""
        if scheme.startswith("a"):
            native = f"{recall(native_flat(base, q, False), truth):.4f}"
        elif scheme.startswith("b"):
            native = f"{recall(native_flat(base, q, True), truth):.4f}"
        rows.append(f"| {name} | {scheme} | {rec:.4f} | {native or '-'} | {scale_err:.2e} |")
    return rows


def minilm_snippets(limit: int) -> np.ndarray | None:
    """MiniLM (int8 ONNX, 384-d) embeddings of BioASQ snippets from ../shared/data, or None."""
    data = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "bioasq"
    files = sorted(data.glob("7B*_golden.json"))
    if not files:
        return None
    cache = datagen.DEFAULT_CACHE / f"minilm_bioasq_{limit}.npy"
    if cache.exists():
        return np.load(cache)
    from medretrieve.models.encoders import QueryEncoder, default_model_dir

    texts: list[str] = []
    for f in files:
        for question in json.loads(f.read_text())["questions"]:
            texts += [s["text"] for s in question.get("snippets", [])]
    texts = list(dict.fromkeys(texts))[:limit]
    enc = QueryEncoder.from_dir(default_model_dir(), threads=2)
    emb = enc.encode(texts, batch_size=64).astype(np.float32)
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.save(cache, emb)
    return emb


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--nq", type=int, default=500)
    ap.add_argument("--real", action="store_true", help="also MiniLM embeddings of BioASQ snippets")
    a = ap.parse_args()
    base, q, _ = datagen.load(datagen.DataSpec(a.n, 1000))
    q = q[: a.nq]
    print("| data | scheme | recall@10 (numpy, float query) | recall@10 (native FlatIndex int8) | median rel. IP error |")
    print("|---|---|---|---|---|")
    for row in evaluate(f"embedding-like {a.n}x768 (normalised)", base, q):
        print(row, flush=True)
    rng = np.random.default_rng(7)
    norms = rng.uniform(7.5, 8.5, (len(base), 1)).astype(np.float32)
    for row in evaluate("MedCPT-like (norm ~8, IP ~60-70)", base * norms, q * 8.0):
        print(row, flush=True)
    if a.real:
        emb = minilm_snippets(12_000)
        if emb is None:
            print("(no BioASQ data: real embeddings skipped)")
        else:
            rng = np.random.default_rng(3)
            idx = rng.permutation(len(emb))
            nq = min(500, len(emb) // 10)
            for row in evaluate(f"MiniLM BioASQ snippets {len(emb) - nq}x384", emb[idx[nq:]], emb[idx[:nq]]):
                print(row, flush=True)


if __name__ == "__main__":
    main()
