// The spread of the norms of the vectors in an inner-product index, which
// decides how its links are diversified (Hnsw::select_neighbors).
//
// The diversity heuristic keeps a candidate only if it is closer to the base
// element than to every neighbour already kept. With raw inner products a long
// vector is "close" to everything: on MedCPT-like vectors (norms 7-9) 70% of
// the elements kept a single level-0 link, short vectors became reachable only
// through long chains, and recall stopped at 0.988 (keep_float, ef 2048). The
// comparison is therefore made on directions (inner products divided by the
// norms) once the norms differ; on vectors of one norm the two rules are the
// same, and the plain one is kept (bit for bit the graph of earlier versions,
// without the int8 norms' rounding).
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <limits>
#include <mutex>

namespace medretrieve::index {

class NormRange {
 public:
  // Norms that differ by more than this factor count as varied: well above
  // the ~1% rounding of norms read back from int8 codes, well below the
  // spread of unnormalised embeddings (MedCPT-like: 7.1-8.9, a factor 1.26).
  static constexpr float kSpread = 1.05f;

  bool varied() const { return varied_.load(std::memory_order_relaxed); }
  bool known() const { return known_.load(std::memory_order_acquire); }
  // The squared norm every vector has when the norms are not varied (within
  // kSpread of it), 1 before any row is seen.
  float common_norm2() const {
    std::lock_guard<std::mutex> g(mu_);
    return hi_ > 0.f && hi_ >= lo_ ? lo_ * hi_ : 1.f;
  }

  // Widens the range by rows [n x dim] (float inputs of an add).
  void note_rows(const float* rows, size_t n, size_t dim) {
    float lo = std::numeric_limits<float>::infinity(), hi = 0.f;
    for (size_t i = 0; i < n; ++i) {
      double s = 0;
      for (size_t j = 0; j < dim; ++j) s += double(rows[i * dim + j]) * rows[i * dim + j];
      note(float(std::sqrt(s)), lo, hi);
    }
    widen(lo, hi);
  }

  // Widens the range by norms read back from stored elements (an index loaded
  // from a file, before its first add): norm_of(i) for a spread-out sample.
  template <typename NormOf>
  void note_stored(size_t count, NormOf norm_of) {
    constexpr size_t kSample = 10000;
    const size_t step = std::max<size_t>(1, count / kSample);
    float lo = std::numeric_limits<float>::infinity(), hi = 0.f;
    for (size_t i = 0; i < count; i += step) note(norm_of(i), lo, hi);
    widen(lo, hi);
  }

 private:
  // A zero vector has no direction and says nothing about the spread.
  static void note(float norm, float& lo, float& hi) {
    if (!(norm > 0.f)) return;
    lo = std::min(lo, norm);
    hi = std::max(hi, norm);
  }

  void widen(float lo, float hi) {
    std::lock_guard<std::mutex> g(mu_);
    lo_ = std::min(lo_, lo);
    hi_ = std::max(hi_, hi);
    // Once varied, always: more vectors only widen the range.
    if (hi_ > kSpread * lo_) varied_.store(true, std::memory_order_relaxed);
    known_.store(true, std::memory_order_release);
  }

  mutable std::mutex mu_;
  float lo_ = std::numeric_limits<float>::infinity();
  float hi_ = 0.f;
  std::atomic<bool> varied_{false};
  std::atomic<bool> known_{false};
};

}  // namespace medretrieve::index
