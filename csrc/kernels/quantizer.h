// int8 scalar quantizer: trained centre + per-vector symmetric scale.
//
// A vector x is stored as x ~= c + s * code, where c is a per-dimension centre
// trained from the data (the mean of a sample), s = max_i |x_i - c_i| / 127
// and code = round((x - c) / s) in [-127, 127]. Because every vector keeps its
// own scale, dot products keep their absolute scale (MedCPT's raw inner
// products of ~60-70 survive), and centring removes the shared offset that
// embedding models put on every vector, so the 8 bits cover the part that
// differs between vectors. bench/quant_scheme.py measures this choice against
// per-dimension min/max ranges and against plain per-vector scales.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace medretrieve::kernels {

// Rounds to the nearest integer, ties to even (nearbyint in the default
// rounding mode) for |v| <= 2**22, without nearbyint's libm call per element:
// after adding 1.5 * 2**23 no fraction bits are left, so the addition itself
// rounds. Nothing may fold the two additions: the project builds without
// -ffast-math.
inline float round_to_even(float v) {
  constexpr float kMagic = 12582912.f;  // 1.5 * 2**23
  return (v + kMagic) - kMagic;
}

// Every query is quantized before its search, so these two loops are written
// with SSE2 (part of every x86-64 CPU, so no dispatch): the compiler does not
// vectorise them itself (float selects under -ftrapping-math), and scalar
// they cost a 384-d query ~1 us. Results equal the scalar tails' exactly: the
// max is exact and cvtps2dq rounds to nearest even, as nearbyint does.

// max_i |x_i - centre_i| (kCentred) or max_i |x_i|.
template <bool kCentred>
inline float residual_amax(const float* x, const float* centre, size_t dim) {
  size_t i = 0;
  float amax = 0.f;
#if defined(__SSE2__)
  const __m128 sign = _mm_set1_ps(-0.f);
  __m128 m0 = _mm_setzero_ps(), m1 = _mm_setzero_ps();
  for (; i + 8 <= dim; i += 8) {
    __m128 a = _mm_loadu_ps(x + i), b = _mm_loadu_ps(x + i + 4);
    if (kCentred) {
      a = _mm_sub_ps(a, _mm_loadu_ps(centre + i));
      b = _mm_sub_ps(b, _mm_loadu_ps(centre + i + 4));
    }
    m0 = _mm_max_ps(m0, _mm_andnot_ps(sign, a));
    m1 = _mm_max_ps(m1, _mm_andnot_ps(sign, b));
  }
  alignas(16) float lanes[4];
  _mm_store_ps(lanes, _mm_max_ps(m0, m1));
  amax = std::max(std::max(lanes[0], lanes[1]), std::max(lanes[2], lanes[3]));
#endif
  for (; i < dim; ++i) amax = std::max(amax, std::fabs(kCentred ? x[i] - centre[i] : x[i]));
  return amax;
}

// code_i = round(clamp((x_i - centre_i) * inv, -127, 127)).
template <bool kCentred>
inline void encode_i8(const float* x, const float* centre, size_t dim, float inv, int8_t* code) {
  size_t i = 0;
#if defined(__SSE2__)
  const __m128 scale = _mm_set1_ps(inv), lo = _mm_set1_ps(-127.f), hi = _mm_set1_ps(127.f);
  for (; i + 16 <= dim; i += 16) {
    __m128i q[4];
    for (size_t j = 0; j < 4; ++j) {
      __m128 r = _mm_loadu_ps(x + i + 4 * j);
      if (kCentred) r = _mm_sub_ps(r, _mm_loadu_ps(centre + i + 4 * j));
      q[j] = _mm_cvtps_epi32(_mm_min_ps(hi, _mm_max_ps(lo, _mm_mul_ps(r, scale))));
    }
    const __m128i packed = _mm_packs_epi16(_mm_packs_epi32(q[0], q[1]), _mm_packs_epi32(q[2], q[3]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(code + i), packed);
  }
#endif
  for (; i < dim; ++i) {
    const float r = (kCentred ? x[i] - centre[i] : x[i]) * inv;
    code[i] = static_cast<int8_t>(round_to_even(std::min(127.f, std::max(-127.f, r))));
  }
}

// Encodes (x - centre) into code; centre may be null (no centring).
// Returns the scale s (0 when the residual is all zeros).
inline float quantize_i8(const float* x, const float* centre, size_t dim, int8_t* code) {
  const float amax = centre ? residual_amax<true>(x, centre, dim) : residual_amax<false>(x, centre, dim);
  if (amax == 0.f) {
    std::fill(code, code + dim, int8_t(0));
    return 0.f;
  }
  const float inv = 127.f / amax;
  if (centre)
    encode_i8<true>(x, centre, dim, inv, code);
  else
    encode_i8<false>(x, centre, dim, inv, code);
  return amax / 127.f;
}

// out = centre + scale * code (centre may be null).
inline void dequantize_i8(const int8_t* code, float scale, const float* centre, size_t dim, float* out) {
  for (size_t i = 0; i < dim; ++i) out[i] = (centre ? centre[i] : 0.f) + scale * float(code[i]);
}

// sum_i code[i]^2 * scale^2: the squared norm of the dequantized residual.
inline float code_norm2(const int8_t* code, float scale, size_t dim) {
  int64_t s = 0;
  for (size_t i = 0; i < dim; ++i) s += int64_t(code[i]) * code[i];
  return float(double(s) * double(scale) * double(scale));
}

}  // namespace medretrieve::kernels
