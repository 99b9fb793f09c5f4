// One vector against many rows; see row_kernels.h.
//
// The AVX-512 loops use target attributes instead of per-file ISA flags and
// live in an anonymous namespace: only always-inline intrinsics are compiled
// for AVX-512 here, nothing with external or COMDAT linkage, so no AVX-512
// code can be picked up by callers on an AVX2-only CPU. They run only when
// kernels::active() is at AVX-512 or above.
#include "fusion/row_kernels.h"

#include <vector>

#include "kernels/distances.h"

#if defined(MEDRETRIEVE_X86)
#include <immintrin.h>
#endif

namespace medretrieve::fusion::rows {
namespace {

bool use_avx512() {
#if defined(MEDRETRIEVE_X86)
  return int(kernels::active().level) >= int(kernels::SimdLevel::AVX512);
#else
  return false;
#endif
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

// R rows at once; kL2: sum (v - s*row)^2, else sum v * row. Each row keeps
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

template <bool kL2>
void f32_all(const float* v, const float* const* rows, size_t n, size_t dim, float* out) {
  size_t i = 0;
  for (; i + 4 <= n; i += 4) f32_block<4, kL2>(v, rows + i, dim, out + i);
  for (; i < n; ++i) f32_block<1, kL2>(v, rows + i, dim, out + i);
}

template <bool kL2>
void i8_all(const float* v, const int8_t* const* rows, const float* scale, size_t n, size_t dim, float* out) {
  size_t i = 0;
  for (; i + 4 <= n; i += 4) i8_block<4, kL2>(v, rows + i, scale ? scale + i : nullptr, dim, out + i);
  for (; i < n; ++i) i8_block<1, kL2>(v, rows + i, scale ? scale + i : nullptr, dim, out + i);
}
#endif

}  // namespace

void dot_f32(const float* v, const float* const* rows, size_t n, size_t dim, float* out) {
#if defined(MEDRETRIEVE_X86)
  if (use_avx512()) return f32_all<false>(v, rows, n, dim, out);
#endif
  const auto& kt = kernels::active();
  for (size_t i = 0; i < n; ++i) out[i] = kt.dot_f32(v, rows[i], dim);
}

void l2sq_f32(const float* v, const float* const* rows, size_t n, size_t dim, float* out) {
#if defined(MEDRETRIEVE_X86)
  if (use_avx512()) return f32_all<true>(v, rows, n, dim, out);
#endif
  const auto& kt = kernels::active();
  for (size_t i = 0; i < n; ++i) out[i] = kt.l2sq_f32(v, rows[i], dim);
}

void dot_f32_i8(const float* v, const int8_t* const* rows, size_t n, size_t dim, float* out) {
#if defined(MEDRETRIEVE_X86)
  if (use_avx512()) return i8_all<false>(v, rows, nullptr, n, dim, out);
#endif
  const auto& kt = kernels::active();
  std::vector<float> wide(dim);
  for (size_t i = 0; i < n; ++i) {
    for (size_t d = 0; d < dim; ++d) wide[d] = float(rows[i][d]);
    out[i] = kt.dot_f32(v, wide.data(), dim);
  }
}

void l2sq_f32_i8(const float* v, const int8_t* const* rows, const float* scale, size_t n, size_t dim, float* out) {
#if defined(MEDRETRIEVE_X86)
  if (use_avx512()) return i8_all<true>(v, rows, scale, n, dim, out);
#endif
  const auto& kt = kernels::active();
  std::vector<float> wide(dim);
  for (size_t i = 0; i < n; ++i) {
    const float s = scale ? scale[i] : 1.f;
    for (size_t d = 0; d < dim; ++d) wide[d] = s * float(rows[i][d]);
    out[i] = kt.l2sq_f32(v, wide.data(), dim);
  }
}

}  // namespace medretrieve::fusion::rows
