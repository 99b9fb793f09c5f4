// AVX2 + FMA kernels. Compiled with -mavx2 -mfma; internal linkage only.
#include <immintrin.h>

#include "kernels/distances.h"

namespace medretrieve::kernels {
namespace {

inline float hsum256(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

inline int32_t hsum256_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

float dot_f32(const float* a, const float* b, size_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
    acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), acc2);
    acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), acc3);
  }
  for (; i + 8 <= n; i += 8)
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  float s = hsum256(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

float l2sq_f32(const float* a, const float* b, size_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
    __m256 d1 = _mm256_sub_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8));
    acc0 = _mm256_fmadd_ps(d0, d0, acc0);
    acc1 = _mm256_fmadd_ps(d1, d1, acc1);
  }
  for (; i + 8 <= n; i += 8) {
    __m256 d = _mm256_sub_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
    acc0 = _mm256_fmadd_ps(d, d, acc0);
  }
  float s = hsum256(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) {
    float d = a[i] - b[i];
    s += d * d;
  }
  return s;
}

// dot(a, b) = sum |a_i| * (sign(a_i) * b_i): vpmaddubsw multiplies unsigned by
// signed bytes and adds pairs into int16 (two products <= 2 * 127^2 < 2^15, so
// codes in [-127, 127] never saturate), vpmaddwd widens the pairs to int32.
// Six instructions per 32 codes; four accumulators so that a 384-d code is
// three unrolled iterations with no loop tail (graph search calls this ~450
// times a query: before, 137 instructions a call at 384-d, now ~90).
inline __m256i dot_i8_step(__m256i acc, __m256i a, __m256i b, __m256i ones) {
  const __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(a), _mm256_sign_epi8(b, a));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, ones));
}

inline __m256i load256(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

int32_t dot_i8(const int8_t* a, const int8_t* b, size_t n) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc0 = _mm256_setzero_si256(), acc1 = _mm256_setzero_si256();
  __m256i acc2 = _mm256_setzero_si256(), acc3 = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    acc0 = dot_i8_step(acc0, load256(a + i), load256(b + i), ones);
    acc1 = dot_i8_step(acc1, load256(a + i + 32), load256(b + i + 32), ones);
    acc2 = dot_i8_step(acc2, load256(a + i + 64), load256(b + i + 64), ones);
    acc3 = dot_i8_step(acc3, load256(a + i + 96), load256(b + i + 96), ones);
  }
  for (; i + 32 <= n; i += 32) acc0 = dot_i8_step(acc0, load256(a + i), load256(b + i), ones);
  __m256i acc = _mm256_add_epi32(_mm256_add_epi32(acc0, acc1), _mm256_add_epi32(acc2, acc3));
  int32_t s;
  if (i + 16 <= n) {  // one 16-code step at half width
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i));
    const __m128i y = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i));
    const __m128i pairs = _mm_maddubs_epi16(_mm_abs_epi8(x), _mm_sign_epi8(y, x));
    s = hsum256_epi32(_mm256_add_epi32(acc, _mm256_zextsi128_si256(_mm_madd_epi16(pairs, _mm_set1_epi16(1)))));
    i += 16;
  } else {
    s = hsum256_epi32(acc);
  }
  for (; i < n; ++i) s += int32_t(a[i]) * int32_t(b[i]);
  return s;
}

// Four codes against one query: per 32 codes the query is loaded and its
// absolute value taken once (4 x 5 + 2 instructions instead of 4 x 7), and
// the four independent accumulators keep the multiply units busy.
void dot_i8_x4(const int8_t* q, const int8_t* const* b, size_t n, int32_t* out) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i x = load256(q + i);
    const __m256i ax = _mm256_abs_epi8(x);
    for (size_t j = 0; j < 4; ++j) {
      const __m256i pairs = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(load256(b[j] + i), x));
      acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(pairs, ones));
    }
  }
  for (size_t j = 0; j < 4; ++j) {
    int32_t s = hsum256_epi32(acc[j]);
    for (size_t t = i; t < n; ++t) s += int32_t(q[t]) * int32_t(b[j][t]);
    out[j] = s;
  }
}

// Each 32 bits of a row become 32 bytes of 0 / 1 (the word broadcast, byte j of a lane picked from the bits' byte
// j / 8, then tested for bit j % 8), multiplied by the query's bytes and summed into int32 lanes.
void sketch_estimates(const int8_t* q, const uint64_t* rows, size_t stride, size_t words, const uint32_t* ids,
                      size_t n, float* out) {
  const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                        2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201ull));
  const __m256i one8 = _mm256_set1_epi8(1), one16 = _mm256_set1_epi16(1);
  const auto half = [&](__m256i acc, uint32_t bits, const int8_t* qh) {
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(int32_t(bits)), pick);
    const __m256i set = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), one8);
    const __m256i pairs = _mm256_maddubs_epi16(set, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh)));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, one16));
  };
  for (size_t j = 0; j < n; ++j) {
    if (j + kSketchRowsAhead < n) prefetch_sketch_row(rows + size_t(ids[j + kSketchRowsAhead]) * stride, stride);
    const uint64_t* row = rows + size_t(ids[j]) * stride;
    __m256i acc0 = _mm256_setzero_si256(), acc1 = _mm256_setzero_si256();
    for (size_t w = 0; w < words; ++w) {
      acc0 = half(acc0, uint32_t(row[w]), q + 64 * w);
      acc1 = half(acc1, uint32_t(row[w] >> 32), q + 64 * w + 32);
    }
    out[j] = float(hsum256_epi32(_mm256_add_epi32(acc0, acc1))) * sketch_row_scale(row, words);
  }
}

}  // namespace

const KernelTable& avx2_table() {
  static const KernelTable t{SimdLevel::AVX2, dot_f32, l2sq_f32, dot_i8, dot_i8_x4,
                             each_row_f32<dot_f32>, each_row_f32<l2sq_f32>,
                             count_bits_words, sketch_estimates};
  return t;
}

}  // namespace medretrieve::kernels
