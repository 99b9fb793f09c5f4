// One vector against many rows; see row_kernels.h.
//
// The AVX2 and AVX-512 loops use target attributes instead of per-file ISA
// flags and live in an anonymous namespace: only always-inline intrinsics are
// compiled for those levels here, nothing with external or COMDAT linkage, so
// no AVX2 / AVX-512 code can be picked up by callers on a CPU without it. Each
// runs only when the level asked for (kernels::active()'s by default) is at
// or above its own.
#include "fusion/row_kernels.h"

#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/distances.h"

#if defined(MEDRETRIEVE_X86)
#include <immintrin.h>
#endif

namespace medretrieve::fusion::rows {
namespace {

bool at_least(SimdLevel level, SimdLevel wanted) {
#if defined(MEDRETRIEVE_X86)
  return int(level) >= int(wanted);
#else
  return false;
#endif
}

// Runs block(R, i) over rows [i, i + R) for all n rows: blocks of 4, then the
// last 1-3 rows as one block (a single row is one chain of dependent FMAs, and
// MMR's refreshes score a candidate against 1-3 picks at a time).
template <class Block>
void in_blocks(size_t n, Block&& block) {
  size_t i = 0;
  for (; i + 4 <= n; i += 4) block(std::integral_constant<int, 4>(), i);
  switch (n - i) {
    case 3: return block(std::integral_constant<int, 3>(), i);
    case 2: return block(std::integral_constant<int, 2>(), i);
    case 1: return block(std::integral_constant<int, 1>(), i);
  }
}

#if defined(MEDRETRIEVE_X86)
#define MR_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

// One step of an accumulator: kL2 adds (x - y)^2, else x * y.
template <bool kL2>
MR_AVX512 inline __m512 accumulate(__m512 x, __m512 y, __m512 acc) {
  if (kL2) {
    const __m512 d = _mm512_sub_ps(x, y);
    return _mm512_fmadd_ps(d, d, acc);
  }
  return _mm512_fmadd_ps(x, y, acc);
}

// R rows at once; kL2: sum (v - row)^2, else sum v * row. Each row keeps
// one accumulator and the same order of operations for every R.
template <int R, bool kL2>
MR_AVX512 void f32_block(const float* v, const float* const* rows, size_t dim, float* out) {
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= dim; i += 16) {
    const __m512 x = _mm512_loadu_ps(v + i);
    for (int r = 0; r < R; ++r) {
      acc[r] = accumulate<kL2>(x, _mm512_loadu_ps(rows[r] + i), acc[r]);
    }
  }
  if (i < dim) {
    const __mmask16 m = static_cast<__mmask16>((1u << (dim - i)) - 1u);
    const __m512 x = _mm512_maskz_loadu_ps(m, v + i);
    for (int r = 0; r < R; ++r) {
      acc[r] = accumulate<kL2>(x, _mm512_maskz_loadu_ps(m, rows[r] + i), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(acc[r]);
}

template <int R, bool kL2>
MR_AVX512 void i8_block(const float* v, const int8_t* const* rows, const float* scale, size_t dim, float* out) {
  __m512 acc[R], s[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm512_setzero_ps();
    s[r] = _mm512_set1_ps(scale ? scale[r] : 1.f);
  }
  size_t i = 0;
  for (; i + 16 <= dim; i += 16) {
    const __m512 x = _mm512_loadu_ps(v + i);
    for (int r = 0; r < R; ++r) {
      const __m512 y = _mm512_cvtepi32_ps(
          _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[r] + i))));
      acc[r] = accumulate<kL2>(x, kL2 ? _mm512_mul_ps(s[r], y) : y, acc[r]);
    }
  }
  if (i < dim) {
    const __mmask16 m = static_cast<__mmask16>((1u << (dim - i)) - 1u);
    const __m512 x = _mm512_maskz_loadu_ps(m, v + i);
    for (int r = 0; r < R; ++r) {
      const __m512 y = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, rows[r] + i)));
      acc[r] = accumulate<kL2>(x, kL2 ? _mm512_mul_ps(s[r], y) : y, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(acc[r]);
}



// --- AVX2 + FMA: the same blocks with 8 lanes. With one accumulator per row
// the 4-row block would wait on the FMA latency (4 rows x 1 chain where the
// core needs ~8 in flight), so each row keeps two, over alternate 8-lane
// chunks; as above, a row's order of operations does not depend on R.
#define MR_AVX2 __attribute__((target("avx2,fma")))

MR_AVX2 inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Lanes [0, r) set, r < 8: vmaskmovps reads only those (no read past a row's end).
MR_AVX2 inline __m256i tail_mask8(size_t r) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(r)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

template <bool kL2>
MR_AVX2 inline __m256 accumulate8(__m256 x, __m256 y, __m256 acc) {
  if (kL2) {
    const __m256 d = _mm256_sub_ps(x, y);
    return _mm256_fmadd_ps(d, d, acc);
  }
  return _mm256_fmadd_ps(x, y, acc);
}

template <int R, bool kL2>
MR_AVX2 void f32_block8(const float* v, const float* const* rows, size_t dim, float* out) {
  __m256 acc0[R], acc1[R];
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= dim; i += 16) {
    const __m256 x0 = _mm256_loadu_ps(v + i), x1 = _mm256_loadu_ps(v + i + 8);
    for (int r = 0; r < R; ++r) {
      acc0[r] = accumulate8<kL2>(x0, _mm256_loadu_ps(rows[r] + i), acc0[r]);
      acc1[r] = accumulate8<kL2>(x1, _mm256_loadu_ps(rows[r] + i + 8), acc1[r]);
    }
  }
  if (i + 8 <= dim) {
    const __m256 x = _mm256_loadu_ps(v + i);
    for (int r = 0; r < R; ++r) acc0[r] = accumulate8<kL2>(x, _mm256_loadu_ps(rows[r] + i), acc0[r]);
    i += 8;
  }
  if (i < dim) {
    const __m256i m = tail_mask8(dim - i);
    const __m256 x = _mm256_maskload_ps(v + i, m);
    for (int r = 0; r < R; ++r) acc1[r] = accumulate8<kL2>(x, _mm256_maskload_ps(rows[r] + i, m), acc1[r]);
  }
  for (int r = 0; r < R; ++r) out[r] = hsum8(_mm256_add_ps(acc0[r], acc1[r]));
}

// Eight int8 codes widened to float lanes.
MR_AVX2 inline __m256 widen8(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

template <int R, bool kL2>
MR_AVX2 void i8_block8(const float* v, const int8_t* const* rows, const float* scale, size_t dim, float* out) {
  __m256 acc0[R], acc1[R], s[R];
  for (int r = 0; r < R; ++r) {
    acc0[r] = acc1[r] = _mm256_setzero_ps();
    s[r] = _mm256_set1_ps(scale ? scale[r] : 1.f);
  }
  size_t i = 0;
  for (; i + 16 <= dim; i += 16) {
    const __m256 x0 = _mm256_loadu_ps(v + i), x1 = _mm256_loadu_ps(v + i + 8);
    for (int r = 0; r < R; ++r) {
      const __m256 y0 = widen8(rows[r] + i), y1 = widen8(rows[r] + i + 8);
      acc0[r] = accumulate8<kL2>(x0, kL2 ? _mm256_mul_ps(s[r], y0) : y0, acc0[r]);
      acc1[r] = accumulate8<kL2>(x1, kL2 ? _mm256_mul_ps(s[r], y1) : y1, acc1[r]);
    }
  }
  if (i + 8 <= dim) {
    const __m256 x = _mm256_loadu_ps(v + i);
    for (int r = 0; r < R; ++r) {
      const __m256 y = widen8(rows[r] + i);
      acc0[r] = accumulate8<kL2>(x, kL2 ? _mm256_mul_ps(s[r], y) : y, acc0[r]);
    }
    i += 8;
  }
  if (i < dim) {  // under 8 codes left: copied out, so no load reads past the row
    const __m256 x = _mm256_maskload_ps(v + i, tail_mask8(dim - i));
    for (int r = 0; r < R; ++r) {
      int8_t last[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      std::memcpy(last, rows[r] + i, dim - i);
      const __m256 y = widen8(last);
      acc1[r] = accumulate8<kL2>(x, kL2 ? _mm256_mul_ps(s[r], y) : y, acc1[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = hsum8(_mm256_add_ps(acc0[r], acc1[r]));
}
#endif

}  // namespace

void dot_f32(const float* v, const float* const* rows, size_t n, size_t dim, float* out, SimdLevel level) {
#if defined(MEDRETRIEVE_X86)
  if (at_least(level, SimdLevel::AVX512))
    return in_blocks(n, [&](auto R, size_t i) { f32_block<R, false>(v, rows + i, dim, out + i); });
  if (at_least(level, SimdLevel::AVX2))
    return in_blocks(n, [&](auto R, size_t i) { f32_block8<R, false>(v, rows + i, dim, out + i); });
#endif
  const auto& kt = *kernels::table_for(level);
  for (size_t i = 0; i < n; ++i) out[i] = kt.dot_f32(v, rows[i], dim);
}

void l2sq_f32(const float* v, const float* const* rows, size_t n, size_t dim, float* out, SimdLevel level) {
#if defined(MEDRETRIEVE_X86)
  if (at_least(level, SimdLevel::AVX512))
    return in_blocks(n, [&](auto R, size_t i) { f32_block<R, true>(v, rows + i, dim, out + i); });
  if (at_least(level, SimdLevel::AVX2))
    return in_blocks(n, [&](auto R, size_t i) { f32_block8<R, true>(v, rows + i, dim, out + i); });
#endif
  const auto& kt = *kernels::table_for(level);
  for (size_t i = 0; i < n; ++i) out[i] = kt.l2sq_f32(v, rows[i], dim);
}

void dot_f32_i8(const float* v, const int8_t* const* rows, size_t n, size_t dim, float* out, SimdLevel level) {
#if defined(MEDRETRIEVE_X86)
  if (at_least(level, SimdLevel::AVX512))
    return in_blocks(n, [&](auto R, size_t i) { i8_block<R, false>(v, rows + i, nullptr, dim, out + i); });
  if (at_least(level, SimdLevel::AVX2))
    return in_blocks(n, [&](auto R, size_t i) { i8_block8<R, false>(v, rows + i, nullptr, dim, out + i); });
#endif
  const auto& kt = *kernels::table_for(level);
  std::vector<float> wide(dim);
  for (size_t i = 0; i < n; ++i) {
    for (size_t d = 0; d < dim; ++d) wide[d] = float(rows[i][d]);
    out[i] = kt.dot_f32(v, wide.data(), dim);
  }
}

void l2sq_f32_i8(const float* v, const int8_t* const* rows, const float* scale, size_t n, size_t dim, float* out,
                 SimdLevel level) {
#if defined(MEDRETRIEVE_X86)
  auto scale_at = [scale](size_t i) { return scale ? scale + i : nullptr; };
  if (at_least(level, SimdLevel::AVX512))
    return in_blocks(n, [&](auto R, size_t i) { i8_block<R, true>(v, rows + i, scale_at(i), dim, out + i); });
  if (at_least(level, SimdLevel::AVX2))
    return in_blocks(n, [&](auto R, size_t i) { i8_block8<R, true>(v, rows + i, scale_at(i), dim, out + i); });
#endif
  const auto& kt = *kernels::table_for(level);
  std::vector<float> wide(dim);
  for (size_t i = 0; i < n; ++i) {
    const float s = scale ? scale[i] : 1.f;
    for (size_t d = 0; d < dim; ++d) wide[d] = s * float(rows[i][d]);
    out[i] = kt.l2sq_f32(v, wide.data(), dim);
  }
}

}  // namespace medretrieve::fusion::rows
