"""The optional CUDA back end: always importable; same results as the CPU path on a GPU.

Without a GPU (or when built without CUDA) only the "not available" contract is
checked; the comparisons run wherever ``cuda_available()`` is True.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import medretrieve
from medretrieve import fusion, mmr, mmr_batch, rrf
from medretrieve.index import pack_allowed

needs_gpu = pytest.mark.skipif(not medretrieve.cuda_available(), reason="no usable CUDA device")


def test_package_imports_and_reports_availability() -> None:
    ok = medretrieve.cuda_available()
    assert isinstance(ok, bool)
    if not ok:
        assert fusion.cuda_unavailable_reason()  # says why
    if not Path("/dev/nvidia0").exists():
        assert ok is False  # no GPU device node on this machine


@pytest.mark.skipif(medretrieve.cuda_available(), reason="a usable GPU is present")
def test_device_cuda_raises_clear_runtime_error() -> None:
    x = np.ones((4, 8), np.float32)
    calls = [
        lambda: mmr(np.ones(8), x, 2, device="cuda"),
        lambda: mmr_batch([np.ones(8)], [x], 2, device="cuda"),
        lambda: mmr_batch([], [], 2, device="cuda"),
        lambda: medretrieve._core._cuda_mmr_batch([], 2, 0.5),
        lambda: medretrieve._core._cuda_rrf([[1, 2]]),
        lambda: rrf([[1, 2], [2]], device="cuda"),
        lambda: fusion.cuda_exact_search(x, x, 2),
        lambda: medretrieve._core._cuda_device_summary(),
        lambda: medretrieve.FlatIndex("ip", 8, device="cuda"),
    ]
    for call in calls:
        with pytest.raises(RuntimeError, match="CUDA is not available"):
            call()


def _reference_topk(q: np.ndarray, x: np.ndarray, k: int, metric: str):
    q64, x64 = q.astype(np.float64), x.astype(np.float64)
    if metric == "ip":
        s = q64 @ x64.T
    else:
        s = -((q64[:, None, :] - x64[None, :, :]) ** 2).sum(-1)
    rows = np.arange(x.shape[0])
    ids = np.stack([np.lexsort((rows, -si))[:k] for si in s])
    return ids, np.take_along_axis(s, ids, 1)


@needs_gpu
@pytest.mark.parametrize("dtype", ["float32", "int8"])
@pytest.mark.parametrize("metric", ["ip", "l2"])
@pytest.mark.parametrize("nq,n,dim,k", [(1, 1, 3, 1), (5, 300, 33, 10), (70, 1000, 64, 100), (3, 20, 16, 50)])
def test_cuda_exact_search_matches_numpy(dtype: str, metric: str, nq: int, n: int, dim: int, k: int) -> None:
    rng = np.random.default_rng(nq + n + dim + k)
    if dtype == "int8":
        q = rng.integers(-127, 128, (nq, dim), dtype=np.int8)
        x = rng.integers(-127, 128, (n, dim), dtype=np.int8)
        qs = rng.uniform(0.5, 1.5, nq).astype(np.float32)
        xs = rng.uniform(0.5, 1.5, n).astype(np.float32)
        ids, scores = fusion.cuda_exact_search(q, x, k, metric, query_scales=qs, database_scales=xs)
        qf, xf = q * qs[:, None].astype(np.float64), x * xs[:, None].astype(np.float64)
    else:
        qf = rng.standard_normal((nq, dim)).astype(np.float32)
        xf = rng.standard_normal((n, dim)).astype(np.float32)
        ids, scores = fusion.cuda_exact_search(qf, xf, k, metric)
    want_ids, want_scores = _reference_topk(qf, xf, min(k, n), metric)
    np.testing.assert_array_equal(ids[:, : min(k, n)], want_ids)
    np.testing.assert_allclose(scores[:, : min(k, n)], want_scores, rtol=1e-4, atol=1e-4 * np.abs(want_scores).max())
    if k > n:
        assert (ids[:, n:] == -1).all() and np.isneginf(scores[:, n:]).all()


@needs_gpu
@pytest.mark.parametrize("metric", ["ip", "cosine", "l2"])
def test_cuda_mmr_matches_cpu(metric: str) -> None:
    rng = np.random.default_rng(4)
    sizes = [1, 7, 200, 50]
    cands = [rng.standard_normal((n, 96)).astype(np.float32) for n in sizes]
    queries = [rng.standard_normal(96).astype(np.float32) for _ in sizes]
    lambdas = [0.0, 0.3, 0.7, 1.0]
    got = mmr_batch(queries, cands, 10, lambdas, metric=metric, device="cuda")
    want = mmr_batch(queries, cands, 10, lambdas, metric=metric)
    for (go, gs), (wo, ws) in zip(got, want):
        np.testing.assert_array_equal(go, wo)
        np.testing.assert_allclose(gs, ws, rtol=1e-4, atol=1e-4)
    codes = [rng.integers(-127, 128, (n, 96), dtype=np.int8) for n in sizes]
    scales = [rng.uniform(0.01, 0.02, n).astype(np.float32) for n in sizes]
    got = mmr_batch(queries, codes, 10, 0.5, metric=metric, scales=scales, device="cuda")
    want = mmr_batch(queries, codes, 10, 0.5, metric=metric, scales=scales)
    for (go, gs), (wo, ws) in zip(got, want):
        np.testing.assert_array_equal(go, wo)
        np.testing.assert_allclose(gs, ws, rtol=1e-4, atol=1e-4)


@needs_gpu
def test_cuda_rrf_is_identical_to_cpu() -> None:
    rng = np.random.default_rng(8)
    for trial in range(5):
        lists = [rng.integers(0, 500, int(rng.integers(0, 400))) for _ in range(int(rng.integers(1, 6)))]
        weights = rng.uniform(0, 2, len(lists)) if trial % 2 else None
        got = rrf(lists, weights=weights, top_n=None if trial < 3 else 25, device="cuda")
        want = rrf(lists, weights=weights, top_n=None if trial < 3 else 25)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


@needs_gpu
@pytest.mark.parametrize("metric", ["ip", "l2"])
def test_cuda_fused_selection_on_awkward_inputs(metric: str) -> None:
    """The fused kernels' selection where it is easiest to get wrong (the CPU twin's cases, on the card): integer
    data (exact in float32, so ids must equal float64's exactly), k above a tile's rows and above n, n off the
    tile, all-equal scores, int8 codes of -128 / 127 only, row filters allowing none or fewer than k rows."""
    rng = np.random.default_rng(46)
    cases = []
    for n, k in [(1, 1024), (63, 100), (129, 1024), (1001, 10), (1001, 1024), (20_011, 100)]:
        codes = rng.integers(-2, 3, (n, 3), dtype=np.int8)  # few distinct scores: ties everywhere
        cases.append((rng.integers(-2, 3, (7, 3), dtype=np.int8), codes, k, None))
    same = np.ones((500, 8), np.int8)
    cases.append((np.ones((2, 8), np.int8), same, 300, None))  # all scores equal: rows 0..k-1
    extreme = np.where(rng.random((3000, 256)) < 0.5, -128, 127).astype(np.int8)
    cases.append((extreme[:5], extreme, 1024, None))
    keep = rng.random(2000) < 0.3
    base = rng.integers(-3, 4, (2000, 16), dtype=np.int8)
    cases += [(base[:9], base, 100, keep), (base[:9], base, 100, np.zeros(2000, bool)),
              (base[:9], base, 100, np.isin(np.arange(2000), [5, 700, 1999]))]
    for q, x, k, mask in cases:
        rows = np.arange(len(x)) if mask is None else np.nonzero(mask)[0]
        bits = None if mask is None else pack_allowed(mask)
        qf, xf = q.astype(np.float64), x[rows].astype(np.float64)
        s = qf @ xf.T if metric == "ip" else -((qf[:, None] - xf[None]) ** 2).sum(-1)
        kk = min(k, len(rows))
        want = rows[np.stack([np.lexsort((rows, -si))[:kk] for si in s])] if kk else np.zeros((len(q), 0), int)
        for dtype in ("int8", "float32"):
            a, b = (q, x) if dtype == "int8" else (q.astype(np.float32), x.astype(np.float32))
            ids, scores, _ = medretrieve._core._cuda_exact_search(a, b, k, metric, allowed=bits)
            np.testing.assert_array_equal(ids[:, :kk], want, err_msg=f"{dtype} n={len(x)} k={k}")
            assert (ids[:, kk:] == -1).all() and np.isneginf(scores[:, kk:]).all()


@pytest.mark.parametrize("misorder", [False, True])
def test_gpu_check_script_runs_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, misorder: bool) -> None:
    """bench/gpu_check.py with the CUDA entry points replaced by CPU stand-ins.

    It will first meet a real GPU in a later session with little device time:
    this catches its own bugs (shapes, comparisons, output files) beforehand.
    With a planted misorder in the exact search it must fail (exit 1) and
    save the misordered positions.
    """
    import importlib.util
    import sys

    core = medretrieve._core

    def fake_exact(q, x, k, metric, qs, xs, warmup, repeats, allowed=None):
        qf = q.astype(np.float64) * (1 if qs is None else qs[:, None])
        xf = x.astype(np.float64) * (1 if xs is None else xs[:, None])
        s = qf @ xf.T
        if metric == "l2":
            s = 2 * s - (qf * qf).sum(1)[:, None] - (xf * xf).sum(1)[None, :]
        ids = np.full((len(q), k), -1, np.int64)
        scores = np.full((len(q), k), -np.inf, np.float32)
        rows = np.arange(len(x))
        if allowed is not None:
            rows = rows[np.unpackbits(allowed.view(np.uint8), bitorder="little")[: len(x)].astype(bool)]
        s = s.astype(np.float32)  # as the kernels: float32 scores, ranked (score desc, row asc)
        for i, row in enumerate(s):
            order = rows[np.lexsort((rows, -row[rows]))][:k]
            ids[i, : len(order)] = order
            scores[i, : len(order)] = row[order]
        if misorder and k > 1 and len(rows) > 1 and scores[0, 0] != scores[0, 1]:
            ids[0, :2] = ids[0, 1::-1].copy()  # a planted selection bug: two neighbours swapped
        return ids, scores, [1.0] * repeats

    def fake_mmr(cands, k, lambdas, queries, rels, metric, scales, warmup, repeats):
        return fusion.mmr_batch(queries, cands, k, lambdas, rels, metric=metric, scales=scales), [1.0] * repeats

    def fake_rrf(lists, k, weights, top_n, warmup, repeats):
        ids, scores = fusion.rrf(lists, k, weights, top_n or None)
        return ids, scores, [1.0] * repeats

    monkeypatch.setattr(core, "_cuda_available", lambda: (True, ""))
    monkeypatch.setattr(core, "_cuda_device_summary", lambda: "NVIDIA H100 80GB HBM3, 132 SMs (CPU stand-in)")
    monkeypatch.setattr(core, "_cuda_exact_search", fake_exact)
    monkeypatch.setattr(core, "_cuda_mmr_batch", fake_mmr)
    monkeypatch.setattr(core, "_cuda_rrf", fake_rrf)
    monkeypatch.setattr(core, "_CudaTable", NumpyTable, raising=False)
    script = Path(__file__).resolve().parents[2] / "bench" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check_under_test", script)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    monkeypatch.setattr(sys, "argv", ["gpu_check.py", "--out", str(tmp_path), "--quick", "--repeats", "2",
                                      "--warmup", "0", "--big-n", "40000", "--big-queries", "40",
                                      "--mid-n", "5000", "--mmr-batch", "16"])
    out = tmp_path / "gpu_check"
    if misorder:
        assert module.main() == 1
        summary = json.loads((out / "summary.json").read_text())
        status = {r["case"]: r["status"] for r in summary["cases"]}
        assert status["exact_float32_ip"] == "FAILED" and status["order_draws_int8_l2"] == "FAILED"
        assert status["mmr_int8_ip"] == "ok"  # the other kernels still ran
        found = json.loads((out / "order_draws_float32_l2.misorders.json").read_text())
        assert found and {"draw", "seed", "position", "ref_score_of_id"} <= set(found[0])
        return
    assert module.main() == 0
    summary = (out / "summary.json").read_text()
    assert '"status": "ok"' in summary and "ERROR" not in summary and "FAILED" not in summary
    table = (out / "table.md").read_text()
    for case in ("exact_int8_big", "exact_float32_awkward", "mmr_int8_cosine", "rrf_large", "exact_float32_big_k10",
                 "exact_int8_big_k100", "exact_int8_big_k1024", "order_draws_float32_l2", "exact_int8_filtered_0.0",
                 "exact_float32_filtered_0.3"):
        assert case in table
    assert "fraction" in table and "H100 SXM" in table and "fp32 CUDA cores" in table
    assert "x the k=10 time" in table and "beyond float ties" in table
    assert (out / "exact_int8_big.npz").exists()
    assert json.loads((out / "order_draws_int8_ip.misorders.json").read_text()) == []


def test_gpu_check_card_peaks() -> None:
    """The floors' peaks come from the card's name; an unknown card gets none (no made-up floor)."""
    import importlib.util

    script = Path(__file__).resolve().parents[2] / "bench" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check_peaks", script)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    cards = {
        "NVIDIA H200, 132 SMs, 139.8 GiB, sm_90": "H200 SXM",
        "NVIDIA H200 NVL, 132 SMs": "H200 NVL",
        "NVIDIA H100 80GB HBM3, 132 SMs": "H100 SXM",
        "NVIDIA H100 PCIe, 114 SMs": "H100 PCIe",
        "NVIDIA A100-SXM4-80GB, 108 SMs": "A100 80GB SXM",
        "NVIDIA A100 80GB PCIe, 108 SMs": "A100 80GB PCIe",
        "NVIDIA A100-PCIE-40GB, 108 SMs": "A100 40GB",
    }
    for name, card in cards.items():
        assert module.card_peaks(name).card == card
    assert module.card_peaks("NVIDIA GeForce RTX 4090, 128 SMs") is None
    assert module.floor_row(None, "int8", 1, 1, 1, 1.0) == {"floors": "card not in CARD_PEAKS"}
    row = module.floor_row(module.card_peaks("NVIDIA H200"), "int8", 1000, 1_000_000, 768, 3e-3)
    assert row["compute_floor_ms"] == pytest.approx(0.7762, abs=1e-3)  # issue 46: about 0.78 ms
    assert row["fraction_of_compute_floor"] == pytest.approx(0.7762 / 3, abs=1e-3)


class NumpyTable:
    """Stand-in for ``_core._CudaTable`` with the kernels' arithmetic (int8: exact integer dot products scaled by
    ``s_q * s_x``; l2 also subtracts both squared norms), so FlatIndex's device path runs on any machine."""

    def __init__(self) -> None:
        self.rows, self.scales = None, None

    def assign(self, rows, scales=None) -> None:
        self.rows, self.scales = np.array(rows), None if scales is None else np.array(scales)

    def search(self, q, q_scales, k, metric, allowed=None):
        x = self.rows
        self.last_allowed = allowed
        if x.dtype == np.int8:
            dot = q.astype(np.int64) @ x.astype(np.int64).T
            qs = np.ones(len(q)) if q_scales is None else q_scales.astype(np.float64)
            xs = np.ones(len(x)) if self.scales is None else self.scales.astype(np.float64)
            s = qs[:, None] * xs[None, :] * dot
            if metric == "l2":
                qn = (q.astype(np.int64) ** 2).sum(1) * qs ** 2
                xn = (x.astype(np.int64) ** 2).sum(1) * xs ** 2
                s = 2 * s - qn[:, None] - xn[None, :]
        else:
            q64, x64 = q.astype(np.float64), x.astype(np.float64)
            s = q64 @ x64.T if metric == "ip" else -((q64[:, None] - x64[None]) ** 2).sum(-1)
        pos = np.full((len(q), k), -1, np.int64)
        out = np.full((len(q), k), -np.inf, np.float32)
        rows = np.arange(len(x))
        if allowed is not None:  # the kernels' row filter: bit row % 64 of word row // 64, rows past it excluded
            assert allowed.dtype == np.uint64 and allowed.ndim == 1
            bits = np.unpackbits(allowed.view(np.uint8), bitorder="little").astype(bool)
            rows = rows[: len(bits)][bits[: len(x)]]
        for i, si in enumerate(s):
            top = rows[np.lexsort((rows, -si[rows]))][:k]
            pos[i, :len(top)], out[i, :len(top)] = top, si[top]
        return pos, out


@pytest.mark.parametrize("dtype", ["float32", "int8"])
@pytest.mark.parametrize("space", ["ip", "l2", "cosine"])
def test_flat_index_device_path_matches_cpu(monkeypatch: pytest.MonkeyPatch, dtype: str, space: str) -> None:
    """FlatIndex(device="cuda")'s host half (packing, query preparation, score offsets, id mapping, rebuilds after
    adds and deletions, CPU fallback for labels) against the CPU index, with the numpy stand-in for the GPU."""
    monkeypatch.setattr(medretrieve._core, "_cuda_available", lambda: (True, ""))
    monkeypatch.setattr(medretrieve._core, "_CudaTable", NumpyTable, raising=False)
    rng = np.random.default_rng(7)
    dim = 37
    x = (rng.normal(size=(700, dim)) + 0.5).astype(np.float32)
    q = (rng.normal(size=(9, dim)) + 0.5).astype(np.float32)
    ids = np.arange(1000, 1700)
    labels = [[i % 3] for i in range(700)]
    cpu = medretrieve.FlatIndex(space, dim, dtype=dtype)
    gpu = medretrieve.FlatIndex(space, dim, dtype=dtype, device="cuda")
    for f in (cpu, gpu):
        f.add(x[:400], ids[:400], labels[:400])
    assert gpu.device == "cuda" and "cuda" in repr(gpu)

    def same(k: int) -> None:
        ci, cs = cpu.search(q, k)
        gi, gs = gpu.search(q, k)
        np.testing.assert_array_equal(gi, ci)
        np.testing.assert_allclose(gs, cs, rtol=2e-5, atol=2e-4 * max(1.0, float(np.abs(cs[np.isfinite(cs)]).max())))

    same(10)
    for f in (cpu, gpu):  # the device copy is rebuilt after adds and deletions
        f.add(x[400:], ids[400:], labels[400:])
        f.mark_deleted(1003)
        f.mark_deleted(1500)
    same(25)
    same(1)
    for f in (cpu, gpu):
        f.unmark_deleted(1500)
    same(7)
    li, _ = gpu.search(q, 5, labels=[1])  # labels: CPU path
    np.testing.assert_array_equal(li, cpu.search(q, 5, labels=[1])[0])
    small = medretrieve.FlatIndex(space, dim, dtype=dtype, device="cuda")
    small.add(x[:3])
    si, ss = small.search(q[:2], 5)  # k > n: padded like the CPU path
    assert (si[:, 3:] == -1).all() and np.isneginf(ss[:, 3:]).all()
    with pytest.raises(ValueError, match="1024"):
        gpu.search(q, 1025)


@pytest.mark.parametrize("dtype", ["float32", "int8"])
@pytest.mark.parametrize("space", ["ip", "l2"])
def test_flat_index_device_row_filter_matches_cpu(monkeypatch: pytest.MonkeyPatch, dtype: str, space: str) -> None:
    """``allowed`` on device="cuda": the bitset over external ids becomes one over the device table's rows (after
    deletions the rows are not the ids), and the results equal the CPU's filtered search: none allowed, fewer than k,
    ids past the bitset's end, a bool mask. A core without the device filter runs allowed= on the CPU."""
    from medretrieve.index import allowed_bitset, flat

    monkeypatch.setattr(medretrieve._core, "_cuda_available", lambda: (True, ""))
    monkeypatch.setattr(medretrieve._core, "_CudaTable", NumpyTable, raising=False)
    monkeypatch.setattr(flat, "CUDA_ROW_FILTER", True)
    rng = np.random.default_rng(11)
    dim = 19
    x = rng.normal(size=(300, dim)).astype(np.float32)
    q = rng.normal(size=(4, dim)).astype(np.float32)
    ids = np.arange(5, 305) * 3  # sparse ids: rows and ids differ
    cpu = medretrieve.FlatIndex(space, dim, dtype=dtype)
    gpu = medretrieve.FlatIndex(space, dim, dtype=dtype, device="cuda")
    for f in (cpu, gpu):
        f.add(x, ids)
        f.mark_deleted(int(ids[10]))
    mask = np.zeros(ids.max() + 1, dtype=bool)
    mask[ids[rng.random(len(ids)) < 0.4]] = True
    filters = [
        allowed_bitset([], size=1000),  # none allowed
        allowed_bitset(ids[[3, 10, 50]]),  # fewer than k (one of them deleted)
        allowed_bitset(ids[ids < 400]),  # rows past the bitset's end are not allowed
        mask,
    ]
    for allowed in filters:
        for k in (1, 7, 300):
            ci, cs = cpu.search(q, k, allowed=allowed)
            gi, gs = gpu.search(q, k, allowed=allowed)
            np.testing.assert_array_equal(gi, ci)
            np.testing.assert_allclose(gs, cs, rtol=2e-5, atol=2e-4 * max(1.0, float(np.abs(x).max()) ** 2 * dim))
    table, _ = gpu._device_table()
    assert table.last_allowed is not None  # it ran on the (stand-in) device
    monkeypatch.setattr(flat, "CUDA_ROW_FILTER", False)
    table.last_allowed = None
    np.testing.assert_array_equal(gpu.search(q, 5, allowed=mask)[0], cpu.search(q, 5, allowed=mask)[0])
    assert table.last_allowed is None  # the CPU answered


@needs_gpu
@pytest.mark.parametrize("dtype", ["float32", "int8"])
@pytest.mark.parametrize("space", ["ip", "l2"])
def test_flat_index_on_the_gpu_matches_cpu(dtype: str, space: str) -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(5000, 96)).astype(np.float32)
    q = rng.normal(size=(33, 96)).astype(np.float32)
    cpu = medretrieve.FlatIndex(space, 96, dtype=dtype)
    gpu = medretrieve.FlatIndex(space, 96, dtype=dtype, device="cuda")
    for f in (cpu, gpu):
        f.add(x)
        f.mark_deleted(17)
    ci, cs = cpu.search(q, 20)
    gi, gs = gpu.search(q, 20)
    np.testing.assert_array_equal(gi, ci)
    np.testing.assert_allclose(gs, cs, rtol=1e-4, atol=1e-3)
