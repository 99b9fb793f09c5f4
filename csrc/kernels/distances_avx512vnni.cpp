// AVX-512 VNNI kernels: vpdpbusd fuses the unsigned x signed byte multiply,
// the sum of four products and the int32 accumulate of the int8 dot product.
// Internal linkage only.
#include <immintrin.h>

#include "kernels/distances.h"

#define DOT_U8S8(acc, u, s) _mm512_dpbusd_epi32(acc, u, s)

namespace medretrieve::kernels {
#include "kernels/avx512_common.inc"

const KernelTable& avx512vnni_table() {
  static const KernelTable t{SimdLevel::AVX512VNNI, dot_f32, l2sq_f32, dot_i8, dot_i8_x4_each<dot_i8>,
                             each_row_f32<dot_f32>, each_row_f32<l2sq_f32>,
                             count_bits_words, sketch_estimates, set_bit_ids};
  return t;
}
}  // namespace medretrieve::kernels
