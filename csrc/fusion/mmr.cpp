// Greedy MMR with an incremental max-similarity update; see mmr.h.
#include "fusion/mmr.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <stdexcept>
#include <string>

#include "fusion/row_kernels.h"
#include "kernels/distances.h"

namespace medretrieve::fusion {
namespace {

// The callers check what users pass (the bindings: lambda, finite relevance;
// search_mmr computes relevance from distances): debug asserts only here.
void check_common(size_t n, const void* rows, const float* relevance, float lambda) {
  assert(lambda >= 0.f && lambda <= 1.f);
  assert(n == 0 || (rows != nullptr && relevance != nullptr));
  (void)n, (void)rows, (void)relevance, (void)lambda;
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
// The heap's comparator as a type, so the heap operations inline it (a
// function pointer would cost a call per comparison).
struct Before {
  bool operator()(const Key& x, const Key& y) const { return before(x, y); }
};

// `refresh(i, picks, m, out)` fills out[t] = sim(candidate i, candidate
// picks[t]) for t < m; `first_pass(p, out)` fills out[i] = sim(i, p) for
// every i. Both go through the one-vector-many-rows kernels where a metric
// has them (row_kernels.h: sim(i, j) then equals sim(j, i) to the bit,
// whichever of the two passes computed it).
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
template <class Refresh, class FirstPass>
MmrResult greedy(size_t n, const float* rel, size_t k, float lambda, Refresh&& refresh, FirstPass&& first_pass) {
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
  std::vector<float> sims(k);  // one candidate's similarities to the picks it has not seen
  std::vector<Key> heap;
  heap.reserve(n);
  if (b != 0.f) first_pass(first, max_sim.data());  // sim(i, first) for every i at once
  for (size_t i = 0; i < n; ++i) {
    if (i == first) continue;
    if (b != 0.f && !std::isfinite(max_sim[i])) non_finite_similarity(i, first);
    heap.push_back(Key{a * rel[i] - b * max_sim[i], rel[i], uint32_t(i)});
  }
  std::make_heap(heap.begin(), heap.end(), Before());

  while (out.order.size() < k) {
    std::pop_heap(heap.begin(), heap.end(), Before());
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
    const size_t missing = picks.size() - seen[i];
    refresh(i, picks.data() + seen[i], missing, sims.data());
    for (size_t t = 0; t < missing; ++t) {
      if (!std::isfinite(sims[t])) non_finite_similarity(i, picks[seen[i] + t]);
      max_sim[i] = std::max(max_sim[i], sims[t]);
    }
    seen[i] = uint32_t(picks.size());
    heap.push_back(Key{a * rel[i] - b * max_sim[i], rel[i], uint32_t(i)});
    std::push_heap(heap.begin(), heap.end(), Before());
  }
  return out;
}

// First pass and refresh through the pairwise similarity, for sims without a row kernel.
template <class PairSim>
auto pairwise_first_pass(size_t n, PairSim& pair_sim) {
  return [n, &pair_sim](size_t p, float* out) {
    for (size_t i = 0; i < n; ++i)
      if (i != p) out[i] = pair_sim(i, p);
  };
}
template <class PairSim>
auto pairwise_refresh(PairSim& pair_sim) {
  return [&pair_sim](size_t i, const uint32_t* picks, size_t m, float* out) {
    for (size_t t = 0; t < m; ++t) out[t] = pair_sim(i, picks[t]);
  };
}

// Row i against the rows of picks[0..m) through a row kernel: v = row i.
template <class Row, class Kernel>
void against_picks(const Row* const* rows, size_t i, const uint32_t* picks, size_t m,
                   std::vector<const Row*>& gathered, Kernel&& kernel, float* out) {
  gathered.resize(m);
  for (size_t t = 0; t < m; ++t) gathered[t] = rows[picks[t]];
  kernel(rows[i], gathered.data(), m, out);
}

}  // namespace

MmrResult mmr_select_f32(const float* const* rows, size_t n, size_t dim, const float* relevance, size_t k,
                         float lambda, Metric sim) {
  check_common(n, rows, relevance, lambda);
  const kernels::KernelTable& kt = kernels::active();
  std::vector<const float*> gathered;
  // out[t] = sim(v, rows[t]) for the metric's row kernel; v = the pick (first pass) or the candidate (refresh).
  auto ip = [&](const float* v, const float* const* r, size_t m, float* out) { rows::dot_f32(v, r, m, dim, out); };
  auto neg_l2 = [&](const float* v, const float* const* r, size_t m, float* out) {
    rows::l2sq_f32(v, r, m, dim, out);
    for (size_t t = 0; t < m; ++t) out[t] = -out[t];
  };
  switch (sim) {
    case Metric::IP:
      return greedy(
          n, relevance, k, lambda,
          [&](size_t i, const uint32_t* p, size_t m, float* out) { against_picks(rows, i, p, m, gathered, ip, out); },
          [&](size_t p, float* out) { ip(rows[p], rows, n, out); });
    case Metric::L2:
      return greedy(
          n, relevance, k, lambda,
          [&](size_t i, const uint32_t* p, size_t m, float* out) { against_picks(rows, i, p, m, gathered, neg_l2, out); },
          [&](size_t p, float* out) { neg_l2(rows[p], rows, n, out); });
    case Metric::Cosine: {
      // Inverse norms once per candidate (only when a second pick is needed).
      std::vector<float> inv(n, 0.f);
      if (std::min(k, n) > 1)
        for (size_t i = 0; i < n; ++i) {
          const float nn = kt.dot_f32(rows[i], rows[i], dim);
          inv[i] = nn > 0.f ? 1.f / std::sqrt(nn) : 0.f;
        }
      return greedy(
          n, relevance, k, lambda,
          [&](size_t i, const uint32_t* p, size_t m, float* out) {
            against_picks(rows, i, p, m, gathered, ip, out);
            for (size_t t = 0; t < m; ++t) out[t] = out[t] * inv[i] * inv[p[t]];
          },
          [&](size_t p, float* out) {
            ip(rows[p], rows, n, out);
            for (size_t i = 0; i < n; ++i) out[i] = out[i] * inv[i] * inv[p];
          });
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
  auto pair = [&](size_t i, size_t j) {
    const float si = scale ? scale[i] : 1.f, sj = scale ? scale[j] : 1.f;
    const float oi = offset ? offset[i] : 0.f, oj = offset ? offset[j] : 0.f;
    return base + oi + oj + weight * si * sj * float(kt.dot_i8(rows[i], rows[j], dim));
  };
  return greedy(n, relevance, k, lambda, pairwise_refresh(pair), pairwise_first_pass(n, pair));
}

void relevance_f32(const float* query, const float* const* rows, size_t n, size_t dim, Metric sim,
                   float* out) {
  const kernels::KernelTable& kt = kernels::active();
  switch (sim) {
    case Metric::IP:
      rows::dot_f32(query, rows, n, dim, out);
      return;
    case Metric::L2:
      rows::l2sq_f32(query, rows, n, dim, out);
      for (size_t i = 0; i < n; ++i) out[i] = -out[i];
      return;
    case Metric::Cosine: {
      const float qn = std::sqrt(kt.dot_f32(query, query, dim));
      rows::dot_f32(query, rows, n, dim, out);
      for (size_t i = 0; i < n; ++i) {
        const float rn = std::sqrt(kt.dot_f32(rows[i], rows[i], dim));
        out[i] = (qn > 0.f && rn > 0.f) ? out[i] / (qn * rn) : 0.f;
      }
      return;
    }
  }
}

void relevance_i8(const float* query, const int8_t* const* rows, const float* scale, size_t n, size_t dim,
                  Metric sim, float* out) {
  const kernels::KernelTable& kt = kernels::active();
  switch (sim) {
    case Metric::IP:
      rows::dot_f32_i8(query, rows, n, dim, out);
      if (scale)
        for (size_t i = 0; i < n; ++i) out[i] *= scale[i];
      return;
    case Metric::L2:
      rows::l2sq_f32_i8(query, rows, scale, n, dim, out);
      for (size_t i = 0; i < n; ++i) out[i] = -out[i];
      return;
    case Metric::Cosine: {  // does not depend on the (positive) scale
      const float qn = std::sqrt(kt.dot_f32(query, query, dim));
      rows::dot_f32_i8(query, rows, n, dim, out);
      for (size_t i = 0; i < n; ++i) {
        const float rn = std::sqrt(float(kt.dot_i8(rows[i], rows[i], dim)));
        const float s = scale ? scale[i] : 1.f;
        out[i] = (qn > 0.f && rn > 0.f && s > 0.f) ? out[i] / (qn * rn) : 0.f;
      }
      return;
    }
  }
}

}  // namespace medretrieve::fusion
