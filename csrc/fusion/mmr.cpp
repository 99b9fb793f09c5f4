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

// `pair_sim(i, j)` returns sim(candidate i, candidate j); it is called exactly
// once per (remaining candidate, new pick) pair.
template <class PairSim>
MmrResult greedy(size_t n, const float* rel, size_t k, float lambda, PairSim&& pair_sim) {
  MmrResult out;
  k = std::min(k, n);
  out.order.reserve(k);
  out.scores.reserve(k);
  if (k == 0) return out;
  const float a = lambda, b = 1.f - lambda;
  std::vector<float> max_sim(n, 0.f);  // max over the empty set counts as 0
  std::vector<size_t> remaining(n);
  for (size_t i = 0; i < n; ++i) remaining[i] = i;

  for (size_t step = 0; step < k; ++step) {
    size_t best_slot = 0;
    size_t best = remaining[0];
    float best_val = a * rel[best] - b * max_sim[best];
    for (size_t slot = 1; slot < remaining.size(); ++slot) {
      const size_t i = remaining[slot];
      const float v = a * rel[i] - b * max_sim[i];
      // Larger MMR, then larger relevance, then lower position.
      if (v > best_val || (v == best_val && (rel[i] > rel[best] || (rel[i] == rel[best] && i < best)))) {
        best_val = v;
        best = i;
        best_slot = slot;
      }
    }
    out.order.push_back(int64_t(best));
    out.scores.push_back(best_val);
    // Order of `remaining` does not matter: the comparison above names positions.
    remaining[best_slot] = remaining.back();
    remaining.pop_back();
    if (step + 1 == k) break;  // nothing left to pick: skip the last update
    for (size_t i : remaining) {
      const float s = pair_sim(i, best);
      if (!std::isfinite(s)) non_finite_similarity(i, best);
      max_sim[i] = step == 0 ? s : std::max(max_sim[i], s);
    }
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
