// AVX2 + FMA kernels. Compiled with -mavx2 -mfma; internal linkage only.
#include <immintrin.h>

#include <algorithm>

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

// The 64 bits of a word, broadcast, become 64 byte masks (byte j of a 32-byte half picks the bits' byte j / 8, then
// tests bit j % 8) that keep the query's bytes where set; vpmaddubsw sums those in pairs into int16 lanes (at most
// 2 x 127 each), kept in int16 over kSketchWordsPer16 words, then widened into int32 lanes. Four rows' int32 sums
// reduced together.
constexpr size_t kSketchWordsPer16 = 32;  // 64 pair sums of 254 at most a lane: under 2^15

inline __m256i sketch_row_avx2(const uint64_t* row, const int8_t* q, size_t words) {
  const __m256i pick_lo = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                           2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i pick_hi = _mm256_add_epi8(pick_lo, _mm256_set1_epi8(4));
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201ull));
  const __m256i one8 = _mm256_set1_epi8(1), one16 = _mm256_set1_epi16(1);
  const auto half = [&](__m256i acc, __m256i word, __m256i pick, const int8_t* qh) {
    const __m256i spread = _mm256_and_si256(_mm256_shuffle_epi8(word, pick), bit);
    const __m256i kept = _mm256_and_si256(_mm256_cmpeq_epi8(spread, bit), load256(qh));
    return _mm256_add_epi16(acc, _mm256_maddubs_epi16(one8, kept));
  };
  __m256i acc32 = _mm256_setzero_si256();
  for (size_t first = 0; first < words; first += kSketchWordsPer16) {
    __m256i acc16 = _mm256_setzero_si256();
    for (size_t w = first; w < std::min(words, first + kSketchWordsPer16); ++w) {
      const __m256i word = _mm256_set1_epi64x(int64_t(row[w]));
      acc16 = half(acc16, word, pick_lo, q + 64 * w);
      acc16 = half(acc16, word, pick_hi, q + 64 * w + 32);
    }
    acc32 = _mm256_add_epi32(acc32, _mm256_madd_epi16(acc16, one16));
  }
  return acc32;
}

// The sums of the int32 lanes of a, b, c and d, as the four lanes of one register.
inline __m128i reduce4_epi32(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i abcd = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
  return _mm_add_epi32(_mm256_castsi256_si128(abcd), _mm256_extracti128_si256(abcd, 1));
}

void sketch_estimates(const int8_t* q, const uint64_t* rows, size_t stride, size_t words, const uint32_t* ids,
                      size_t n, float* out) {
  const auto row_of = [&](size_t j) { return rows + size_t(ids[j]) * stride; };
  const auto sum = [&](size_t j) {
    if (j + kSketchRowsAhead < n) prefetch_sketch_row(row_of(j + kSketchRowsAhead), stride);
    return sketch_row_avx2(row_of(j), q, words);
  };
  const auto scale = [&](size_t j) { return sketch_row_scale(row_of(j), words); };
  size_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const __m256i a = sum(j), b = sum(j + 1), c = sum(j + 2), d = sum(j + 3);
    const __m128 scales = _mm_setr_ps(scale(j), scale(j + 1), scale(j + 2), scale(j + 3));
    _mm_storeu_ps(out + j, _mm_mul_ps(_mm_cvtepi32_ps(reduce4_epi32(a, b, c, d)), scales));
  }
  for (; j < n; ++j) out[j] = float(hsum256_epi32(sum(j))) * scale(j);
}

// Each dense word's ids a byte at a time: the byte's set bits' places (up to eight, from a table of 256), widened
// to eight int32 lanes plus the byte's first id, stored whole.
struct BytePlaces {
  uint64_t places[256];  // byte b: the places of its set bits, ascending, one per byte, low byte first
  constexpr BytePlaces() : places() {
    for (int b = 0; b < 256; ++b) {
      int k = 0;
      for (int i = 0; i < 8; ++i)
        if (b >> i & 1) places[b] |= uint64_t(i) << (8 * k++);
    }
  }
};
constexpr BytePlaces kBytePlaces;

size_t set_bit_ids(const uint64_t* words, size_t n, uint32_t* out) {
  uint32_t* o = out;
  for (size_t w = 0; w < n; ++w) {
    const uint64_t bits = words[w];
    if (__builtin_popcountll(bits) < kDenseWordBits) {
      o = set_bit_ids_sparse(bits, uint32_t(w * 64), o);
      continue;
    }
    for (int b = 0; b < 8; ++b) {
      const unsigned byte = unsigned(bits >> (8 * b)) & 0xFF;
      const __m256i places = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(kBytePlaces.places[byte])));
      const __m256i ids = _mm256_add_epi32(places, _mm256_set1_epi32(int(w * 64 + 8 * b)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), ids);
      o += __builtin_popcount(byte);
    }
  }
  return size_t(o - out);
}

}  // namespace

const KernelTable& avx2_table() {
  static const KernelTable t{SimdLevel::AVX2, dot_f32, l2sq_f32, dot_i8, dot_i8_x4,
                             each_row_f32<dot_f32>, each_row_f32<l2sq_f32>,
                             count_bits_words, sketch_estimates, set_bit_ids};
  return t;
}

}  // namespace medretrieve::kernels
