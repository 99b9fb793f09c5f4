// Per-query top-k selection inside score tiles, written once for the GPU's
// fused exact search (exact_search.cu) and its CPU twin (tiled_topk_twin.h).
//
// The algorithm (as faiss's BlockSelect / RAFT's brute-force k-selection keep
// k candidates per query per tile instead of writing a score matrix):
//   1. The rows are cut into tiles; tile t belongs to slice t % S. Each
//      (query, slice) owns a queue: its best k so far, sorted best first,
//      stored with room for k + B entries (B = a tile's rows).
//   2. A tile's scores are offered to the queue's bound (its k-th best, or
//      nothing until k are kept); those that beat it go to a per-query buffer
//      of B entries (one tile's rows at most, so it never overflows).
//   3. After each tile the buffer is sorted and merged into the queue, which
//      keeps its best k.
//   4. At the end the S queues of a query are merged into its k results.
// Candidates are packed as one 64-bit number, (order-preserving key of the
// score) << 32 | ~row, so a larger number is a better candidate: score
// descending, then row ascending (the CPU path's tie order), and two
// different rows never compare equal -- the result does not depend on the
// order in which the GPU's threads offer candidates.
// Scores that are NaN or -inf are never selected, as on the CPU path (a
// distance must be below +inf to enter its TopK); -0 ties with +0.
//
// Every function here is sequential, with no allocation and no standard
// library, so a CUDA thread and the CPU run the same code.
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

// Sorts a[0..n) best first (heapsort: no recursion, no extra memory).
MR_TILE_HD void sort_best_first(Packed* a, int n) {
  // A min-heap on top puts the smallest last when popped: best first at the end.
  auto sift = [&](int root, int end) {
    while (true) {
      int child = 2 * root + 1;
      if (child >= end) return;
      if (child + 1 < end && a[child + 1] < a[child]) ++child;
      if (!(a[child] < a[root])) return;
      const Packed t = a[root];
      a[root] = a[child];
      a[child] = t;
      root = child;
    }
  };
  for (int i = n / 2 - 1; i >= 0; --i) sift(i, n);
  for (int end = n - 1; end > 0; --end) {
    const Packed t = a[0];
    a[0] = a[end];
    a[end] = t;
    sift(0, end);
  }
}

// Merges the sorted buffer b[0..nb) into the sorted queue a[0..na) in place
// (a has room for na + nb) and returns the new size, at most k. The merge runs
// from the back so nothing is overwritten before it is read; positions past
// k are skipped, not written.
MR_TILE_HD int merge_into_queue(Packed* a, int na, const Packed* b, int nb, int k) {
  int i = na - 1, j = nb - 1;
  for (int pos = na + nb - 1; j >= 0; --pos) {
    const bool take_a = i >= 0 && a[i] < b[j];  // the smaller of the two goes last
    if (take_a) {
      if (pos < k) a[pos] = a[i];
      --i;
    } else {
      if (pos < k) a[pos] = b[j];
      --j;
    }
  }
  return na + nb < k ? na + nb : k;
}

// Merges two sorted lists into out (not aliasing either): the best k.
MR_TILE_HD int merge_best(const Packed* a, int na, const Packed* b, int nb, int k, Packed* out) {
  int i = 0, j = 0, o = 0;
  while (o < k && (i < na || j < nb)) out[o++] = (j >= nb || (i < na && a[i] > b[j])) ? a[i++] : b[j++];
  return o;
}

// Step 3 for one query: sorts its buffer and merges it into its queue;
// returns the queue's new size.
MR_TILE_HD int flush_buffer(Packed* queue, int size, Packed* buffer, int count, int k) {
  if (count == 0) return size;
  sort_best_first(buffer, count);
  return merge_into_queue(queue, size, buffer, count, k);
}

// Step 4 for one query: merges the queues of its n_slices slices (slice s at
// slots + s * stride, sizes[s] entries) into slots[0..result) and returns the
// result's size (<= k). tmp holds k entries; each slot holds at least k.
MR_TILE_HD int merge_slices(Packed* slots, const int* sizes, int n_slices, uint64_t stride, int k, Packed* tmp) {
  int size = n_slices > 0 ? sizes[0] : 0;
  for (int s = 1; s < n_slices; ++s) {
    const int merged = merge_best(slots, size, slots + s * stride, sizes[s], k, tmp);
    for (int i = 0; i < merged; ++i) slots[i] = tmp[i];
    size = merged;
  }
  return size;
}

}  // namespace medretrieve::cuda::tile_select
