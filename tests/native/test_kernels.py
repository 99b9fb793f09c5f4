"""SIMD kernels: every level this CPU runs against a float64 reference, on awkward sizes."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import medretrieve
from medretrieve import _core

SIZES = [0, 1, 3, 7, 8, 15, 16, 17, 31, 33, 63, 64, 65, 127, 129, 191, 255, 256, 257, 383, 768, 1000, 1537]
LEVELS = _core.available_simd_levels()


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("n", SIZES)
def test_float_kernels_match_float64(level: str, n: int) -> None:
    rng = np.random.default_rng(n)
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    ref_dot = float(np.dot(a.astype(np.float64), b.astype(np.float64)))
    ref_l2 = float(np.sum((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    tol = 1e-5 * (float(np.abs(a.astype(np.float64) * b).sum()) + 1.0)
    assert abs(_core._kernel_dot_f32(a, b, level) - ref_dot) <= tol
    assert abs(_core._kernel_l2sq_f32(a, b, level) - ref_l2) <= 1e-5 * (ref_l2 + 1.0)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("n", SIZES)
def test_int8_dot_is_exact(level: str, n: int) -> None:
    rng = np.random.default_rng(1000 + n)
    a = rng.integers(-127, 128, n, dtype=np.int8)
    b = rng.integers(-127, 128, n, dtype=np.int8)
    assert _core._kernel_dot_i8(a, b, level) == int(np.dot(a.astype(np.int64), b.astype(np.int64)))


def test_int8_extremes_do_not_saturate() -> None:
    hi = np.full(4099, 127, np.int8)
    lo = np.full(4099, -127, np.int8)
    for level in LEVELS:
        assert _core._kernel_dot_i8(hi, lo, level) == -127 * 127 * 4099
        assert _core._kernel_dot_i8(lo, lo, level) == 127 * 127 * 4099  # sign moved from a onto b
        assert _core._kernel_dot_i8(lo[:-1], hi[:-1], level) == -127 * 127 * 4098


def test_kernel_argument_errors() -> None:
    a = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match="length mismatch"):
        _core._kernel_dot_f32(a, np.zeros(5, np.float32), "scalar")
    with pytest.raises(ValueError, match="unknown SIMD level"):
        _core._kernel_dot_f32(a, a, "sse9")


def test_quantizer_round_trip_preserves_dot_scale() -> None:
    # MedCPT-like raw vectors: inner products of ~60-70 must survive quantization.
    rng = np.random.default_rng(5)
    centre = rng.standard_normal(768).astype(np.float32) * 0.3
    x = (centre + rng.standard_normal(768).astype(np.float32) * 0.25).astype(np.float32)
    y = (centre + rng.standard_normal(768).astype(np.float32) * 0.25).astype(np.float32)
    cx, sx = _core._quantize_i8(x, centre)
    cy, sy = _core._quantize_i8(y, centre)
    xr = centre + sx * cx.astype(np.float32)
    yr = centre + sy * cy.astype(np.float32)
    assert np.max(np.abs(xr - x)) <= 0.5 * sx + 1e-6
    assert abs(float(xr @ yr) - float(x @ y)) / abs(float(x @ y)) < 0.01


@pytest.mark.parametrize("centred", [False, True])
@pytest.mark.parametrize("n", [s for s in SIZES if s])
def test_quantizer_matches_a_float64_reference(n: int, centred: bool) -> None:
    # The vectorised loops and the scalar tail against numpy: scale = max|x - c| / 127, code = rint of the
    # residual over the scale (ties to even), clamped to +-127. Half the rows put values exactly on ties.
    rng = np.random.default_rng(7000 + n)
    centre = (rng.standard_normal(n) * 0.2).astype(np.float32) if centred else None
    for row in range(6):
        x = rng.standard_normal(n).astype(np.float32)
        if row % 2:
            x = (np.clip(np.round(x * 40), -126, 125) + 0.5).astype(np.float32)  # ties: amax 127 makes the
            x[rng.integers(n)] = 127.0  # scaling factor exactly 1
            centre_row = None
        else:
            centre_row = centre
        code, scale = _core._quantize_i8(x, centre_row)
        r = x.astype(np.float32) - (centre_row if centre_row is not None else np.float32(0))
        amax = np.max(np.abs(r))
        assert scale == pytest.approx(float(amax) / 127.0, rel=1e-6)
        want = np.clip(np.rint(r * (np.float32(127.0) / amax)), -127, 127).astype(np.int8)
        np.testing.assert_array_equal(code, want)


@pytest.mark.parametrize("level", LEVELS)
def test_env_switch_caps_the_level(level: str) -> None:
    env = dict(os.environ, MEDRETRIEVE_SIMD=level)
    out = subprocess.run(
        [sys.executable, "-c", "import medretrieve; print(medretrieve.simd_level())"],
        env=env, capture_output=True, text=True, check=True,
    )
    assert out.stdout.strip() == level


def test_unknown_env_value_warns_and_uses_best_level() -> None:
    env = dict(os.environ, MEDRETRIEVE_SIMD="sse9")
    out = subprocess.run(
        [sys.executable, "-W", "always", "-c", "import medretrieve; print(medretrieve.simd_level())"],
        env=env, capture_output=True, text=True, check=True,
    )
    assert out.stdout.strip() == medretrieve.cpu_simd_level()
    assert "MEDRETRIEVE_SIMD" in out.stderr
