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

namespace medretrieve::kernels {

// Encodes (x - centre) into code; centre may be null (no centring).
// Returns the scale s (0 when the residual is all zeros).
inline float quantize_i8(const float* x, const float* centre, size_t dim, int8_t* code) {
  float amax = 0.f;
  for (size_t i = 0; i < dim; ++i) {
    float r = centre ? x[i] - centre[i] : x[i];
    amax = std::max(amax, std::fabs(r));
  }
  if (amax == 0.f) {
    std::fill(code, code + dim, int8_t(0));
    return 0.f;
  }
  const float scale = amax / 127.f, inv = 127.f / amax;
  for (size_t i = 0; i < dim; ++i) {
    float r = centre ? x[i] - centre[i] : x[i];
    float q = std::nearbyint(r * inv);
    code[i] = static_cast<int8_t>(std::min(127.f, std::max(-127.f, q)));
  }
  return scale;
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
