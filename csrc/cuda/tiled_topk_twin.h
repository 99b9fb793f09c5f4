// The CPU twin of the GPU's fused exact search (exact_search.cu): the same
// tiles, slices, per-query queues, buffers and final merge, through the same
// selection code (tile_select.h), one query at a time. Its scores are
// computed as the kernels compute them (float32: one fmaf per dimension in
// order; int8: exact int32 dot products, then tile_select::int8_score), so
// both give the same ids and scores up to where a compiler contracts a
// multiply and an add into one rounding. It exists to test the selection
// where no GPU is (CI, ASan/UBSan): tests/native/cpp/test_tile_select.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/tile_select.h"

namespace medretrieve::cuda::twin {

// tile_rows: rows per tile (the kernels: 64 float32, 128 int8); slices: how
// many queues each query keeps before the final merge (the kernels choose it
// from the device's size); parts: threads sharing a query's flush (the
// kernels: 256 / queries per tile); merge_parts: threads sharing a query's
// final merge (the kernels: a warp, 32).
struct TileShape {
  size_t tile_rows = 128;
  size_t slices = 1;
  int parts = 1;
  int merge_parts = 1;
};

// Exact top-k of each query by tiles: score(q, row) -> float is one score.
// ids / scores: nq * k, best first (score descending, then row ascending);
// past what can be returned, id -1 and score -inf. allowed: row bitset
// (tile_select::row_allowed) or null. The steps and the memory layout are the
// kernels' (exact_search.cu): a slot per slice holds the queue's two arrays
// of k and the sorted buffer.
template <class Score>
void tiled_topk(size_t nq, size_t n, size_t k, TileShape shape, const uint64_t* allowed, size_t n_words,
                Score&& score, int64_t* ids, float* scores) {
  namespace ts = tile_select;
  if (k == 0 || k > (size_t(1) << 20)) throw std::invalid_argument("tiled_topk: k must be in [1, 2^20]");
  if (shape.tile_rows == 0 || shape.slices == 0 || shape.parts < 1 || shape.merge_parts < 1)
    throw std::invalid_argument("tiled_topk: empty tile shape");
  if (n >= (size_t(1) << 31)) throw std::invalid_argument("tiled_topk: at most 2^31 - 1 rows");
  const size_t B = shape.tile_rows, S = shape.slices, tiles = (n + B - 1) / B;
  const int K = int(k);
  const size_t stride = 2 * k + B;
  std::vector<ts::Packed> slots(S * stride), buffer(B), tmp(2 * k);
  std::vector<int> sizes(S), current(S);
  for (size_t q = 0; q < nq; ++q) {
    for (size_t s = 0; s < S; ++s) {  // step 1-3: the slice's tiles in a block's order
      ts::Packed* slot = slots.data() + s * stride;
      ts::Packed* sorted = slot + 2 * k;
      int size = 0, cur = 0;
      for (size_t t = s; t < tiles; t += S) {
        const ts::Packed bound = ts::queue_bound(slot + cur * k, size, K);
        int count = 0;
        for (size_t row = t * B; row < std::min(n, (t + 1) * B); ++row) {
          if (!ts::row_allowed(allowed, n_words, uint32_t(row))) continue;
          const float v = score(q, row);
          if (!ts::selectable(v)) continue;
          const ts::Packed p = ts::pack(v, uint32_t(row));
          if (p > bound) buffer[size_t(count++)] = p;
        }
        if (count == 0) continue;
        for (int p = 0; p < shape.parts; ++p) ts::rank_sort_part(buffer.data(), count, sorted, p, shape.parts);
        for (int p = 0; p < shape.parts; ++p)
          ts::merge_part(slot + cur * k, size, sorted, count, K, p, shape.parts, slot + (1 - cur) * k);
        size = ts::merged_size(size, count, K);
        cur ^= 1;
      }
      sizes[s] = size;
      current[s] = cur;
    }
    // step 4: the slices merged two at a time, through two scratch arrays
    const ts::Packed* best = slots.data() + current[0] * k;
    int size = sizes[0];
    for (size_t s = 1; s < S; ++s) {
      ts::Packed* next = tmp.data() + (s & 1 ? 0 : k);
      const ts::Packed* other = slots.data() + s * stride + current[s] * k;
      for (int p = 0; p < shape.merge_parts; ++p)
        ts::merge_part(best, size, other, sizes[s], K, p, shape.merge_parts, next);
      size = ts::merged_size(size, sizes[s], K);
      best = next;
    }
    for (size_t r = 0; r < k; ++r) {
      const bool real = r < size_t(size);
      ids[q * k + r] = real ? int64_t(ts::packed_row(best[r])) : -1;
      scores[q * k + r] = real ? ts::packed_score(best[r]) : -std::numeric_limits<float>::infinity();
    }
  }
}

// float32 rows, as scores_f32 tiles compute them: IP = sum a*b, L2 = -sum (a-b)^2,
// one fmaf per dimension in order.
inline void tiled_topk_f32(const float* queries, size_t nq, const float* db, size_t n, size_t dim, size_t k,
                           bool l2, TileShape shape, const uint64_t* allowed, size_t n_words, int64_t* ids,
                           float* scores) {
  tiled_topk(nq, n, k, shape, allowed, n_words, [&](size_t q, size_t row) {
    const float* a = queries + q * dim;
    const float* b = db + row * dim;
    float acc = 0.f;
    for (size_t d = 0; d < dim; ++d) {
      if (l2) {
        const float diff = a[d] - b[d];
        acc = std::fma(diff, diff, acc);
      } else {
        acc = std::fma(a[d], b[d], acc);
      }
    }
    return l2 ? -acc : acc;
  }, ids, scores);
}

// int8 codes with per-row scales (null: 1), as the tensor-core tiles compute them.
inline void tiled_topk_i8(const int8_t* queries, const float* qscale, size_t nq, const int8_t* db,
                          const float* dbscale, size_t n, size_t dim, size_t k, bool l2, TileShape shape,
                          const uint64_t* allowed, size_t n_words, int64_t* ids, float* scores) {
  auto norm2 = [dim](const int8_t* v) {
    int acc = 0;
    for (size_t d = 0; d < dim; ++d) acc += int(v[d]) * int(v[d]);
    return float(acc);
  };
  tiled_topk(nq, n, k, shape, allowed, n_words, [&](size_t q, size_t row) {
    const int8_t* a = queries + q * dim;
    const int8_t* b = db + row * dim;
    int dot = 0;
    for (size_t d = 0; d < dim; ++d) dot += int(a[d]) * int(b[d]);
    return tile_select::int8_score(dot, qscale ? qscale[q] : 1.f, dbscale ? dbscale[row] : 1.f,
                                   l2 ? norm2(a) : 0.f, l2 ? norm2(b) : 0.f, l2);
  }, ids, scores);
}

}  // namespace medretrieve::cuda::twin
