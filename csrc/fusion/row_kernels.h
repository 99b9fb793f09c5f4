// One vector against many rows: the shape of MMR's two full passes (query
// relevance, similarity to the first pick). The kernel table offers pairwise
// kernels only, which load both vectors for every multiply-add; these keep
// the shared vector's chunk in a register and stream four rows past it,
// nearly halving the loads (bench/fusion.py measures the effect). The level
// follows kernels::active() (so MEDRETRIEVE_SIMD caps it too) unless given:
// AVX-512 and AVX2 get their own loops, scalar falls back to the table's
// pairwise kernels.
// Every row gets the same summation order wherever it sits in a group of 4.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/distances.h"

namespace medretrieve::fusion::rows {

// `level` (tests pass each level the CPU runs; it must not exceed
// kernels::cpu_level()) defaults to the active one.
using kernels::SimdLevel;

// out[i] = sum_d v[d] * rows[i][d]
void dot_f32(const float* v, const float* const* rows, size_t n, size_t dim, float* out,
             SimdLevel level = kernels::active().level);
// out[i] = sum_d (v[d] - rows[i][d])^2
void l2sq_f32(const float* v, const float* const* rows, size_t n, size_t dim, float* out,
              SimdLevel level = kernels::active().level);
// out[i] = sum_d v[d] * float(rows[i][d])      (float vector, int8 rows)
void dot_f32_i8(const float* v, const int8_t* const* rows, size_t n, size_t dim, float* out,
                SimdLevel level = kernels::active().level);
// out[i] = sum_d (v[d] - s_i * float(rows[i][d]))^2 with s_i = scale ? scale[i] : 1
void l2sq_f32_i8(const float* v, const int8_t* const* rows, const float* scale, size_t n, size_t dim, float* out,
                 SimdLevel level = kernels::active().level);

}  // namespace medretrieve::fusion::rows
