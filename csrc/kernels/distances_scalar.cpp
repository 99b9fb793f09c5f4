#include "kernels/distances.h"

namespace medretrieve::kernels {
namespace {

float dot_f32(const float* a, const float* b, size_t n) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

float l2sq_f32(const float* a, const float* b, size_t n) {
  float s0 = 0, s1 = 0;
  size_t i = 0;
  for (; i + 2 <= n; i += 2) {
    float d0 = a[i] - b[i], d1 = a[i + 1] - b[i + 1];
    s0 += d0 * d0;
    s1 += d1 * d1;
  }
  for (; i < n; ++i) {
    float d = a[i] - b[i];
    s0 += d * d;
  }
  return s0 + s1;
}

int32_t dot_i8(const int8_t* a, const int8_t* b, size_t n) {
  int32_t s = 0;
  for (size_t i = 0; i < n; ++i) s += int32_t(a[i]) * int32_t(b[i]);
  return s;
}

void sketch_estimates(const int8_t* q, const uint64_t* rows, size_t stride, size_t words, const uint32_t* ids,
                      size_t n, float* out) {
  for (size_t j = 0; j < n; ++j) {
    if (j + kSketchRowsAhead < n) prefetch_sketch_row(rows + size_t(ids[j + kSketchRowsAhead]) * stride, stride);
    const uint64_t* row = rows + size_t(ids[j]) * stride;
    int32_t s = 0;
    for (size_t w = 0; w < words; ++w)
      for (uint64_t bits = row[w]; bits; bits &= bits - 1) s += q[64 * w + size_t(__builtin_ctzll(bits))];
    out[j] = float(s) * sketch_row_scale(row, words);
  }
}

}  // namespace

const KernelTable& scalar_table() {
  static const KernelTable t{SimdLevel::Scalar, dot_f32, l2sq_f32, dot_i8, dot_i8_x4_each<dot_i8>,
                             each_row_f32<dot_f32>, each_row_f32<l2sq_f32>,
                             count_bits_words, sketch_estimates, set_bit_ids_words};
  return t;
}

}  // namespace medretrieve::kernels
