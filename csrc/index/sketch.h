// Sign sketches of int8 codes: one bit per dimension (the code's sign, i.e.
// the side of the trained centre the vector lies on) and one scale a row, in
// an array of their own. A scan of many allowed rows (the filtered search's
// fallback when the filter is correlated with the query) reads them instead
// of the codes: 56 bytes a row at 384-d instead of the slab's 7 cache lines,
// then scores the few best exactly (sketch_scan.h).
//
// The estimate of q . r for a row r = s * code with signs b (in {-1, +1}) is
// sum_d code_q[d] * b[d] * |r|^2 / |r|_1 (RaBitQ's estimator without its
// rotation: the signs' projection on q, divided by their cosine with r, of
// which |r|_1 / |r| is the part that varies by row). Ranked as that scale
// times the sum of code_q[d] over the row's set bits (kernels' sketch_estimates),
// the query's own int8 code against the row's signs. Without the scale the
// best 400 estimates held 79-96% of the exact top 10 on rows whose norms
// about the centre vary (tests' embedding-like rows, 20k x 64 / 384); with it
// 100%, and 99.4-100% on BioASQ passages (112k x 384) and 1M x 768
// embedding-like rows, filters keeping 1%-50%, random and correlated with the
// query (bench/RESULTS.md, "Filtered search").
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "index/huge_pages.h"

namespace medretrieve::index {

// A row: `words` u64 of signs, then one u64 whose low four bytes hold the
// float scale (explicit layout: the row is read as one piece).
class SignSketches {
 public:
  explicit SignSketches(size_t dim) : words_((dim + 63) / 64) {}
  size_t words() const { return words_; }       // u64 of signs a row
  size_t stride() const { return words_ + 1; }  // u64 a row
  // Room for `capacity` rows, keeping the first `keep`.
  void reserve(size_t capacity, size_t keep);
  // Row `id` from its int8 code (bit d set when code[d] > 0) and the code's scale s (r = s * code).
  void set(uint32_t id, const int8_t* code, float scale, size_t dim);
  const uint64_t* data() const { return bits_.get(); }
  const uint64_t* row(uint32_t id) const { return bits_.get() + size_t(id) * stride(); }
  // |r|^2 / |r|_1 of row `id`.
  float scale(uint32_t id) const {
    float f;
    std::memcpy(&f, row(id) + words_, sizeof f);
    return f;
  }
  size_t memory_bytes() const { return capacity_ * stride() * sizeof(uint64_t); }

 private:
  size_t words_, capacity_ = 0;
  std::unique_ptr<uint64_t[], FreeDeleter> bits_;  // huge pages: a scan reads rows at random places
};

}  // namespace medretrieve::index
