// AVX-512 (F, BW, VL, DQ) kernels. Compiled with AVX-512 flags; internal linkage only.
#include <immintrin.h>

#include "kernels/distances.h"

#define DOT_U8S8(acc, u, s) _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)))

namespace medretrieve::kernels {
#include "kernels/avx512_common.inc"

const KernelTable& avx512_table() {
  static const KernelTable t{SimdLevel::AVX512, dot_f32, l2sq_f32, dot_i8, dot_i8_x4_each<dot_i8>,
                             each_row_f32<dot_f32>, each_row_f32<l2sq_f32>,
                             count_bits_words, sketch_estimates, set_bit_ids};
  return t;
}
}  // namespace medretrieve::kernels
