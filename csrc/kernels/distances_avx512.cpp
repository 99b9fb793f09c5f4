// AVX-512 (F, BW, VL, DQ) kernels. Compiled with AVX-512 flags; internal linkage only.
#include <immintrin.h>

#include "kernels/distances.h"

#define DOT_I8_STEP(acc, x, y) acc = _mm512_add_epi32(acc, _mm512_madd_epi16(x, y))

namespace medretrieve::kernels {
#include "kernels/avx512_common.inc"

const KernelTable& avx512_table() {
  static const KernelTable t{SimdLevel::AVX512, dot_f32, l2sq_f32, dot_i8};
  return t;
}
}  // namespace medretrieve::kernels
