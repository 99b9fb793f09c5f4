// Greedy MMR with an incremental max-similarity update; see mmr.h.
#include "fusion/mmr.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/distances.h"

namespace medretrieve::fusion {
namespace {

void check_common(size_t n, const void* rows, const float* relevance, float lambda) {
  if (!(lambda >= 0.f && lambda <= 1.f))  // also rejects NaN
    throw std::invalid_argument("lambda must be in [0, 1], got " + std::to_string(lambda));
  if (n > 0 && (rows == nullptr || relevance == nullptr))
    throw std::invalid_argument("mmr: rows and relevance must not be null");
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(relevance[i]))
      throw std::invalid_argument("mmr: relevance of candidate " + std::to_string(i) + " is not finite");
}

[[noreturn]] void non_finite_similarity(size_t i, size_t j) {
  throw std::invalid_argument("mmr: similarity between candidates " + std::to_string(i) + " and " +
                              std::to_string(j) + " is not finite (NaN or inf in the vectors?)");
}

// A candidate's place in the lazy queue: its MMR value against the picks it
// has seen so far, its relevance and its position. `before(x, y)` is true
// when y should be picked before x: larger MMR, then larger relevance, then
// lower position -- a total order, so the pick is deterministic.
struct Key {
  float value;
  float rel;
  uint32_t pos;
};
inline bool before(const Key& x, const Key& y) {
  if (x.value != y.value) return x.value < y.value;
  if (x.rel != y.rel) return x.rel < y.rel;
  return x.pos > y.pos;
}

// `pair_sim(i, j)` returns sim(candidate i, candidate j).
//
// Lazy form of the incremental update. The first pick is the most relevant
// candidate; it is folded into every candidate's max-sim at once (one kernel
// call each). From then on a candidate's max-sim only grows as picks
// accumulate, so its MMR value against the picks it has seen so far is an
// upper bound on its current value. Candidates wait in a max-heap on that
// bound: when the top has seen every pick its bound is exact and beats every
// other candidate's bound, hence their exact values -- it is the pick;
// otherwise its max-sim is brought up to date (one kernel call per missing
// pick) and it goes back into the heap. Every (candidate, pick) pair costs
// at most one kernel call -- O(k * n * dim) at worst, no n x n matrix -- and
// the picks and scores are exactly those of updating every candidate after
// every pick (a max does not depend on the order it is taken in), while
// candidates that can no longer win are never touched again.
template <class PairSim>
MmrResult greedy(size_t n, const float* rel, size_t k, float lambda, PairSim&& pair_sim) {
  MmrResult out;
  k = std::min(k, n);
  out.order.reserve(k);
  out.scores.reserve(k);
  if (k == 0) return out;
  const float a = lambda, b = 1.f - lambda;

  // Step 0: max over the empty set counts as 0, so the value is a * rel.
  size_t first = 0;
  for (size_t i = 1; i < n; ++i)
    if (before(Key{a * rel[first], rel[first], uint32_t(first)}, Key{a * rel[i], rel[i], uint32_t(i)})) first = i;
  out.order.push_back(int64_t(first));
  out.scores.push_back(a * rel[first] - b * 0.f);
  if (k == 1) return out;

  std::vector<float> max_sim(n, 0.f);
  std::vector<uint32_t> seen(n, 1);  // picks already folded into max_sim[i]
  std::vector<uint32_t> picks{uint32_t(first)};
  picks.reserve(k);
  std::vector<Key> heap;
  heap.reserve(n);
  // Backwards: the relevance pass just walked the rows forwards, so the last
  // ones are the likeliest to still be in cache.
  for (size_t i = n; i-- > 0;) {
    if (i == first) continue;
    if (b != 0.f) {
      const float s = pair_sim(i, first);
      if (!std::isfinite(s)) non_finite_similarity(i, first);
      max_sim[i] = s;
    }
    heap.push_back(Key{a * rel[i] - b * max_sim[i], rel[i], uint32_t(i)});
  }
  std::make_heap(heap.begin(), heap.end(), before);

  while (out.order.size() < k) {
    std::pop_heap(heap.begin(), heap.end(), before);
    Key top = heap.back();
    heap.pop_back();
    const size_t i = top.pos;
    // lambda == 1: similarities carry no weight, every bound is exact.
    if (seen[i] == picks.size() || b == 0.f) {
      out.order.push_back(int64_t(i));
      out.scores.push_back(top.value);
      picks.push_back(uint32_t(i));
      continue;
    }
    for (size_t t = seen[i]; t < picks.size(); ++t) {
      const float s = pair_sim(i, picks[t]);
      if (!std::isfinite(s)) non_finite_similarity(i, picks[t]);
      max_sim[i] = std::max(max_sim[i], s);
    }
    seen[i] = uint32_t(picks.size());
    heap.push_back(Key{a * rel[i] - b * max_sim[i], rel[i], uint32_t(i)});
    std::push_heap(heap.begin(), heap.end(), before);
  }
  return out;
}

}  // namespace

MmrResult mmr_select_f32(const float* const* rows, size_t n, size_t dim, const float* relevance, size_t k,
                         float lambda, Similarity sim) {
  check_common(n, rows, relevance, lambda);
  const kernels::KernelTable& kt = kernels::active();
  switch (sim) {
    case Similarity::InnerProduct:
      return greedy(n, relevance, k, lambda, [&](size_t i, size_t j) { return kt.dot_f32(rows[i], rows[j], dim); });
    case Similarity::NegL2:
      return greedy(n, relevance, k, lambda, [&](size_t i, size_t j) { return -kt.l2sq_f32(rows[i], rows[j], dim); });
    case Similarity::Cosine: {
      // Inverse norms once per candidate (only when a second pick is needed).
      std::vector<float> inv(n, 0.f);
      if (std::min(k, n) > 1)
        for (size_t i = 0; i < n; ++i) {
          const float nn = kt.dot_f32(rows[i], rows[i], dim);
          inv[i] = nn > 0.f ? 1.f / std::sqrt(nn) : 0.f;
        }
      return greedy(n, relevance, k, lambda,
                    [&](size_t i, size_t j) { return kt.dot_f32(rows[i], rows[j], dim) * inv[i] * inv[j]; });
    }
  }
  throw std::invalid_argument("mmr: unknown similarity");
}

MmrResult mmr_select_i8(const int8_t* const* rows, const float* scale, const float* offset, float base,
                        float weight, size_t n, size_t dim, const float* relevance, size_t k, float lambda) {
  check_common(n, rows, relevance, lambda);
  if (dim > kernels::kMaxInt8Dim)
    throw std::invalid_argument("mmr: int8 vectors longer than 131072 are not supported");
  const kernels::KernelTable& kt = kernels::active();
  return greedy(n, relevance, k, lambda, [&](size_t i, size_t j) {
    const float si = scale ? scale[i] : 1.f, sj = scale ? scale[j] : 1.f;
    const float oi = offset ? offset[i] : 0.f, oj = offset ? offset[j] : 0.f;
    return base + oi + oj + weight * si * sj * float(kt.dot_i8(rows[i], rows[j], dim));
  });
}

void relevance_f32(const float* query, const float* const* rows, size_t n, size_t dim, Similarity sim,
                   float* out) {
  const kernels::KernelTable& kt = kernels::active();
  const float qn = sim == Similarity::Cosine ? std::sqrt(kt.dot_f32(query, query, dim)) : 1.f;
  for (size_t i = 0; i < n; ++i) {
    switch (sim) {
      case Similarity::InnerProduct: out[i] = kt.dot_f32(query, rows[i], dim); break;
      case Similarity::NegL2: out[i] = -kt.l2sq_f32(query, rows[i], dim); break;
      case Similarity::Cosine: {
        const float rn = std::sqrt(kt.dot_f32(rows[i], rows[i], dim));
        out[i] = (qn > 0.f && rn > 0.f) ? kt.dot_f32(query, rows[i], dim) / (qn * rn) : 0.f;
        break;
      }
    }
  }
}

void relevance_i8(const float* query, const int8_t* const* rows, const float* scale, size_t n, size_t dim,
                  Similarity sim, float* out) {
  const kernels::KernelTable& kt = kernels::active();
  const float qn = sim == Similarity::Cosine ? std::sqrt(kt.dot_f32(query, query, dim)) : 1.f;
  std::vector<float> wide(dim);
  for (size_t i = 0; i < n; ++i) {
    const float s = scale ? scale[i] : 1.f;
    // Widening is a plain loop the compiler vectorises; the dot goes through
    // the dispatched SIMD kernel.
    const int8_t* r = rows[i];
    if (sim == Similarity::NegL2) {
      for (size_t d = 0; d < dim; ++d) wide[d] = s * float(r[d]);
      out[i] = -kt.l2sq_f32(query, wide.data(), dim);
      continue;
    }
    for (size_t d = 0; d < dim; ++d) wide[d] = float(r[d]);
    const float dot = kt.dot_f32(query, wide.data(), dim);
    if (sim == Similarity::InnerProduct) {
      out[i] = s * dot;
    } else {  // cosine does not depend on the (positive) scale
      const float rn = std::sqrt(kt.dot_f32(wide.data(), wide.data(), dim));
      out[i] = (qn > 0.f && rn > 0.f && s > 0.f) ? dot / (qn * rn) : 0.f;
    }
  }
}

}  // namespace medretrieve::fusion
