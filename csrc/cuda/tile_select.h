// Per-query top-k selection inside score tiles, written once for the GPU's
// fused exact search (exact_search.cu) and its CPU twin (tiled_topk_twin.h).
//
// The algorithm (as faiss's BlockSelect / RAFT's brute-force k-selection keep
// k candidates per query per tile instead of writing a score matrix):
//   1. The rows are cut into tiles; tile t belongs to slice t % S. Each
//      (query, slice) owns a queue: its best k so far, sorted best first
//      (two arrays of k, one read while the next is written).
//   2. A tile's scores are offered to the queue's bound (its k-th best, or
//      nothing until k are kept); those that beat it go to a per-query buffer
//      of B entries (B = a tile's rows, so it never overflows).
//   3. After each tile the buffer is sorted (rank_sort_part) and merged with
//      the queue into its other array (merge_part), keeping the best k.
//   4. At the end the S queues of a query are merged, two at a time, into
//      its k results.
// Candidates are packed as one 64-bit number, (order-preserving key of the
// score) << 32 | ~row, so a larger number is a better candidate: score
// descending, then row ascending (the CPU path's tie order), and two
// different rows never compare equal -- the result does not depend on the
// order in which the GPU's threads offer candidates.
// Scores that are NaN or -inf are never selected, as on the CPU path (a
// distance must be below +inf to enter its TopK); -0 ties with +0.
//
// Every function here is plain sequential code with no allocation and no
// standard library, so a CUDA thread and the CPU run the same code; steps 3
// and 4 are split into parts so the threads of a query share them.
#pragma once

#include <cstdint>
#if !defined(__CUDA_ARCH__)
#include <cstring>
#endif

#if defined(__CUDACC__)
#define MR_TILE_HD __host__ __device__ __forceinline__
#else
#define MR_TILE_HD inline
#endif

namespace medretrieve::cuda::tile_select {

// (score key, ~row); 0 never stands for a selectable candidate.
using Packed = unsigned long long;

MR_TILE_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

MR_TILE_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// Order-preserving map of floats onto uint32 (-0 folded onto +0 so they tie).
MR_TILE_HD uint32_t ordered_key(float f) {
  const uint32_t u = float_bits(f == 0.f ? 0.f : f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The score a key stands for (ordered_key's inverse; -0 comes back as +0).
MR_TILE_HD float key_score(uint32_t key) { return bits_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key); }

// Whether a score may be selected at all: not NaN, not -inf.
// (-FLT_MAX is the lowest finite float; NaN compares false.)
MR_TILE_HD bool selectable(float s) { return s >= -3.402823466e38f; }

// An int8 tile's score from its exact int32 dot product (codes stand for
// scale * code): IP = qs xs dot; L2 = -||qs q - xs x||^2 =
// 2 qs xs dot - qs^2 |q|^2 - xs^2 |x|^2 (qn, xn: squared code norms).
MR_TILE_HD float int8_score(int dot, float qs, float xs, float qn, float xn, bool l2) {
  const float s = qs * xs * float(dot);
  return l2 ? 2.f * s - qs * qs * qn - xs * xs * xn : s;
}

// row < 2^32 - 1 (the callers cap rows below 2^31).
MR_TILE_HD Packed pack(float score, uint32_t row) {
  return (Packed(ordered_key(score)) << 32) | Packed(~row);
}
MR_TILE_HD uint32_t packed_row(Packed p) { return ~uint32_t(p & 0xffffffffull); }
MR_TILE_HD float packed_score(Packed p) { return key_score(uint32_t(p >> 32)); }

// Row filter: bit row % 64 of word row / 64 (index::AllowedRows::words'
// layout); rows past the words are not allowed; null words allow every row.
MR_TILE_HD bool row_allowed(const uint64_t* words, uint64_t n_words, uint32_t row) {
  if (!words) return true;
  const uint64_t w = row >> 6;
  return w < n_words && ((words[w] >> (row & 63u)) & 1u);
}

// What a candidate must exceed to enter a queue of `size` (sorted, best
// first) that keeps k: 0 (anything) until it is full, then its k-th best.
MR_TILE_HD Packed queue_bound(const Packed* queue, int size, int k) { return size < k ? 0ull : queue[k - 1]; }

// The parts below split one query's work over `parts` threads (part p of
// them); the results are complete once every part ran (the GPU syncs the
// threads between steps, the CPU twin runs the parts one after another).

// Sorts buffer[0..count) best first into sorted[0..count): each entry goes
// to its rank (how many entries beat it; packed entries never tie). O(count)
// per entry: buffers hold one tile's rows at most.
MR_TILE_HD void rank_sort_part(const Packed* buffer, int count, Packed* sorted, int p, int parts) {
  for (int e = p; e < count; e += parts) {
    int rank = 0;
    for (int o = 0; o < count; ++o) rank += buffer[o] > buffer[e] ? 1 : 0;
    sorted[rank] = buffer[e];
  }
}

MR_TILE_HD int merged_size(int na, int nb, int k) { return na + nb < k ? na + nb : k; }

// Merge path: how many of a's entries are among the first `diag` entries of
// merge(a, b), both sorted best first.
MR_TILE_HD int merge_path(const Packed* a, int na, const Packed* b, int nb, int diag) {
  int lo = diag > nb ? diag - nb : 0, hi = diag < na ? diag : na;
  while (lo < hi) {
    const int i = (lo + hi) / 2;
    if (a[i] > b[diag - i - 1]) {
      lo = i + 1;
    } else {
      hi = i;
    }
  }
  return lo;
}

// The best merged_size(na, nb, k) of two sorted lists into out (aliasing
// neither), part p of parts writing an even share of the positions.
MR_TILE_HD void merge_part(const Packed* a, int na, const Packed* b, int nb, int k, int p, int parts, Packed* out) {
  const int r = merged_size(na, nb, k);
  const int begin = int(int64_t(r) * p / parts), end = int(int64_t(r) * (p + 1) / parts);
  int i = merge_path(a, na, b, nb, begin), j = begin - i;
  for (int o = begin; o < end; ++o) out[o] = (j >= nb || (i < na && a[i] > b[j])) ? a[i++] : b[j++];
}

}  // namespace medretrieve::cuda::tile_select
