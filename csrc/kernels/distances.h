// Distance kernels: float32 and int8, one implementation per SIMD level.
//
// The kernels know nothing about graphs or storage. Every level is compiled
// into the same binary (each file with its own ISA flags) and the best level
// the CPU supports is chosen once, at first use. MEDRETRIEVE_SIMD=scalar|avx2|
// avx512|avx512_vnni caps the level so each one can be tested against scalar.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace medretrieve::kernels {

enum class SimdLevel : int { Scalar = 0, AVX2 = 1, AVX512 = 2, AVX512VNNI = 3 };

const char* level_name(SimdLevel level);

struct KernelTable {
  SimdLevel level;
  // sum_i a[i] * b[i]
  float (*dot_f32)(const float* a, const float* b, size_t n);
  // sum_i (a[i] - b[i])^2
  float (*l2sq_f32)(const float* a, const float* b, size_t n);
  // sum_i a[i] * b[i] in exact int32 arithmetic. Codes are in [-127, 127]
  // so n <= 2^17 cannot overflow (127 * 127 * 2^17 < 2^31).
  int32_t (*dot_i8)(const int8_t* a, const int8_t* b, size_t n);
  // out[j] = dot_i8(q, b[j], n) for j < 4: graph search scores a node's
  // neighbours four at a time, loading and preparing q once per block.
  void (*dot_i8_x4)(const int8_t* q, const int8_t* const* b, size_t n, int32_t* out);
  // out[j] = dot_f32 / l2sq_f32(q, row j, dim) for the n float32 rows starting at `rows`, `stride` bytes apart
  // (a flat scan's block of slabs): bit for bit the pairwise kernel, one call per block (see each_row_f32).
  void (*dot_f32_rows)(const float* q, const char* rows, size_t stride, size_t dim, size_t n, float* out);
  void (*l2sq_f32_rows)(const float* q, const char* rows, size_t stride, size_t dim, size_t n, float* out);
  // The set bits of words[0..n): a row filter's size, counted on every filtered search (a 1M-row filter is 15,625
  // words; without the popcnt instruction each word costs a libgcc call).
  size_t (*count_bits)(const uint64_t* words, size_t n);
  // out[j] = the sum of q[d] over the set bits d of row ids[j] (bit d % 64 of word d / 64: `words` u64 at
  // rows + ids[j] * stride), as a float, times the row's scale (the float in the low four bytes of its word
  // `words`); q holds 64 * words bytes, zero past the dimension. The sign-sketch estimates of the filtered
  // search's scans (index/sketch.h), scaled where the row is at hand; rows are prefetched ahead.
  void (*sketch_estimates)(const int8_t* q, const uint64_t* rows, size_t stride, size_t words, const uint32_t* ids,
                           size_t n, float* out);
  // Writes the indices of the set bits of words[0..n) (bit i % 64 of word i / 64), ascending, to out and returns
  // how many: a row filter's allowed ids before a scan (56k of 112k: 42 us one by one, 9 us by vectors at
  // AVX-512). out holds count_bits(words, n) + kSetBitIdsSlack ids: the vector levels store whole registers.
  size_t (*set_bit_ids)(const uint64_t* words, size_t n, uint32_t* out);
};

constexpr size_t kSetBitIdsSlack = 16;

// Sketch rows sketch_estimates keeps in flight ahead of the one it sums.
constexpr size_t kSketchRowsAhead = 16;
static inline float sketch_row_scale(const uint64_t* row, size_t words) {
  float f;
  std::memcpy(&f, row + words, sizeof f);
  return f;
}
static inline void prefetch_sketch_row(const uint64_t* row, size_t stride) {  // each line of the row's u64s
  for (size_t w = 0; w < stride; w += 8) __builtin_prefetch(row + w);
  __builtin_prefetch(row + stride - 1);
}

// dot_i8_x4 as four calls of a level's dot_i8 (levels whose one-vector kernel
// is already bound by memory rather than by instructions).
template <int32_t (*Dot)(const int8_t*, const int8_t*, size_t)>
void dot_i8_x4_each(const int8_t* q, const int8_t* const* b, size_t n, int32_t* out) {
  for (size_t j = 0; j < 4; ++j) out[j] = Dot(q, b[j], n);
}

// The rows kernels of a level, from its pairwise kernel F (internal to the level's file, so inlined here and
// compiled with that file's ISA flags). One indirect call per block instead of one per row, and the dimensions of
// one or two AVX-512 registers (16, 32) get F's body with the size known, so its loop and tail tests compile away:
// a 16-d scan spent as long on the call and those tests as on the arithmetic. Same operations, same order as F.
// (flatten: GCC does not inline F on its own, as the table also takes F's address.)
template <float (*F)(const float*, const float*, size_t)>
__attribute__((flatten)) void each_row_f32(const float* q, const char* rows, size_t stride, size_t dim, size_t n, float* out) {
  const auto row = [rows, stride](size_t j) { return reinterpret_cast<const float*>(rows + j * stride); };
  switch (dim) {
    case 16:
      for (size_t j = 0; j < n; ++j) out[j] = F(q, row(j), 16);
      return;
    case 32:
      for (size_t j = 0; j < n; ++j) out[j] = F(q, row(j), 32);
      return;
    default:
      for (size_t j = 0; j < n; ++j) out[j] = F(q, row(j), dim);
  }
}

// count_bits with the level's popcount: popcnt from the AVX2 level up (each file compiled with -mpopcnt), a libgcc
// call in the scalar file. Four sums, so the popcounts do not wait on one another. static: each level's file keeps
// its own copy (an inline one would be merged with another file's, compiled with other flags).
static inline size_t count_bits_words(const uint64_t* words, size_t n) {
  size_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += size_t(__builtin_popcountll(words[i]));
    s1 += size_t(__builtin_popcountll(words[i + 1]));
    s2 += size_t(__builtin_popcountll(words[i + 2]));
    s3 += size_t(__builtin_popcountll(words[i + 3]));
  }
  for (; i < n; ++i) s0 += size_t(__builtin_popcountll(words[i]));
  return (s0 + s1) + (s2 + s3);
}

// set_bit_ids one bit at a time: the scalar level's, and the vector levels' for words with few bits set (static, as
// count_bits_words).
static inline uint32_t* set_bit_ids_sparse(uint64_t bits, uint32_t base, uint32_t* out) {
  for (; bits; bits &= bits - 1) *out++ = base + uint32_t(__builtin_ctzll(bits));
  return out;
}
static inline size_t set_bit_ids_words(const uint64_t* words, size_t n, uint32_t* out) {
  uint32_t* o = out;
  for (size_t w = 0; w < n; ++w) o = set_bit_ids_sparse(words[w], uint32_t(w * 64), o);
  return size_t(o - out);
}
// Below this many set bits a word's ids are written one by one at the vector levels too.
constexpr int kDenseWordBits = 8;

// Highest level this CPU and OS support (XSAVE-enabled register state).
SimdLevel cpu_level();
// The active table: min(cpu_level(), MEDRETRIEVE_SIMD) resolved once.
const KernelTable& active();
// A specific level, or nullptr when the CPU cannot run it or it was not built.
const KernelTable* table_for(SimdLevel level);

// Defined in one file per level; each returns its table.
const KernelTable& scalar_table();
#if defined(MEDRETRIEVE_X86)
const KernelTable& avx2_table();
const KernelTable& avx512_table();
const KernelTable& avx512vnni_table();
#endif

constexpr size_t kMaxInt8Dim = size_t(1) << 17;

}  // namespace medretrieve::kernels
