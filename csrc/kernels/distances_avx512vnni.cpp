// AVX-512 VNNI kernels: vpdpwssd fuses the int16 multiply-add and the int32
// accumulate of the int8 dot product. Internal linkage only.
#include <immintrin.h>

#include "kernels/distances.h"

#define DOT_I8_STEP(acc, x, y) acc = _mm512_dpwssd_epi32(acc, x, y)

namespace medretrieve::kernels {
#include "kernels/avx512_common.inc"

const KernelTable& avx512vnni_table() {
  static const KernelTable t{SimdLevel::AVX512VNNI, dot_f32, l2sq_f32, dot_i8};
  return t;
}
}  // namespace medretrieve::kernels
